package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;

/** {@code /healthz} or {@code /readyz}: {@code ok}, {@code ready} or {@code not_ready} with a reason. */
public final class Health extends JsonView {
    private final int httpStatus;

    public Health(JsonNode json, int httpStatus) {
        super(json);
        this.httpStatus = httpStatus;
    }

    public String getStatus() {
        return text("status");
    }

    public String getReason() {
        return text("reason");
    }

    /** 200, or 503 when not ready. */
    public int getHttpStatus() {
        return httpStatus;
    }

    public boolean isUp() {
        return httpStatus == 200;
    }
}
