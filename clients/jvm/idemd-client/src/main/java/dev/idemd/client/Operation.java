package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * An operation's policy as idemd stores it. Optional fields are null when absent.
 *
 * @param name the operation's name
 * @param tokenTtlSeconds how long an issued token lives
 * @param retentionSeconds how long a completed record is kept
 * @param leaseSeconds a claim's lease
 * @param versionKey the version counter it guards, or null
 * @param requireVersion whether a claim must carry a version
 * @param waitSeconds how long a duplicate waits by default, or null
 * @param auditRetentionSeconds how long the audit trail is kept, or null
 * @param raw the JSON object as idemd sent it, for fields a newer idemd adds
 */
public record Operation(String name, Integer tokenTtlSeconds, Integer retentionSeconds, Integer leaseSeconds,
        String versionKey, boolean requireVersion, Integer waitSeconds, Long auditRetentionSeconds, JsonNode raw) {
}
