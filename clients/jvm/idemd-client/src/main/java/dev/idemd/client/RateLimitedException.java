package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.Map;

/** 429 rate_limited: Too many requests (retried by the client, honouring Retry-After). */
public class RateLimitedException extends IdemdProblemException {
    private static final long serialVersionUID = 1L;

    /** The problem code this class stands for. */
    public static final String CODE = "rate_limited";

    public RateLimitedException(int status, String code, String detail, Duration retryAfter,
            JsonNode problem, Map<String, String> headers) {
        super(status, code, detail, retryAfter, problem, headers);
    }
}
