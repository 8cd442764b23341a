package dev.idemd.spring;

/** Where an {@link Idempotent} method's key comes from. */
public enum KeySource {
    /** A caller key in a request header ({@code Idempotency-Key} unless {@link Idempotent#header()} says otherwise). */
    HEADER,
    /**
     * An idemd token issued into the form by {@link IdemdFormTokens} when it was
     * rendered: the form field {@code idemd_token} (property
     * {@code idemd.token-parameter}) or the {@code Idempotency-Key} header.
     */
    TOKEN
}
