package dev.idemd.client;

import java.util.function.Function;
import java.util.function.Predicate;

/** Options of {@link IdemdClient#consume}. Immutable: each {@code with} returns a copy. */
public final class ConsumeOptions<M> {
    private final Function<M, Object> request;
    private final Function<M, String> fingerprint;
    private final Function<M, String> subject;
    private final Predicate<Throwable> releaseOn;

    private ConsumeOptions(Function<M, Object> request, Function<M, String> fingerprint,
            Function<M, String> subject, Predicate<Throwable> releaseOn) {
        this.request = request;
        this.fingerprint = fingerprint;
        this.subject = subject;
        this.releaseOn = releaseOn;
    }

    /** No request, fingerprint or subject; every exception releases. */
    public static <M> ConsumeOptions<M> defaults() {
        return new ConsumeOptions<>(null, null, null, e -> true);
    }

    /** The request sent with each message's claim (its fingerprint guards the key). */
    public ConsumeOptions<M> withRequest(Function<M, Object> f) {
        return new ConsumeOptions<>(f, fingerprint, subject, releaseOn);
    }

    public ConsumeOptions<M> withFingerprint(Function<M, String> f) {
        return new ConsumeOptions<>(request, f, subject, releaseOn);
    }

    public ConsumeOptions<M> withSubject(Function<M, String> f) {
        return new ConsumeOptions<>(request, fingerprint, f, releaseOn);
    }

    /** Which handler exceptions release the claim (the rest store a final 500). */
    public ConsumeOptions<M> withReleaseOn(Predicate<Throwable> p) {
        return new ConsumeOptions<>(request, fingerprint, subject, p);
    }

    Function<M, Object> request() {
        return request;
    }

    Function<M, String> fingerprint() {
        return fingerprint;
    }

    Function<M, String> subject() {
        return subject;
    }

    Predicate<Throwable> releaseOn() {
        return releaseOn;
    }
}
