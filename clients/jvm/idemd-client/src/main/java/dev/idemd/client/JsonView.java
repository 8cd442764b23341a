package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import java.time.Instant;
import java.util.Objects;

/**
 * An answer of idemd read through typed getters; {@link #raw()} is the JSON
 * object as sent, for fields that a newer idemd adds. Optional fields are
 * null when absent.
 */
public abstract class JsonView {
    protected final JsonNode json;

    protected JsonView(JsonNode json) {
        this.json = json != null ? json : JsonNodeFactory.instance.objectNode();
    }

    /** The JSON object as idemd sent it. */
    public JsonNode raw() {
        return json;
    }

    protected String text(String name) {
        JsonNode n = json.get(name);
        return n == null || n.isNull() ? null : n.asText();
    }

    protected Integer integer(String name) {
        JsonNode n = json.get(name);
        return n == null || !n.isNumber() ? null : n.intValue();
    }

    protected Long longValue(String name) {
        JsonNode n = json.get(name);
        return n == null || !n.isNumber() ? null : n.longValue();
    }

    protected Instant instant(String name) {
        String t = text(name);
        return t == null ? null : Instant.parse(t);
    }

    protected JsonNode node(String name) {
        JsonNode n = json.get(name);
        return n == null || n.isMissingNode() ? null : n;
    }

    @Override
    public String toString() {
        return getClass().getSimpleName() + json;
    }

    @Override
    public boolean equals(Object o) {
        return o != null && o.getClass() == getClass() && json.equals(((JsonView) o).json);
    }

    @Override
    public int hashCode() {
        return Objects.hash(getClass(), json);
    }
}
