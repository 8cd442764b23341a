package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.time.Instant;

/** A token issued by {@code POST /v1/tokens}. */
public final class IssuedToken extends JsonView {
    public IssuedToken(JsonNode json) {
        super(json);
    }

    /** The signed token to hand to the form or app. */
    public String getToken() {
        return text("token");
    }

    /** The token's 32-hex id (forwarded upstream as Idempotency-Key by gateway routes). */
    public String getId() {
        return text("id");
    }

    public String getOperation() {
        return text("operation");
    }

    public String getSubject() {
        return text("subject");
    }

    public Instant getExpiresAt() {
        return instant("expires_at");
    }

    /** The version counter's value at issue (operations that guard one), or null. */
    public Long getVersion() {
        return longValue("version");
    }
}
