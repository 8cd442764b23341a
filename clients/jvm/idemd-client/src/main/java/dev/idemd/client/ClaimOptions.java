package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import dev.idemd.client.internal.Json;

/**
 * What a claim sends beside its key: the request (fingerprinted by idemd) or
 * a fingerprint of your own, the subject (caller keys), an If-Match version
 * and {@code Prefer: wait=N}. Immutable: each {@code with} returns a copy.
 *
 * <pre>{@code
 * ClaimOptions.request(Map.of("cart", "c-1")).withWaitSeconds(10)
 * }</pre>
 *
 * @param request the request as JSON, or null
 * @param fingerprint an opaque fingerprint of your own (wins over the request), or null
 * @param subject the subject filling a caller key's operation's version_key, or null
 * @param ifMatch the If-Match header value, or null
 * @param waitSeconds {@code Prefer: wait=N} (0..60), or null
 */
public record ClaimOptions(JsonNode request, String fingerprint, String subject, String ifMatch,
        Integer waitSeconds) {
    /** Nothing but the key. */
    public static final ClaimOptions NONE = new ClaimOptions(null, null, null, null, null);

    public ClaimOptions {
        if (waitSeconds != null && (waitSeconds < 0 || waitSeconds > 60)) {
            throw new IllegalArgumentException("wait seconds must be 0..60: " + waitSeconds);
        }
    }

    /** Options with REQUEST (any JSON-serializable value) as the claim's request. */
    public static ClaimOptions request(Object request) {
        return NONE.withRequest(request);
    }

    public ClaimOptions withRequest(Object request) {
        return new ClaimOptions(request == null ? null : Json.tree(request), fingerprint, subject, ifMatch, waitSeconds);
    }

    /** An opaque fingerprint of your own; wins over the request. */
    public ClaimOptions withFingerprint(String fingerprint) {
        return new ClaimOptions(request, fingerprint, subject, ifMatch, waitSeconds);
    }

    /** The subject (1..128 bytes) filling a caller key's operation's version_key. */
    public ClaimOptions withSubject(String subject) {
        return new ClaimOptions(request, fingerprint, subject, ifMatch, waitSeconds);
    }

    /** If-Match: the version counter's value the submit was made against. */
    public ClaimOptions withIfMatch(long version) {
        return new ClaimOptions(request, fingerprint, subject, "\"" + version + "\"", waitSeconds);
    }

    /** If-Match as a raw header value ({@code "7"}, {@code W/"7"}...). */
    public ClaimOptions withIfMatchHeader(String value) {
        return new ClaimOptions(request, fingerprint, subject, value, waitSeconds);
    }

    /** {@code Prefer: wait=N} (0..60): wait for an in-progress duplicate's outcome instead of 409. */
    public ClaimOptions withWaitSeconds(int seconds) {
        return new ClaimOptions(request, fingerprint, subject, ifMatch, seconds);
    }
}
