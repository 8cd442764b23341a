package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Duration;
import java.util.Map;

/** 502 upstream_answer_unstorable: The upstream ran the request but its answer could not be stored. */
public class UpstreamAnswerUnstorableException extends IdemdProblemException {
    private static final long serialVersionUID = 1L;

    /** The problem code this class stands for. */
    public static final String CODE = "upstream_answer_unstorable";

    public UpstreamAnswerUnstorableException(int status, String code, String detail, Duration retryAfter,
            JsonNode problem, Map<String, String> headers) {
        super(status, code, detail, retryAfter, problem, headers);
    }
}
