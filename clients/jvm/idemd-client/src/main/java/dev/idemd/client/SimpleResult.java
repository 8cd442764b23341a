package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;

/**
 * The answer of complete, release, extend and checkpoint: {@code state},
 * {@code attempt}, {@code lease_expires_at}, {@code expires_at} and the
 * stored {@code response}, as far as the call sends them.
 */
public final class SimpleResult extends JsonView {
    public SimpleResult(JsonNode json) {
        super(json);
    }

    public String getState() {
        return text("state");
    }

    public Integer getAttempt() {
        return integer("attempt");
    }

    public Instant getLeaseExpiresAt() {
        return instant("lease_expires_at");
    }

    public Instant getExpiresAt() {
        return instant("expires_at");
    }

    public StoredResponse getResponse() {
        JsonNode n = node("response");
        return n == null || n.isNull() ? null : new StoredResponse(n);
    }
}
