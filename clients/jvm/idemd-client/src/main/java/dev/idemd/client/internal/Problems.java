package dev.idemd.client.internal;

import com.fasterxml.jackson.databind.JsonNode;
import dev.idemd.client.CompletionConflictException;
import dev.idemd.client.CorsOriginDeniedException;
import dev.idemd.client.FingerprintMismatchException;
import dev.idemd.client.IdemdProblemException;
import dev.idemd.client.IdempotencyKeyInvalidException;
import dev.idemd.client.IdempotencyKeyMissingException;
import dev.idemd.client.InternalException;
import dev.idemd.client.InvalidRequestException;
import dev.idemd.client.LeaseLostException;
import dev.idemd.client.MethodNotAllowedException;
import dev.idemd.client.NotFoundException;
import dev.idemd.client.NotInProgressException;
import dev.idemd.client.OperationUnknownException;
import dev.idemd.client.PayloadTooLargeException;
import dev.idemd.client.RateLimitedException;
import dev.idemd.client.RecordNotFoundException;
import dev.idemd.client.RequestInProgressException;
import dev.idemd.client.TokenExpiredException;
import dev.idemd.client.TokenInUseException;
import dev.idemd.client.TokenInvalidException;
import dev.idemd.client.TokenMalformedException;
import dev.idemd.client.TokenRevokedException;
import dev.idemd.client.TokenScopeMismatchException;
import dev.idemd.client.UnauthorizedException;
import dev.idemd.client.UnavailableException;
import dev.idemd.client.UnsupportedMediaTypeException;
import dev.idemd.client.UpstreamAnswerUnstorableException;
import dev.idemd.client.UpstreamInvalidException;
import dev.idemd.client.UpstreamTimeoutException;
import dev.idemd.client.UpstreamUnavailableException;
import dev.idemd.client.VersionMismatchException;
import dev.idemd.client.VersionRequiredException;
import java.time.Duration;
import java.time.ZonedDateTime;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeParseException;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;

/**
 * Internal: not part of the client's API, may change in any release.
 * Problem code to exception class, one per code of idemd's API reference,
 * and the parsing of the headers a problem carries (ETag, Retry-After).
 */
public final class Problems {
    /** How an exception of one problem code is made. */
    @FunctionalInterface
    public interface Factory {
        IdemdProblemException create(int status, String code, String detail, Duration retryAfter,
                JsonNode problem, Map<String, String> headers);
    }

    private static final Map<String, Factory> CLASSES = new LinkedHashMap<>();

    static {
        CLASSES.put(InvalidRequestException.CODE, InvalidRequestException::new);
        CLASSES.put(IdempotencyKeyMissingException.CODE, IdempotencyKeyMissingException::new);
        CLASSES.put(TokenMalformedException.CODE, TokenMalformedException::new);
        CLASSES.put(UnauthorizedException.CODE, UnauthorizedException::new);
        CLASSES.put(TokenInvalidException.CODE, TokenInvalidException::new);
        CLASSES.put(TokenScopeMismatchException.CODE, TokenScopeMismatchException::new);
        CLASSES.put(NotFoundException.CODE, NotFoundException::new);
        CLASSES.put(MethodNotAllowedException.CODE, MethodNotAllowedException::new);
        CLASSES.put(RequestInProgressException.CODE, RequestInProgressException::new);
        CLASSES.put(LeaseLostException.CODE, LeaseLostException::new);
        CLASSES.put(NotInProgressException.CODE, NotInProgressException::new);
        CLASSES.put(CompletionConflictException.CODE, CompletionConflictException::new);
        CLASSES.put(TokenInUseException.CODE, TokenInUseException::new);
        CLASSES.put(IdempotencyKeyInvalidException.CODE, IdempotencyKeyInvalidException::new);
        CLASSES.put(RecordNotFoundException.CODE, RecordNotFoundException::new);
        CLASSES.put(TokenExpiredException.CODE, TokenExpiredException::new);
        CLASSES.put(TokenRevokedException.CODE, TokenRevokedException::new);
        CLASSES.put(VersionMismatchException.CODE, VersionMismatchException::new);
        CLASSES.put(PayloadTooLargeException.CODE, PayloadTooLargeException::new);
        CLASSES.put(UnsupportedMediaTypeException.CODE, UnsupportedMediaTypeException::new);
        CLASSES.put(FingerprintMismatchException.CODE, FingerprintMismatchException::new);
        CLASSES.put(OperationUnknownException.CODE, OperationUnknownException::new);
        CLASSES.put(VersionRequiredException.CODE, VersionRequiredException::new);
        CLASSES.put(RateLimitedException.CODE, RateLimitedException::new);
        CLASSES.put(UnavailableException.CODE, UnavailableException::new);
        CLASSES.put(CorsOriginDeniedException.CODE, CorsOriginDeniedException::new);
        CLASSES.put(UpstreamUnavailableException.CODE, UpstreamUnavailableException::new);
        CLASSES.put(UpstreamInvalidException.CODE, UpstreamInvalidException::new);
        CLASSES.put(UpstreamTimeoutException.CODE, UpstreamTimeoutException::new);
        CLASSES.put(UpstreamAnswerUnstorableException.CODE, UpstreamAnswerUnstorableException::new);
        CLASSES.put(InternalException.CODE, InternalException::new);
    }

