package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import java.time.Duration;
import java.util.Collections;
import java.util.Map;
import java.util.TreeMap;

/**
 * idemd refused a call with an RFC 9457 problem. Each problem code has its own
 * subclass, whose {@code CODE} is that code; branch on the class or on
 * {@link #getCode()}, never on the detail text. An answer that is not a
 * problem (a proxy's HTML page) is this class itself with a null code.
 */
public class IdemdProblemException extends IdemdException {
    private static final long serialVersionUID = 1L;
    private final int status;
    private final String code;
    private final String detail;
    private final Duration retryAfter;
    private final transient JsonNode problem;
    private final Map<String, String> headers;

    public IdemdProblemException(int status, String code, String detail, Duration retryAfter,
            JsonNode problem, Map<String, String> headers) {
        super(status + (code != null ? " " + code : "") + ": " + detail);
        this.status = status;
        this.code = code;
        this.detail = detail;
        this.retryAfter = retryAfter;
        this.problem = problem != null ? problem : JsonNodeFactory.instance.objectNode();
        TreeMap<String, String> h = new TreeMap<>(String.CASE_INSENSITIVE_ORDER);
        if (headers != null) {
            h.putAll(headers);
        }
        this.headers = Collections.unmodifiableMap(h);
    }

    /** The HTTP status. */
    public int getStatus() {
        return status;
    }

    /** The problem's stable snake_case code (null when the answer was no problem). */
    public String getCode() {
        return code;
    }

    /** The human-readable explanation. */
    public String getDetail() {
        return detail;
    }

    /** The answer's Retry-After, or null when it had none. */
    public Duration getRetryAfter() {
        return retryAfter;
    }

    /** The whole problem object as sent. */
    public JsonNode getProblem() {
        return problem;
    }

    /** The answer's headers (names case-insensitive). */
    public Map<String, String> getHeaders() {
        return headers;
    }

    /** The answer's header NAME, or null. */
    public String header(String name) {
        return headers.get(name);
    }
}
