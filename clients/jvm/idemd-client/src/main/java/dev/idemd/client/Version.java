package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;

/** A version counter and its value. */
public final class Version extends JsonView {
    public Version(JsonNode json) {
        super(json);
    }

    public String getKey() {
        return text("key");
    }

    public long getVersion() {
        Long v = longValue("version");
        return v == null ? 0 : v;
    }

    /** The value as a strong ETag, for If-Match: {@code "7"}. */
    public String getEtag() {
        return "\"" + getVersion() + "\"";
    }
}
