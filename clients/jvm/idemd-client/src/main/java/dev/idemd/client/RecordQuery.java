package dev.idemd.client;

/** Filters of {@code GET /v1/records}. Immutable: each {@code with} returns a copy. */
public final class RecordQuery {
    public static final RecordQuery ALL = new RecordQuery(null, null, null, null, null, null);

    final String operation;
    final String state;
    final String subject;
    final Long olderThan;
    final Integer limit;
    final String cursor;

    private RecordQuery(String operation, String state, String subject, Long olderThan, Integer limit, String cursor) {
        this.operation = operation;
        this.state = state;
        this.subject = subject;
        this.olderThan = olderThan;
        this.limit = limit;
        this.cursor = cursor;
    }

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
