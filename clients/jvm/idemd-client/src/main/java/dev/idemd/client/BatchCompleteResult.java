package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * One item of a batch completion's answer: 200 stored, or 409 lease_lost / not_in_progress.
 *
 * @param key the caller key
 * @param status 200, or the refusal's status (0 when idemd sent none)
 * @param code the problem code of a refusal, or null
 * @param raw the JSON object as idemd sent it, for fields a newer idemd adds
 */
public record BatchCompleteResult(String key, int status, String code, JsonNode raw) {
    /** True when the outcome was stored. */
    public boolean isOk() {
        return status == 200;
    }
}
