package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;

/**
 * The answer of complete, release, extend and checkpoint: {@code state},
 * {@code attempt}, {@code lease_expires_at}, {@code expires_at} and the
 * stored {@code response}, as far as the call sends them (null when absent).
 *
 * @param state the record's state
 * @param attempt the attempt
 * @param leaseExpiresAt the lease's end
 * @param expiresAt the record's end
 * @param response the stored response
 * @param raw the JSON object as idemd sent it, for fields a newer idemd adds
 */
public record SimpleResult(String state, Integer attempt, Instant leaseExpiresAt, Instant expiresAt,
        StoredResponse response, JsonNode raw) {
}
