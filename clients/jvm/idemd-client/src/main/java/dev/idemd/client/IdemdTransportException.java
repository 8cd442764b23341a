package dev.idemd.client;

/**
 * No HTTP answer: connection refused or reset, timeout, interrupted.
 * {@link #wasSent()} is false when the request certainly never reached idemd
 * (the connection was refused), the only transport failure the client
 * retries by itself.
 */
public class IdemdTransportException extends IdemdException {
    private static final long serialVersionUID = 1L;
    private final boolean sent;

    public IdemdTransportException(String message, boolean sent, Throwable cause) {
        super(message, cause);
        this.sent = sent;
    }

    /** False when nothing reached idemd. */
    public boolean wasSent() {
        return sent;
    }
}
