package dev.idemd.client;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.idemd.client.internal.Json;

/**
 * An operation's policy for {@link IdemdClient#putOperation}. The three
 * durations are required; the rest is optional. Immutable.
 */
public final class OperationPolicy {
    private final ObjectNode json;

    private OperationPolicy(ObjectNode json) {
        this.json = json;
    }

    public static OperationPolicy of(int tokenTtlSeconds, int retentionSeconds, int leaseSeconds) {
        ObjectNode o = JsonNodeFactory.instance.objectNode();
        o.put("token_ttl_seconds", tokenTtlSeconds);
        o.put("retention_seconds", retentionSeconds);
        o.put("lease_seconds", leaseSeconds);
        return new OperationPolicy(o);
    }

    private OperationPolicy with(String name, Object value) {
        ObjectNode o = json.deepCopy();
        o.set(name, Json.tree(value));
        return new OperationPolicy(o);
    }

    /** The version counter it guards, e.g. {@code orders:{subject}}. */
    public OperationPolicy withVersionKey(String versionKey) {
        return with("version_key", versionKey);
    }

    public OperationPolicy withRequireVersion(boolean require) {
        return with("require_version", require);
    }

    /** How long a duplicate waits for an in-progress outcome when it sends no Prefer (0..60). */
    public OperationPolicy withWaitSeconds(int seconds) {
        return with("wait_seconds", seconds);
    }

    public OperationPolicy withAuditRetentionSeconds(long seconds) {
        return with("audit_retention_seconds", seconds);
    }

    /** Any other policy field a newer idemd knows. */
    public OperationPolicy withField(String name, Object value) {
        return with(name, value);
    }

    ObjectNode toJson() {
        return json.deepCopy();
    }
}
