package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import dev.idemd.client.internal.Json;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Collections;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.Map;

/** A stored outcome: status, headers and a JSON body or raw bytes. */
public final class StoredResponse extends JsonView {
    public StoredResponse(JsonNode json) {
        super(json);
    }

    public int getStatus() {
        Integer s = integer("status");
        return s == null ? 0 : s;
    }

    /** The stored headers, name to value. */
    public Map<String, String> getHeaders() {
        Map<String, String> h = new LinkedHashMap<>();
        JsonNode n = node("headers");
        if (n != null) {
            for (Iterator<Map.Entry<String, JsonNode>> it = n.fields(); it.hasNext();) {
                Map.Entry<String, JsonNode> e = it.next();
                h.put(e.getKey(), e.getValue().asText());
            }
        }
        return Collections.unmodifiableMap(h);
    }

    /** The JSON body (a JSON null node for an empty body), or null when the body is raw bytes. */
    public JsonNode getBody() {
        return node("body");
    }

    /** True when the body was stored as raw bytes ({@code body_base64}). */
    public boolean isBinary() {
        return node("body_base64") != null;
    }

    /** The body as bytes: the raw bytes, or the JSON body serialized (empty for null). */
    public byte[] getBodyBytes() {
        String b64 = text("body_base64");
        if (b64 != null) {
            return Base64.getDecoder().decode(b64);
        }
        JsonNode b = node("body");
        if (b == null || b.isNull()) {
            return new byte[0];
        }
        return Json.write(b).getBytes(StandardCharsets.UTF_8);
    }

    /** The body's JSON value mapped to TYPE (null for an empty body). */
    public <T> T bodyAs(Class<T> type) {
        JsonNode b = node("body");
        if (b == null) {
            return Json.read(getBodyBytes(), type);
        }
        return b.isNull() ? null : Json.convert(b, type);
    }
}