    private Problems() {
    }

    /** Every problem code that has its own class. */
    /**
     * The title idemd gives a problem of this status (RFC 9110's reason phrase:
     * 413 "Content Too Large", 422 "Unprocessable Content"), for the problems a
     * client makes itself; idemd's own problems are passed on unchanged.
     */
    public static String title(int status) {
        switch (status) {
            case 400: return "Bad Request";
            case 401: return "Unauthorized";
            case 403: return "Forbidden";
            case 404: return "Not Found";
            case 405: return "Method Not Allowed";
            case 408: return "Request Timeout";
            case 409: return "Conflict";
            case 410: return "Gone";
            case 412: return "Precondition Failed";
            case 413: return "Content Too Large";
            case 415: return "Unsupported Media Type";
            case 422: return "Unprocessable Content";
            case 428: return "Precondition Required";
            case 429: return "Too Many Requests";
            case 500: return "Internal Server Error";
            case 502: return "Bad Gateway";
            case 503: return "Service Unavailable";
            case 504: return "Gateway Timeout";
            default: return "Error";
        }
    }

    public static Set<String> codes() {
        return Collections.unmodifiableSet(CLASSES.keySet());
    }

    /** The exception for a problem: the class of its code, else {@link IdemdProblemException}. */
    public static IdemdProblemException of(int status, String code, String detail, Duration retryAfter,
            JsonNode problem, Map<String, String> headers) {
        Factory f = code != null ? CLASSES.get(code) : null;
        if (f == null) {
            return new IdemdProblemException(status, code, detail, retryAfter, problem, headers);
        }
        return f.create(status, code, detail, retryAfter, problem, headers);
    }

    /** The class that stands for CODE, or {@link IdemdProblemException} for an unknown one. */
    public static Class<? extends IdemdProblemException> classFor(String code) {
        Factory f = code != null ? CLASSES.get(code) : null;
        return f == null ? IdemdProblemException.class
                : f.create(400, code, "", null, null, null).getClass();
    }

    /** {@code "7"} to 7; weak, absent or not a number: null. */
    public static Long parseEtag(String value) {
        if (value == null) {
            return null;
        }
        String v = value.trim();
        if (v.length() >= 3 && v.charAt(0) == '"' && v.charAt(v.length() - 1) == '"') {
            String n = v.substring(1, v.length() - 1);
            if (!n.isEmpty() && n.chars().allMatch(Character::isDigit) && n.length() < 19) {
                return Long.parseLong(n);
            }
        }
        return null;
    }

    /** Delta-seconds or an HTTP date, as a duration from now (never negative); null when absent or bad. */
    public static Duration parseRetryAfter(String value) {
        if (value == null) {
            return null;
        }
        String v = value.trim();
        if (!v.isEmpty() && v.length() < 10 && v.chars().allMatch(Character::isDigit)) {
            return Duration.ofSeconds(Long.parseLong(v));
        }
        try {
            ZonedDateTime when = ZonedDateTime.parse(v, DateTimeFormatter.RFC_1123_DATE_TIME);
            Duration d = Duration.between(java.time.Instant.now(), when.toInstant());
            return d.isNegative() ? Duration.ZERO : d;
        } catch (DateTimeParseException e) {
            return null;
        }
    }
}
