package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;

/**
 * A token's or a caller key's record, as introspection and the records API
 * return it. Fields a given call does not send are null.
 */
public final class RecordInfo extends JsonView {
    public RecordInfo(JsonNode json) {
        super(json);
    }

    public String getId() {
        return text("id");
    }

    public String getOperation() {
        return text("operation");
    }

    /** The caller key (caller-key records), or null. */
    public String getKey() {
        return text("key");
    }

    public String getSubject() {
        return text("subject");
    }

    /** {@code issued}, {@code in_progress}, {@code completed}, {@code revoked} or {@code expired}. */
    public String getState() {
        return text("state");
    }

    public Instant getExpiresAt() {
        return instant("expires_at");
    }

    /** The latest claim's number (0: never claimed). */
    public Integer getAttempt() {
        return integer("attempt");
    }

    public Instant getLeaseExpiresAt() {
        return instant("lease_expires_at");
    }

    public StoredResponse getResponse() {
        JsonNode n = node("response");
        return n == null || n.isNull() ? null : new StoredResponse(n);
    }

    public Checkpoint getCheckpoint() {
        JsonNode n = node("checkpoint");
        return n == null || n.isNull() ? null : new Checkpoint(n);
    }

    /** How many duplicates got the stored response (records API; may lag by 10 s). */
    public Long getReplays() {
        return longValue("replays");
    }
}
