package dev.idemd.spring;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

/**
 * Makes a Spring MVC handler method idempotent through idemd. The first
 * request with a key runs the method and its response (status, body,
 * Content-Type, Location and the headers of {@code idemd.store-headers}) is
 * stored; every duplicate gets that response replayed with
 * {@code Idempotent-Replayed: true} and the method does not run. A
 * duplicate that arrives while the first is running waits for its outcome
 * ({@code Prefer: wait}). The same key with a different request is 422
 * {@code fingerprint_mismatch}. A 5xx or an exception releases the claim so
 * that a retry runs the method again.
 *
 * <p>A caller key is scoped per caller, as every idemd middleware and the
 * gateway scope it: the values of {@link #scopeHeaders()} (by default
 * {@code idemd.scope-headers}: Authorization and Cookie), hashed, prefix it
 * ({@link dev.idemd.client.CallerScope}), so the same key from two callers
 * is two records. A guarded operation ({@code version_key} with
 * {@code {subject}}, such as the quick start's {@code order.create}) needs
 * {@link #subject()}: without it, the application does not start.
 *
 * <pre>{@code
 * @PostMapping("/orders")
 * @Idempotent(operation = "order.create", subject = "principal")
 * public ResponseEntity<Order> create(@RequestBody Cart cart) { ... }
 * }</pre>
 */
@Target(ElementType.METHOD)
@Retention(RetentionPolicy.RUNTIME)
@Documented
public @interface Idempotent {
    /** The idemd operation (it must exist: PUT /v1/operations/{name}). */
    String operation();

    /** Caller key from a header, or an idemd token from the form. */
    KeySource key() default KeySource.HEADER;

    /** The header holding the caller key (HEADER) or the token (TOKEN, when no form field). */
    String header() default "Idempotency-Key";

    /**
     * Where the subject of a caller-key claim comes from (it fills the
     * operation's {@code version_key}): {@code "principal"} (the
     * authenticated user's name), {@code "header:NAME"}, {@code "path:NAME"}
     * (a path variable of the mapping, {@code /users/{NAME}/orders}) or
     * {@code "bean:NAME"} (a {@link SubjectResolver} bean). Empty: none,
     * which a guarded operation refuses at application start. A token
     * carries its own subject ({@link KeySource#TOKEN} ignores this).
     */
    String subject() default "";

    /**
     * The headers whose values, hashed, scope a caller key per caller
     * (lower-case or not; in order). Empty: {@code idemd.scope-headers}
     * (default Authorization and Cookie); {@code "-"}: the key as sent.
     */
    String[] scopeHeaders() default {};

    /** Seconds a duplicate waits for an in-progress outcome; -1: {@code idemd.wait-seconds}. */
    int waitSeconds() default -1;
}
