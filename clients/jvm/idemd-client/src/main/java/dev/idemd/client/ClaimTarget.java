package dev.idemd.client;

/**
 * What a claim addresses: a token, or a caller key under an operation
 * ({@link #token(String)}, {@link #key(String, String)}).
 *
 * @param token the token, or null for a caller key
 * @param operation the caller key's operation, or null for a token
 * @param key the caller key, or null for a token
 */
public record ClaimTarget(String token, String operation, String key) {
    public static ClaimTarget token(String token) {
        return new ClaimTarget(token, null, null);
    }

    public static ClaimTarget key(String operation, String key) {
        return new ClaimTarget(null, operation, key);
    }

    public boolean isToken() {
        return token != null;
    }

    @Override
    public String toString() {
        return token != null ? "token" : operation + "/" + key;
    }
}
