package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;

/** An operation's policy as idemd stores it. */
public final class Operation extends JsonView {
    public Operation(JsonNode json) {
        super(json);
    }

    public String getName() {
        return text("name");
    }

    public Integer getTokenTtlSeconds() {
        return integer("token_ttl_seconds");
    }

    public Integer getRetentionSeconds() {
        return integer("retention_seconds");
    }

    public Integer getLeaseSeconds() {
        return integer("lease_seconds");
    }

    public String getVersionKey() {
        return text("version_key");
    }

    public boolean isRequireVersion() {
        JsonNode n = node("require_version");
        return n != null && n.asBoolean();
    }

    public Integer getWaitSeconds() {
        return integer("wait_seconds");
    }

    public Long getAuditRetentionSeconds() {
        return longValue("audit_retention_seconds");
    }
}
