package dev.idemd.client;

/** The end of {@link IdemdClient#claim}: the stored response, new or replayed. */
public final class ClaimResult {
    private final boolean replayed;
    private final StoredResponse response;
    private final Object value;
    private final Claimed claimed;

    ClaimResult(boolean replayed, StoredResponse response, Object value, Claimed claimed) {
        this.replayed = replayed;
        this.response = response;
        this.value = value;
        this.claimed = claimed;
    }

    /** True when the work had been done before: it did not run now. */
    public boolean isReplayed() {
        return replayed;
    }

    /** The stored response: the replayed one, or the one just completed. */
    public StoredResponse getResponse() {
        return response;
    }

    /** What the work returned (null on a replay). */
    public Object getValue() {
        return value;
    }

    /** The claim's answer. */
    public Claimed getClaimed() {
        return claimed;
    }
}
