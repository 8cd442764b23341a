package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;

/** One item of a batch claim's answer: what a single claim of that key would have answered. */
public final class BatchClaimResult extends JsonView {
    public BatchClaimResult(JsonNode json) {
        super(json);
    }

    public String getKey() {
        return text("key");
    }

    /** 201 new, 200 replayed, 409 in progress, 4xx refused. */
    public int getStatus() {
        Integer s = integer("status");
        return s == null ? 0 : s;
    }

    /** The problem code of a refusal, or null. */
    public String getCode() {
        return text("code");
    }

    public String getId() {
        return text("id");
    }

    public Integer getAttempt() {
        return integer("attempt");
    }

    public Instant getLeaseExpiresAt() {
        return instant("lease_expires_at");
    }

    public Checkpoint getCheckpoint() {
        JsonNode n = node("checkpoint");
        return n == null || n.isNull() ? null : new Checkpoint(n);
    }

    public StoredResponse getResponse() {
        JsonNode n = node("response");
        return n == null || n.isNull() ? null : new StoredResponse(n);
    }

    /** 201: the key is claimed for this caller. */
    public boolean isClaimed() {
        return getStatus() == 201;
    }

    /** 200: already completed, {@link #getResponse()} is the stored outcome. */
    public boolean isReplayed() {
        return getStatus() == 200;
    }

    /** The refusal as the exception a single claim would have thrown (null for 200 and 201). */
    public IdemdProblemException toException() {
        if (getStatus() == 200 || getStatus() == 201) {
            return null;
        }
        return Problems.of(getStatus(), getCode(), "batch claim item refused", null, json, null);
    }
}
