package dev.idemd.client;

/** Handles one new message of a consumed batch. */
@FunctionalInterface
public interface MessageHandler<M> {
    /**
     * Processes MESSAGE once; returns what to store (an {@link Outcome}, or a
     * JSON value as a 200). CLAIM carries the record's id, the attempt and
     * an earlier attempt's checkpoint.
     */
    Object handle(M message, BatchClaimResult claim) throws Exception;
}
