package dev.idemd.client;

import dev.idemd.client.internal.Validation;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.function.Function;

/**
 * The caller scope every idemd middleware applies to a caller key, as the
 * gateway's {@code scope_headers} do: the first 32 hex digits of SHA-256
 * over {@code name LF value LF} for each scope header (lower-case, in
 * order; an absent header has an empty value), a colon, then the key. The
 * same key from two callers is then two records.
 */
public final class CallerScope {
    /** Authorization and Cookie: the headers that tell callers apart by default. */
    public static final List<String> DEFAULT_HEADERS = List.of("authorization", "cookie");

    private CallerScope() {
    }

    /** The scope of the caller whose header values HEADER gives (lower-case name → value or null). */
    public static String scope(Function<String, String> header, List<String> names) {
        MessageDigest sha;
        try {
            sha = MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
        for (String name : names) {
            String n = name.toLowerCase(Locale.ROOT);
            String v = header.apply(n);
            sha.update((n + "\n" + (v == null ? "" : v) + "\n").getBytes(StandardCharsets.ISO_8859_1));
        }
        StringBuilder hex = new StringBuilder();
        for (byte b : sha.digest()) {
            hex.append(String.format("%02x", b));
        }
        return hex.substring(0, 32);
    }

    /**
     * KEY within the caller's scope ({@code <scope>:<key>}); NAMES empty: KEY as it is. An
     * invalid key, or one over 255 bytes once scoped, throws the 400 idempotency_key_invalid.
     */
    public static String scopedKey(String key, Function<String, String> header, List<String> names) {
        Validation.checkKey(key);
        if (names.isEmpty()) {
            return key;
        }
        String scoped = scope(header, names) + ":" + key;
        if (!Validation.isValidKey(scoped)) {
            throw (IdempotencyKeyInvalidException) Validation.problem(400, IdempotencyKeyInvalidException.CODE,
                    "a key is at most 222 bytes when scoped per caller");
        }
        return scoped;
    }

    /** As {@link #scopedKey(String, Function, List)} with headers in a map (lower-case names). */
    public static String scopedKey(String key, Map<String, String> headers, List<String> names) {
        return scopedKey(key, headers::get, names);
    }
}
