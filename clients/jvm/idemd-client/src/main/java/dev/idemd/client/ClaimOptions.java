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
 */
public final class ClaimOptions {
    /** Nothing but the key. */
    public static final ClaimOptions NONE = new ClaimOptions(null, null, null, null, null);

    private final JsonNode request;
    private final String fingerprint;
    private final String subject;
    private final String ifMatch;
    private final Integer waitSeconds;

    private ClaimOptions(JsonNode request, String fingerprint, String subject, String ifMatch, Integer waitSeconds) {
        this.request = request;
        this.fingerprint = fingerprint;
        this.subject = subject;
        this.ifMatch = ifMatch;
        this.waitSeconds = waitSeconds;
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
        if (seconds < 0 || seconds > 60) {
            throw new IllegalArgumentException("wait seconds must be 0..60: " + seconds);
        }
        return new ClaimOptions(request, fingerprint, subject, ifMatch, seconds);
    }

    public JsonNode getRequest() {
        return request;
    }

    public String getFingerprint() {
        return fingerprint;
    }

    public String getSubject() {
        return subject;
    }

    public String getIfMatch() {
        return ifMatch;
    }

    public Integer getWaitSeconds() {
        return waitSeconds;
    }
}
