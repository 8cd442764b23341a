package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;

/**
 * A claim's answer: either a new attempt to complete or release
 * ({@link #isReplayed()} false), or the stored response of a completed
 * submit ({@link #isReplayed()} true).
 */
public final class Claimed extends JsonView {
    private final boolean replayed;
    private final String preferenceApplied;

    public Claimed(JsonNode json, boolean replayed, String preferenceApplied) {
        super(json);
        this.replayed = replayed;
        this.preferenceApplied = preferenceApplied;
    }

    /** True for a duplicate of a completed submit: the work must not run again. */
    public boolean isReplayed() {
        return replayed;
    }

    /** {@code in_progress} or {@code completed}. */
    public String getState() {
        return text("state");
    }

    /** The record's 32-hex id (caller keys). */
    public String getId() {
        return text("id");
    }

    /** The attempt to complete, release, extend or checkpoint with; null on a replay. */
    public Integer getAttempt() {
        return integer("attempt");
    }

    public Instant getLeaseExpiresAt() {
        return instant("lease_expires_at");
    }

    /** On a takeover: the last checkpoint of an earlier attempt, or null. */
    public Checkpoint getCheckpoint() {
        JsonNode n = node("checkpoint");
        return n == null || n.isNull() ? null : new Checkpoint(n);
    }

    /** The stored response of a replay, or null. */
    public StoredResponse getResponse() {
        JsonNode n = node("response");
        return n == null || n.isNull() ? null : new StoredResponse(n);
    }

    /** The answer's Preference-Applied header ({@code wait=N} when it waited), or null. */
    public String getPreferenceApplied() {
        return preferenceApplied;
    }
}
