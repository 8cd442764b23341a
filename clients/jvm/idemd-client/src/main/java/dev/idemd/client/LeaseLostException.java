package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.Map;

/** 409 lease_lost: The attempt's lease was taken over: its result is dropped. */
public class LeaseLostException extends IdemdProblemException {
    private static final long serialVersionUID = 1L;

    /** The problem code this class stands for. */
    public static final String CODE = "lease_lost";

    public LeaseLostException(int status, String code, String detail, Duration retryAfter,
            JsonNode problem, Map<String, String> headers) {
        super(status, code, detail, retryAfter, problem, headers);
    }
}
