package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * {@code /healthz} or {@code /readyz}: {@code ok}, {@code ready} or {@code not_ready} with a reason.
 *
 * @param status {@code ok}, {@code ready} or {@code not_ready}
 * @param reason why it is not ready, or null
 * @param httpStatus 200, or 503 when not ready
 * @param raw the JSON object as idemd sent it, for fields a newer idemd adds
 */
public record Health(String status, String reason, int httpStatus, JsonNode raw) {
    /** True for a 200. */
    public boolean isUp() {
        return httpStatus == 200;
    }
}
