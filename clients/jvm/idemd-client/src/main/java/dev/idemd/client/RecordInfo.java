package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;

/**
 * A token's or a caller key's record, as introspection and the records API
 * return it. Fields a given call does not send are null.
 *
 * @param id the record's 32-hex id
 * @param operation its operation
 * @param key the caller key (caller-key records), or null
 * @param subject its subject
 * @param state {@code issued}, {@code in_progress}, {@code completed}, {@code revoked} or {@code expired}
 * @param expiresAt when it expires
 * @param attempt the latest claim's number (0: never claimed)
 * @param leaseExpiresAt the lease's end
 * @param response the stored response
 * @param checkpoint the latest checkpoint
 * @param replays how many duplicates got the stored response (records API; may lag by 10 s)
 * @param raw the JSON object as idemd sent it, for fields a newer idemd adds
 */
public record RecordInfo(String id, String operation, String key, String subject, String state, Instant expiresAt,
        Integer attempt, Instant leaseExpiresAt, StoredResponse response, Checkpoint checkpoint, Long replays,
        JsonNode raw) {
}
