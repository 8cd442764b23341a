package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.idemd.client.internal.Json;
import java.util.Arrays;
import java.util.Base64;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;

/**
 * What to store as a submit's outcome: a status, headers and either a JSON
 * body (any value Jackson can serialize) or raw bytes. Two outcomes are
 * equal when their status, headers, JSON body and bytes are.
 *
 * @param status the status, 100..599
 * @param headers the headers to store (unmodifiable; null: none)
 * @param body the JSON body, or null (empty body or raw bytes)
 * @param content the raw bytes, or null when the body is JSON
 */
public record Outcome(int status, Map<String, String> headers, JsonNode body, byte[] content) {
    public Outcome {
        if (status < 100 || status > 599) {
            throw new IllegalArgumentException("status must be 100..599: " + status);
        }
        headers = headers == null ? Collections.emptyMap()
                : Collections.unmodifiableMap(new LinkedHashMap<>(headers));
        content = content == null ? null : content.clone();
    }

    /** STATUS with BODY as JSON (null: an empty body). */
    public static Outcome of(int status, Object body) {
        return new Outcome(status, null, body == null ? null : Json.tree(body), null);
    }

    /** STATUS with BODY as JSON and HEADERS. */
    public static Outcome of(int status, Object body, Map<String, String> headers) {
        return new Outcome(status, headers, body == null ? null : Json.tree(body), null);
    }

    /** 200 with BODY as JSON. */
    public static Outcome ok(Object body) {
        return of(200, body);
    }

    /** STATUS with raw CONTENT bytes (stored as {@code body_base64}). */
    public static Outcome bytes(int status, byte[] content, Map<String, String> headers) {
        return new Outcome(status, headers, null, content == null ? new byte[0] : content);
    }

    /** The raw bytes (a copy), or null when the body is JSON. */
    @Override
    public byte[] content() {
        return content == null ? null : content.clone();
    }

    /** The JSON fields of a completion: status, headers?, body or body_base64. */
    ObjectNode toJson() {
        ObjectNode o = JsonNodeFactory.instance.objectNode();
        o.put("status", status);
        if (!headers.isEmpty()) {
            ObjectNode h = o.putObject("headers");
            headers.forEach(h::put);
        }
        if (content != null) {
            o.put("body_base64", Base64.getEncoder().encodeToString(content));
        } else if (body != null) {
            o.set("body", body);
        }
        return o;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Outcome x && status == x.status && headers.equals(x.headers)
                && Objects.equals(body, x.body) && Arrays.equals(content, x.content);
    }

    @Override
    public int hashCode() {
        return Objects.hash(status, headers, body, Arrays.hashCode(content));
    }

    @Override
    public String toString() {
        return "Outcome{" + status + ", " + headers + ", " + (content != null ? content.length + " bytes" : body) + "}";
    }
}
