package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import dev.idemd.client.internal.Json;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Map;

/**
 * A stored outcome: status, headers and a JSON body or raw bytes.
 *
 * @param status the stored status (0 when idemd sent none)
 * @param headers the stored headers, name to value (unmodifiable)
 * @param body the JSON body (a JSON null node for an empty body), or null when the body is raw bytes
 * @param raw the JSON object as idemd sent it, for fields a newer idemd adds
 */
public record StoredResponse(int status, Map<String, String> headers, JsonNode body, JsonNode raw) {
    /** True when the body was stored as raw bytes ({@code body_base64}). */
    public boolean isBinary() {
        return raw.get("body_base64") != null;
    }

    /** The body as bytes: the raw bytes, or the JSON body serialized (empty for null). */
    public byte[] bodyBytes() {
        JsonNode b64 = raw.get("body_base64");
        if (b64 != null && !b64.isNull()) {
            return Base64.getDecoder().decode(b64.asText());
        }
        if (body == null || body.isNull()) {
            return new byte[0];
        }
        return Json.write(body).getBytes(StandardCharsets.UTF_8);
    }

    /** The body's JSON value mapped to TYPE (null for an empty body). */
    public <T> T bodyAs(Class<T> type) {
        if (body == null) {
            return Json.read(bodyBytes(), type);
        }
        return body.isNull() ? null : Json.convert(body, type);
    }
}
