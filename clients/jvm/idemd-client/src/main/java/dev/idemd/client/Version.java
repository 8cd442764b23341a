package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * A version counter and its value.
 *
 * @param key the counter's key
 * @param version its value (0 when idemd sent none)
 * @param raw the JSON object as idemd sent it, for fields a newer idemd adds
 */
public record Version(String key, long version, JsonNode raw) {
    /** The value as a strong ETag, for If-Match: {@code "7"}. */
    public String etag() {
        return "\"" + version + "\"";
    }
}
