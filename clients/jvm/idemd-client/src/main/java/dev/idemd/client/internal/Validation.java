package dev.idemd.client.internal;

import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.idemd.client.IdemdProblemException;
import dev.idemd.client.IdempotencyKeyInvalidException;
import dev.idemd.client.InvalidRequestException;
import dev.idemd.client.TokenMalformedException;
import java.util.Collections;

/**
 * Internal: not part of the client's API, may change in any release.
 * What the client refuses before sending, with the very problem idemd would
 * have answered: a caller key that is empty, over 255 bytes or holds a byte
 * outside 0x21-0x7E ({@code idempotency_key_invalid}), an attempt below 1
 * ({@code invalid_request}).
 */
public final class Validation {
    /** The longest caller key, in bytes. */
    public static final int MAX_KEY_BYTES = 255;

    private Validation() {
    }

    /** True when KEY is 1..255 characters of visible ASCII (0x21-0x7E). */
    public static boolean isValidKey(String key) {
        if (key == null || key.isEmpty() || key.length() > MAX_KEY_BYTES) {
            return false;
        }
        for (int i = 0; i < key.length(); i++) {
            char c = key.charAt(i);
            if (c < 0x21 || c > 0x7E) {
                return false;
            }
        }
        return true;
    }

    /** Throws {@link IdempotencyKeyInvalidException} unless KEY is a valid caller key. */
    public static void checkKey(String key) {
        if (!isValidKey(key)) {
            throw (IdempotencyKeyInvalidException) problem(400, IdempotencyKeyInvalidException.CODE,
                    "a key is 1 to " + MAX_KEY_BYTES
                            + " characters of visible ASCII (percent-encoded in the path where needed)");
        }
    }

    /** Throws {@link InvalidRequestException} unless ATTEMPT is at least 1. */
    public static void checkAttempt(int attempt) {
        if (attempt < 1) {
            throw (InvalidRequestException) problem(400, InvalidRequestException.CODE,
                    "field attempt must be an integer from 1 to 2147483647");
        }
    }

    /** Throws {@link TokenMalformedException} for an empty token (it would not even route). */
    public static void checkToken(String token) {
        if (token == null || token.isEmpty()) {
            throw (TokenMalformedException) problem(400, TokenMalformedException.CODE, "the token is empty");
        }
    }

    /** The problem idemd would answer, as its exception. */
    public static IdemdProblemException problem(int status, String code, String detail) {
        ObjectNode p = JsonNodeFactory.instance.objectNode();
        p.put("type", "https://idemd.dev/problems/" + code);
        p.put("title", Problems.title(status));
        p.put("status", status);
        p.put("detail", detail);
        p.put("code", code);
        return Problems.of(status, code, detail, null, p, Collections.emptyMap());
    }
}
