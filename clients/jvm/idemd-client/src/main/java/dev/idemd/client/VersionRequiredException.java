package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.Map;

/** 428 version_required: The operation requires If-Match and none was sent. */
public class VersionRequiredException extends IdemdProblemException {
    private static final long serialVersionUID = 1L;

    /** The problem code this class stands for. */
    public static final String CODE = "version_required";

    public VersionRequiredException(int status, String code, String detail, Duration retryAfter,
            JsonNode problem, Map<String, String> headers) {
        super(status, code, detail, retryAfter, problem, headers);
    }
}
