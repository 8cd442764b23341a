package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;

/**
 * A claim's answer: either a new attempt to complete or release
 * ({@link #replayed()} false), or the stored response of a completed
 * submit ({@link #replayed()} true). Fields the answer does not carry are null.
 *
 * @param replayed true for a duplicate of a completed submit: the work must not run again
 * @param state {@code in_progress} or {@code completed}
 * @param id the record's 32-hex id (caller keys)
 * @param attempt the attempt to complete, release, extend or checkpoint with; null on a replay
 * @param leaseExpiresAt the lease's end
 * @param checkpoint on a takeover: the last checkpoint of an earlier attempt, or null
 * @param response the stored response of a replay, or null
 * @param preferenceApplied the answer's Preference-Applied header ({@code wait=N} when it waited), or null
 * @param raw the JSON object as idemd sent it, for fields a newer idemd adds
 */
public record Claimed(boolean replayed, String state, String id, Integer attempt, Instant leaseExpiresAt,
        Checkpoint checkpoint, StoredResponse response, String preferenceApplied, JsonNode raw) {
}
