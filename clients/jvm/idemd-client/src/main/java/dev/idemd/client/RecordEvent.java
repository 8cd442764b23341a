package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;

/** One event of a record's audit trail. */
public final class RecordEvent extends JsonView {
    public RecordEvent(JsonNode json) {
        super(json);
    }

    public Instant getAt() {
        return instant("at");
    }

    /** claimed, taken_over, extended, checkpoint, completed, released, revoked or expired. */
    public String getEvent() {
        return text("event");
    }

    public Integer getAttempt() {
        return integer("attempt");
    }

    public Integer getStatus() {
        return integer("status");
    }

    public String getPhase() {
        return text("phase");
    }

    /** {@code api_key:<id>}, {@code route:<METHOD> <path>} or {@code sweeper}. */
    public String getBy() {
        return text("by");
    }
}
