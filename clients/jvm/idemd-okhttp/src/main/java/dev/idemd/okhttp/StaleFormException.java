package dev.idemd.okhttp;

/**
 * 412 {@code version_mismatch}: the form (its token) was rendered against
 * data that changed since (the cart, the price). Nothing was placed; the
 * pending submit is dropped. Show the user the fresh form with a new token.
 */
public class StaleFormException extends SubmitRefusedException {
    private static final long serialVersionUID = 1L;
    private final Long currentVersion;

    public StaleFormException(String code, String detail, Long currentVersion) {
        super(412, code, detail);
        this.currentVersion = currentVersion;
    }

    /** The version the data is at now (the answer's ETag), or null. */
    public Long getCurrentVersion() {
        return currentVersion;
    }
}
