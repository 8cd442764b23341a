package dev.idemd.client;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * One key of a batch claim with its request, fingerprint and subject
 * ({@link #of(String, ClaimOptions)}; If-Match and wait do not apply to batches).
 *
 * @param key the caller key
 * @param options its request, fingerprint and subject (null: none)
 */
public record BatchClaimItem(String key, ClaimOptions options) {
    public BatchClaimItem {
        options = options == null ? ClaimOptions.NONE : options;
    }

    public static BatchClaimItem of(String key) {
        return new BatchClaimItem(key, ClaimOptions.NONE);
    }

    /** KEY with OPTIONS' request, fingerprint and subject (If-Match and wait do not apply to batches). */
    public static BatchClaimItem of(String key, ClaimOptions options) {
        return new BatchClaimItem(key, options);
    }

    ObjectNode toJson() {
        ObjectNode o = JsonNodeFactory.instance.objectNode();
        o.put("key", key);
        if (options.fingerprint() != null) {
            o.put("fingerprint", options.fingerprint());
        }
        if (options.request() != null) {
            o.set("request", options.request());
        }
        if (options.subject() != null) {
            o.put("subject", options.subject());
        }
        return o;
    }
}
