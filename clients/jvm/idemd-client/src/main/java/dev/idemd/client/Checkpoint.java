package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;

/** The latest recovery point an earlier attempt left. */
public final class Checkpoint extends JsonView {
    public Checkpoint(JsonNode json) {
        super(json);
    }

    public String getPhase() {
        return text("phase");
    }

    /** The data sent with it (a JSON null node when none). */
    public JsonNode getData() {
        return node("data");
    }

    /** The attempt that left it. */
    public Integer getAttempt() {
        return integer("attempt");
    }
}
