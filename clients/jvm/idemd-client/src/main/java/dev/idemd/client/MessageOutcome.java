package dev.idemd.client;

/** What happened to one message of {@link IdemdClient#consume}. */
public final class MessageOutcome<M> {
    /** The kinds of outcome. */
    public enum Kind {
        /** New: the handler ran and its result is stored. */
        PROCESSED,
        /** Done before: the handler did not run; {@link #getResponse()} is the stored outcome. */
        REPLAYED,
        /** Another consumer holds it now: redeliver later. */
        IN_PROGRESS,
        /** The handler threw: released ({@link #isRetry()} true) or stored as a final 500. */
        FAILED,
        /** idemd refused the claim (status and code say why). */
        REJECTED,
        /** The handler ran but its result was not stored (lease lost). */
        LOST
    }

    private final M message;
    private final String key;
    private final Kind kind;
    private final Object result;
    private final StoredResponse response;
    private final Throwable error;
    private final Integer status;
    private final String code;
    private final boolean retry;
    private final Integer attempt;

    MessageOutcome(M message, String key, Kind kind, Object result, StoredResponse response, Throwable error,
            Integer status, String code, boolean retry, Integer attempt) {
        this.message = message;
        this.key = key;
        this.kind = kind;
        this.result = result;
        this.response = response;
        this.error = error;
        this.status = status;
        this.code = code;
        this.retry = retry;
        this.attempt = attempt;
    }

    MessageOutcome<M> forMessage(M other) {
        return new MessageOutcome<>(other, key, kind, result, response, error, status, code, retry, attempt);
    }

    MessageOutcome<M> lost(int newStatus, String newCode) {
        return new MessageOutcome<>(message, key, Kind.LOST, result, response, error, newStatus, newCode, false,
                attempt);
    }

    public M getMessage() {
        return message;
    }

    public String getKey() {
        return key;
    }

    public Kind getKind() {
        return kind;
    }

    /** The handler's return value (PROCESSED). */
    public Object getResult() {
        return result;
    }

    /** The stored response (REPLAYED). */
    public StoredResponse getResponse() {
        return response;
    }

    /** The handler's exception (FAILED) or idemd's refusal (REJECTED). */
    public Throwable getError() {
        return error;
    }

    public Integer getStatus() {
        return status;
    }

    public String getCode() {
        return code;
    }

    /** True when the message should be delivered again; ack the others. */
    public boolean isRetry() {
        return retry;
    }

    public Integer getAttempt() {
        return attempt;
    }

    @Override
    public String toString() {
        return "MessageOutcome{" + key + " " + kind + (code != null ? " " + code : "") + (retry ? " retry" : "") + "}";
    }
}
