package dev.idemd.client;

import com.fasterxml.jackson.databind.node.ObjectNode;

/** One key of a batch completion: its attempt and outcome. */
public final class BatchCompleteItem {
    private final String key;
    private final int attempt;
    private final Outcome outcome;

    private BatchCompleteItem(String key, int attempt, Outcome outcome) {
        this.key = key;
        this.attempt = attempt;
        this.outcome = outcome;
    }

    public static BatchCompleteItem of(String key, int attempt, Outcome outcome) {
        return new BatchCompleteItem(key, attempt, outcome);
    }

    public String getKey() {
        return key;
    }

    public int getAttempt() {
        return attempt;
    }

    public Outcome getOutcome() {
        return outcome;
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
