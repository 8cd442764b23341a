package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import dev.idemd.client.internal.Problems;
import java.time.Instant;

/**
 * One item of a batch claim's answer: what a single claim of that key would
 * have answered. Fields the item does not carry are null.
 *
 * @param key the caller key
 * @param status 201 new, 200 replayed, 409 in progress, 4xx refused (0 when idemd sent none)
 * @param code the problem code of a refusal, or null
 * @param id the record's id
 * @param attempt the attempt to complete or release with
 * @param leaseExpiresAt the lease's end
 * @param checkpoint an earlier attempt's last checkpoint
 * @param response the stored outcome (200)
 * @param raw the JSON object as idemd sent it, for fields a newer idemd adds
 */
public record BatchClaimResult(String key, int status, String code, String id, Integer attempt,
        Instant leaseExpiresAt, Checkpoint checkpoint, StoredResponse response, JsonNode raw) {
    /** 201: the key is claimed for this caller. */
    public boolean isClaimed() {
        return status == 201;
    }

    /** 200: already completed, {@link #response()} is the stored outcome. */
    public boolean isReplayed() {
        return status == 200;
    }

    /** The refusal as the exception a single claim would have thrown (null for 200 and 201). */
    public IdemdProblemException toException() {
        if (status == 200 || status == 201) {
            return null;
        }
        return Problems.of(status, code, "batch claim item refused", null, raw, null);
    }
}
