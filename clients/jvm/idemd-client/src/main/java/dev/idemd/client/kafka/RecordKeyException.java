package dev.idemd.client.kafka;

import org.apache.kafka.clients.consumer.ConsumerRecord;

/**
 * A record lacks the key it was to be claimed by (no such header, a value
 * that is not JSON or not an object, no such member). Thrown before anything
 * of the poll is claimed or committed: the caller's bug, or a poison record
 * to dead-letter, never skipped silently.
 */
public final class RecordKeyException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    /** The record's {@code topic/partition/offset}. */
    private final String where;

    RecordKeyException(ConsumerRecord<?, ?> record, String why) {
        super("record " + RecordKeys.coordinates(record) + ": " + why);
        this.where = RecordKeys.coordinates(record);
    }

    /** @return the record's {@code topic/partition/offset} */
    public String where() {
        return where;
    }
}
