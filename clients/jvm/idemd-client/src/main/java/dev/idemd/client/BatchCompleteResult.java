package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;

/** One item of a batch completion's answer: 200 stored, or 409 lease_lost / not_in_progress. */
public final class BatchCompleteResult extends JsonView {
    public BatchCompleteResult(JsonNode json) {
        super(json);
    }

    public String getKey() {
        return text("key");
    }

    public int getStatus() {
        Integer s = integer("status");
        return s == null ? 0 : s;
    }

    public String getCode() {
        return text("code");
    }

    /** True when the outcome was stored. */
    public boolean isOk() {
        return getStatus() == 200;
    }
}
