package dev.idemd.client;

/**
 * A checked exception thrown by a claim's or a consumer's work, carried out
 * unchanged as the cause (unchecked exceptions and errors are rethrown as
 * they are).
 */
public class ClaimWorkException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public ClaimWorkException(Throwable cause) {
        super(cause.toString(), cause);
    }
}
