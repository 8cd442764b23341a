package dev.idemd.client.internal;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import dev.idemd.client.BatchClaimResult;
import dev.idemd.client.BatchCompleteResult;
import dev.idemd.client.Checkpoint;
import dev.idemd.client.Claimed;
import dev.idemd.client.Health;
import dev.idemd.client.IssuedToken;
import dev.idemd.client.Operation;
import dev.idemd.client.RecordEvent;
import dev.idemd.client.RecordInfo;
import dev.idemd.client.RecordPage;
import dev.idemd.client.SimpleResult;
import dev.idemd.client.StoredResponse;
import dev.idemd.client.Version;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Internal: not part of the client's API, may change in any release.
 * idemd's JSON answers read into the client's records. Optional fields are
 * null when absent; each record keeps the object as sent as its {@code raw}
 * component (a missing object reads as an empty one).
 */
public final class Answers {
    private Answers() {
    }

    /** JSON, or an empty object for null. */
    public static JsonNode object(JsonNode json) {
        return json != null ? json : JsonNodeFactory.instance.objectNode();
    }

    public static String text(JsonNode json, String name) {
        JsonNode n = json.get(name);
        return n == null || n.isNull() ? null : n.asText();
    }

    public static Integer integer(JsonNode json, String name) {
        JsonNode n = json.get(name);
        return n == null || !n.isNumber() ? null : n.intValue();
    }

    public static Long longValue(JsonNode json, String name) {
        JsonNode n = json.get(name);
        return n == null || !n.isNumber() ? null : n.longValue();
    }

    public static Instant instant(JsonNode json, String name) {
        String t = text(json, name);
        return t == null ? null : Instant.parse(t);
    }

    /** The member NAME, or null when absent (a JSON null stays a null node). */
    public static JsonNode node(JsonNode json, String name) {
        JsonNode n = json.get(name);
        return n == null || n.isMissingNode() ? null : n;
    }

    private static int status(JsonNode json) {
        Integer s = integer(json, "status");
        return s == null ? 0 : s;
    }

    private static boolean present(JsonNode n) {
        return n != null && !n.isNull();
    }

    public static StoredResponse storedResponse(JsonNode json) {
        JsonNode j = object(json);
        Map<String, String> h = new LinkedHashMap<>();
        JsonNode n = node(j, "headers");
        if (n != null) {
            for (Iterator<Map.Entry<String, JsonNode>> it = n.fields(); it.hasNext();) {
                Map.Entry<String, JsonNode> e = it.next();
                h.put(e.getKey(), e.getValue().asText());
            }
        }
        return new StoredResponse(status(j), Collections.unmodifiableMap(h), node(j, "body"), j);
    }

    /** The member NAME as a stored response, or null when absent or null. */
    public static StoredResponse storedResponse(JsonNode json, String name) {
        JsonNode n = node(json, name);
        return present(n) ? storedResponse(n) : null;
    }

    public static Checkpoint checkpoint(JsonNode json) {
        JsonNode j = object(json);
        return new Checkpoint(text(j, "phase"), node(j, "data"), integer(j, "attempt"), j);
    }

    /** The member NAME as a checkpoint, or null when absent or null. */
    public static Checkpoint checkpoint(JsonNode json, String name) {
        JsonNode n = node(json, name);
        return present(n) ? checkpoint(n) : null;
    }

    public static Claimed claimed(JsonNode json, boolean replayed, String preferenceApplied) {
        JsonNode j = object(json);
        return new Claimed(replayed, text(j, "state"), text(j, "id"), integer(j, "attempt"),
                instant(j, "lease_expires_at"), checkpoint(j, "checkpoint"), storedResponse(j, "response"),
                preferenceApplied, j);
    }

    public static SimpleResult simpleResult(JsonNode json) {
        JsonNode j = object(json);
        return new SimpleResult(text(j, "state"), integer(j, "attempt"), instant(j, "lease_expires_at"),
                instant(j, "expires_at"), storedResponse(j, "response"), j);
    }

    public static IssuedToken issuedToken(JsonNode json) {
        JsonNode j = object(json);
        return new IssuedToken(text(j, "token"), text(j, "id"), text(j, "operation"), text(j, "subject"),
                instant(j, "expires_at"), longValue(j, "version"), j);
    }

    public static RecordInfo recordInfo(JsonNode json) {
        JsonNode j = object(json);
        return new RecordInfo(text(j, "id"), text(j, "operation"), text(j, "key"), text(j, "subject"),
                text(j, "state"), instant(j, "expires_at"), integer(j, "attempt"), instant(j, "lease_expires_at"),
                storedResponse(j, "response"), checkpoint(j, "checkpoint"), longValue(j, "replays"), j);
    }

    public static RecordPage recordPage(JsonNode json) {
        JsonNode j = object(json);
        List<RecordInfo> records = new ArrayList<>();
        JsonNode n = node(j, "records");
        if (n != null) {
            n.forEach(r -> records.add(recordInfo(r)));
        }
        return new RecordPage(Collections.unmodifiableList(records), text(j, "next_cursor"), j);
    }

    public static RecordEvent recordEvent(JsonNode json) {
        JsonNode j = object(json);
        return new RecordEvent(instant(j, "at"), text(j, "event"), integer(j, "attempt"), integer(j, "status"),
                text(j, "phase"), text(j, "by"), j);
    }

    public static BatchClaimResult batchClaimResult(JsonNode json) {
        JsonNode j = object(json);
        return new BatchClaimResult(text(j, "key"), status(j), text(j, "code"), text(j, "id"), integer(j, "attempt"),
                instant(j, "lease_expires_at"), checkpoint(j, "checkpoint"), storedResponse(j, "response"), j);
    }

    public static BatchCompleteResult batchCompleteResult(JsonNode json) {
        JsonNode j = object(json);
        return new BatchCompleteResult(text(j, "key"), status(j), text(j, "code"), j);
    }

    public static Version version(JsonNode json) {
        JsonNode j = object(json);
        Long v = longValue(j, "version");
        return new Version(text(j, "key"), v == null ? 0 : v, j);
    }

    public static Operation operation(JsonNode json) {
        JsonNode j = object(json);
        JsonNode rv = node(j, "require_version");
        return new Operation(text(j, "name"), integer(j, "token_ttl_seconds"), integer(j, "retention_seconds"),
                integer(j, "lease_seconds"), text(j, "version_key"), rv != null && rv.asBoolean(),
                integer(j, "wait_seconds"), longValue(j, "audit_retention_seconds"), j);
    }

    public static Health health(JsonNode json, int httpStatus) {
        JsonNode j = object(json);
        return new Health(text(j, "status"), text(j, "reason"), httpStatus, j);
    }
}
