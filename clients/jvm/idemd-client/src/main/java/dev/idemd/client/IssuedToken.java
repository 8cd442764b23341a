package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;

/**
 * A token issued by {@code POST /v1/tokens}.
 *
 * @param token the signed token to hand to the form or app
 * @param id the token's 32-hex id (forwarded upstream as Idempotency-Key by gateway routes)
 * @param operation its operation
 * @param subject its subject, or null
 * @param expiresAt when it expires
 * @param version the version counter's value at issue (operations that guard one), or null
 * @param raw the JSON object as idemd sent it, for fields a newer idemd adds
 */
public record IssuedToken(String token, String id, String operation, String subject, Instant expiresAt,
        Long version, JsonNode raw) {
}
