package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;

/**
 * One event of a record's audit trail. Fields the event does not carry are null.
 *
 * @param at when it happened
 * @param event claimed, taken_over, extended, checkpoint, completed, released, revoked or expired
 * @param attempt the attempt it concerns
 * @param status the stored status (completed)
 * @param phase the checkpoint's phase (checkpoint)
 * @param by {@code api_key:<id>}, {@code route:<METHOD> <path>} or {@code sweeper}
 * @param raw the JSON object as idemd sent it, for fields a newer idemd adds
 */
public record RecordEvent(Instant at, String event, Integer attempt, Integer status, String phase, String by,
        JsonNode raw) {
}
