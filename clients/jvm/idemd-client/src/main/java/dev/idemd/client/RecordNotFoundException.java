package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.Map;

/** 404 record_not_found: No record for that key or id. */
public class RecordNotFoundException extends IdemdProblemException {
    private static final long serialVersionUID = 1L;

    /** The problem code this class stands for. */
    public static final String CODE = "record_not_found";

    public RecordNotFoundException(int status, String code, String detail, Duration retryAfter,
            JsonNode problem, Map<String, String> headers) {
        super(status, code, detail, retryAfter, problem, headers);
    }
}
