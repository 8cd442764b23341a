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
 * <pre>{@code
 * @PostMapping("/orders")
 * @Idempotent(operation = "order.create", key = KeySource.HEADER)
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

    /** Seconds a duplicate waits for an in-progress outcome; -1: {@code idemd.wait-seconds}. */
    int waitSeconds() default -1;
}
