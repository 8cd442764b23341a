package dev.idemd.client;

/**
 * Filters of {@code GET /v1/records}. Immutable: each {@code with} returns a copy.
 *
 * @param operation the operation, or null
 * @param state the state, or null
 * @param subject the subject, or null
 * @param olderThan claimed at least this many seconds ago, or null
 * @param limit the page size 1..500, or null
 * @param cursor the cursor of the page to get, or null
 */
public record RecordQuery(String operation, String state, String subject, Long olderThan, Integer limit,
        String cursor) {
    public static final RecordQuery ALL = new RecordQuery(null, null, null, null, null, null);

    public RecordQuery withOperation(String v) {
        return new RecordQuery(v, state, subject, olderThan, limit, cursor);
    }

    public RecordQuery withState(String v) {
        return new RecordQuery(operation, v, subject, olderThan, limit, cursor);
    }

    public RecordQuery withSubject(String v) {
        return new RecordQuery(operation, state, v, olderThan, limit, cursor);
    }

    /** Claimed at least SECONDS ago. */
    public RecordQuery withOlderThan(long seconds) {
        return new RecordQuery(operation, state, subject, seconds, limit, cursor);
    }

    /** Page size 1..500. */
    public RecordQuery withLimit(int v) {
        return new RecordQuery(operation, state, subject, olderThan, v, cursor);
    }

    public RecordQuery withCursor(String v) {
        return new RecordQuery(operation, state, subject, olderThan, limit, v);
    }
}
