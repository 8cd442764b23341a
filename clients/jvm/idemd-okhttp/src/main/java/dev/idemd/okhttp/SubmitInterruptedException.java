package dev.idemd.okhttp;

import java.io.IOException;

/**
 * The submit got no final answer within the interceptor's tries (network
 * down). It stays in the store: {@link IdemdSubmitInterceptor#resumePending}
 * sends it again, with the same token, later or after a restart. Tell the
 * user the order is being confirmed, not that it failed.
 */
public class SubmitInterruptedException extends IOException {
    private static final long serialVersionUID = 1L;
    private final String token;

    public SubmitInterruptedException(String token, IOException cause) {
        super("no answer yet, the submit stays pending: " + cause, cause);
        this.token = token;
    }

    public String getToken() {
        return token;
    }
}
