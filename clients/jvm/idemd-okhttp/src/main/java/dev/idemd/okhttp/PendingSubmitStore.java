package dev.idemd.okhttp;

import java.io.IOException;
import java.util.List;

/**
 * Where the interceptor keeps submits that have no final answer yet, so that
 * a submit interrupted by process death is sent again with the same token
 * when the app comes back. {@link FileSubmitStore} is the default; an app may
 * keep them in its own database instead.
 */
public interface PendingSubmitStore {
    /** Saves SUBMIT durably (replacing one with the same token) before it is sent. */
    void save(PendingSubmit submit) throws IOException;

    /** Forgets the submit of TOKEN (it got a final answer). */
    void remove(String token) throws IOException;

    /** Every pending submit, oldest first. */
    List<PendingSubmit> list() throws IOException;
}
