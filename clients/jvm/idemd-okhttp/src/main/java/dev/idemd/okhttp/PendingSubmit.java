package dev.idemd.okhttp;

import java.util.Arrays;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

/**
 * A submit that was started and has no final answer yet: everything needed
 * to send it again, with the same token, after the app was killed.
 */
public final class PendingSubmit {
    private final String token;
    private final String method;
    private final String url;
    private final Map<String, String> headers;
    private final byte[] body;
    private final String contentType;
    private final long createdAtMillis;

    public PendingSubmit(String token, String method, String url, Map<String, String> headers, byte[] body,
            String contentType, long createdAtMillis) {
        this.token = token;
        this.method = method;
        this.url = url;
        this.headers = Collections.unmodifiableMap(new LinkedHashMap<>(headers));
        this.body = body == null ? null : body.clone();
        this.contentType = contentType;
        this.createdAtMillis = createdAtMillis;
    }

    /** The idemd token the submit carries in Idempotency-Key. */
    public String getToken() {
        return token;
    }

    public String getMethod() {
        return method;
    }

    public String getUrl() {
        return url;
    }

    /** The request's headers (Idempotency-Key among them). */
    public Map<String, String> getHeaders() {
        return headers;
    }

    /** The request body, or null. */
    public byte[] getBody() {
        return body == null ? null : body.clone();
    }

    public String getContentType() {
        return contentType;
    }

    public long getCreatedAtMillis() {
        return createdAtMillis;
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof PendingSubmit)) {
            return false;
        }
        PendingSubmit p = (PendingSubmit) o;
        return token.equals(p.token) && method.equals(p.method) && url.equals(p.url) && headers.equals(p.headers)
                && Arrays.equals(body, p.body) && createdAtMillis == p.createdAtMillis;
    }

    @Override
    public int hashCode() {
        return token.hashCode();
    }

    @Override
    public String toString() {
        return "PendingSubmit{" + method + " " + url + "}";
    }
}
