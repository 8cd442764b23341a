package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import dev.idemd.client.internal.Problems;
import java.time.Duration;
import java.util.Map;

/** 412 version_mismatch: The If-Match precondition (or the version a token carries) is stale: the form was rendered against older data. */
public class VersionMismatchException extends IdemdProblemException {
    private static final long serialVersionUID = 1L;

    /** The problem code this class stands for. */
    public static final String CODE = "version_mismatch";

    public VersionMismatchException(int status, String code, String detail, Duration retryAfter,
            JsonNode problem, Map<String, String> headers) {
        super(status, code, detail, retryAfter, problem, headers);
    }

    /** The counter's current value from the answer's ETag, or null. */
    public Long getCurrentVersion() {
        return Problems.parseEtag(header("ETag"));
    }
}
