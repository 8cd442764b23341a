package dev.idemd.client;

/**
 * What happened to one message of {@link IdemdClient#consume}.
 *
 * @param <M> the message type
 * @param message the message
 * @param key its caller key
 * @param kind what happened
 * @param result the handler's return value (PROCESSED)
 * @param response the stored response (REPLAYED)
 * @param error the handler's exception (FAILED) or idemd's refusal (REJECTED)
 * @param status the status idemd answered, or null
 * @param code the problem code, or null
 * @param retry true when the message should be delivered again; ack the others
 * @param attempt the attempt its claim got, or null
 */
public record MessageOutcome<M>(M message, String key, Kind kind, Object result, StoredResponse response,
        Throwable error, Integer status, String code, boolean retry, Integer attempt) {
    /** The kinds of outcome. */
    public enum Kind {
        /** New: the handler ran and its result is stored. */
        PROCESSED,
        /** Done before: the handler did not run; {@link #response()} is the stored outcome. */
        REPLAYED,
        /** Another consumer holds it now: redeliver later. */
        IN_PROGRESS,
        /** The handler threw: released ({@link #retry()} true) or stored as a final 500. */
        FAILED,
        /** idemd refused the claim (status and code say why). */
        REJECTED,
        /** The handler ran but its result was not stored (lease lost). */
        LOST
    }

    MessageOutcome<M> forMessage(M other) {
        return new MessageOutcome<>(other, key, kind, result, response, error, status, code, retry, attempt);
    }

    MessageOutcome<M> lost(int newStatus, String newCode) {
        return new MessageOutcome<>(message, key, Kind.LOST, result, response, error, newStatus, newCode, false,
                attempt);
    }

    @Override
    public String toString() {
        return "MessageOutcome{" + key + " " + kind + (code != null ? " " + code : "") + (retry ? " retry" : "") + "}";
    }
}
