package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.Map;

/** 400 idempotency_key_invalid: A caller key that is empty, over 255 bytes or not visible ASCII (0x21-0x7E). */
public class IdempotencyKeyInvalidException extends IdemdProblemException {
    private static final long serialVersionUID = 1L;

    /** The problem code this class stands for. */
    public static final String CODE = "idempotency_key_invalid";

    public IdempotencyKeyInvalidException(int status, String code, String detail, Duration retryAfter,
            JsonNode problem, Map<String, String> headers) {
        super(status, code, detail, retryAfter, problem, headers);
    }
}
