package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * The latest recovery point an earlier attempt left.
 *
 * @param phase the phase it names
 * @param data the data sent with it (a JSON null node when none)
 * @param attempt the attempt that left it
 * @param raw the JSON object as idemd sent it, for fields a newer idemd adds
 */
public record Checkpoint(String phase, JsonNode data, Integer attempt, JsonNode raw) {
}
