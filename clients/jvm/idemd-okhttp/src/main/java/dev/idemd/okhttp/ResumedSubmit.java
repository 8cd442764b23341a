package dev.idemd.okhttp;

import java.util.Collections;
import java.util.Map;

/** What {@link IdemdSubmitInterceptor#resumePending} got for one pending submit. */
public final class ResumedSubmit {
    private final PendingSubmit submit;
    private final int status;
    private final Map<String, String> headers;
    private final byte[] body;
    private final Exception error;

    ResumedSubmit(PendingSubmit submit, int status, Map<String, String> headers, byte[] body, Exception error) {
        this.submit = submit;
        this.status = status;
        this.headers = headers == null ? Collections.emptyMap() : Collections.unmodifiableMap(headers);
        this.body = body;
        this.error = error;
    }

    public PendingSubmit getSubmit() {
        return submit;
    }

    /** The final answer's status (0 when it failed: see {@link #getError()}). */
    public int getStatus() {
        return status;
    }

    /** The answer's headers, lower-case names. */
    public Map<String, String> getHeaders() {
        return headers;
    }

    public byte[] getBody() {
        return body == null ? new byte[0] : body.clone();
    }

    /** True when idemd answered with the stored response of the submit that went through before. */
    public boolean isReplayed() {
        return "true".equalsIgnoreCase(headers.get("idempotent-replayed"));
    }

    /** Why no final answer came (a {@link StaleFormException}, or still no network), or null. */
    public Exception getError() {
        return error;
    }
}
