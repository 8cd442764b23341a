package dev.idemd.client;

import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * One key of a batch completion: its attempt and outcome.
 *
 * @param key the caller key
 * @param attempt the attempt its claim got
 * @param outcome what to store
 */
public record BatchCompleteItem(String key, int attempt, Outcome outcome) {
    public static BatchCompleteItem of(String key, int attempt, Outcome outcome) {
        return new BatchCompleteItem(key, attempt, outcome);
    }

    ObjectNode toJson() {
        ObjectNode o = outcome.toJson();
        ObjectNode item = o.objectNode();
        item.put("key", key);
        item.put("attempt", attempt);
        item.setAll(o);
        return item;
    }
}
