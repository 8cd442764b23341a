package dev.idemd.okhttp;

import java.io.IOException;
import java.io.InterruptedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ThreadLocalRandom;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import okhttp3.Interceptor;
import okhttp3.MediaType;
import okhttp3.OkHttpClient;
import okhttp3.Request;
import okhttp3.RequestBody;
import okhttp3.Response;
import okio.Buffer;

/**
 * An OkHttp application interceptor for checkout submits through an idemd
 * gateway route (or any endpoint that takes an idemd token in
 * {@code Idempotency-Key}). Requests without that header pass untouched.
 *
 * <p>A submit is saved to the {@link PendingSubmitStore} before it is sent.
 * Timeouts and dropped connections are retried with the same token (the
 * order placed before the answer was lost is replayed, never placed twice);
 * a 409 (the first try is still running) is retried with
 * {@code Prefer: wait=N}; 429 and 5xx (the claim was released) are retried
 * after Retry-After. 412 throws {@link StaleFormException}. Any other answer
 * is final: the submit leaves the store and the response is returned. When
 * the tries run out without an answer, {@link SubmitInterruptedException} is
 * thrown and the submit stays in the store; {@link #resumePending} sends it
 * again when the app comes back, even after the process was killed.
 *
 * <p>Add it with {@code addInterceptor} (not as a network interceptor). It
 * uses no Android class.
 */
public final class IdemdSubmitInterceptor implements Interceptor {
    /** The header that carries the token. */
    public static final String HEADER = "Idempotency-Key";

    private final PendingSubmitStore store;
    private final int maxAttempts;
    private final long baseDelayMillis;
    private final long maxDelayMillis;
    private final long maxRetryAfterMillis;
    private final int waitSeconds;

    private IdemdSubmitInterceptor(Builder b) {
        this.store = b.store;
        this.maxAttempts = b.maxAttempts;
        this.baseDelayMillis = b.baseDelayMillis;
        this.maxDelayMillis = b.maxDelayMillis;
        this.maxRetryAfterMillis = b.maxRetryAfterMillis;
        this.waitSeconds = b.waitSeconds;
    }

    /** A builder keeping pending submits in STORE (null: in no store, nothing survives a restart). */
    public static Builder builder(PendingSubmitStore store) {
        return new Builder(store);
    }

    /** How the interceptor retries. */
    public static final class Builder {
        private final PendingSubmitStore store;
        private int maxAttempts = 6;
        private long baseDelayMillis = 300;
        private long maxDelayMillis = 5000;
        private long maxRetryAfterMillis = 30000;
        private int waitSeconds = 10;

        private Builder(PendingSubmitStore store) {
            this.store = store;
        }

        /** Tries per submit, the first included (default 6). */
        public Builder maxAttempts(int n) {
            this.maxAttempts = Math.max(1, n);
            return this;
        }

        /** Backoff: a random wait in [0, min(max, base * 2^(n-1))] after the n-th failed try. */
        public Builder backoff(long baseDelayMillis, long maxDelayMillis) {
            this.baseDelayMillis = baseDelayMillis;
            this.maxDelayMillis = maxDelayMillis;
            return this;
        }

        /** The longest Retry-After honoured (default 30 s). */
        public Builder maxRetryAfterMillis(long millis) {
            this.maxRetryAfterMillis = millis;
            return this;
        }

        /** {@code Prefer: wait=N} sent after a 409 (0..60, default 10). */
        public Builder waitSeconds(int seconds) {
            this.waitSeconds = Math.max(0, Math.min(60, seconds));
            return this;
        }

        public IdemdSubmitInterceptor build() {
            return new IdemdSubmitInterceptor(this);
        }
    }

    @Override
    public Response intercept(Chain chain) throws IOException {
        Request original = chain.request();
        String token = original.header(HEADER);
        if (token == null || token.isEmpty()) {
            return chain.proceed(original);
        }
        byte[] body = null;
        MediaType type = null;
        if (original.body() != null) {
            Buffer buf = new Buffer();
            original.body().writeTo(buf);
            body = buf.readByteArray();
            type = original.body().contentType();
        }
        if (store != null) {
            Map<String, String> headers = new LinkedHashMap<>();
            for (String name : original.headers().names()) {
                headers.put(name, original.header(name));
            }
            store.save(new PendingSubmit(token, original.method(), original.url().toString(), headers, body,
                    type != null ? type.toString() : null, System.currentTimeMillis()));
        }
        Request request = body == null ? original
                : original.newBuilder().method(original.method(), RequestBody.create(body, type)).build();
        IOException lastError = null;
        for (int attempt = 1;; attempt++) {
            Response r;
            try {
                r = chain.proceed(request);
            } catch (IOException e) {
                if (e instanceof InterruptedIOException && Thread.currentThread().isInterrupted()) {
                    throw e;
                }
                lastError = e;
                if (attempt >= maxAttempts) {
                    throw new SubmitInterruptedException(token, e);
                }
                sleep(backoff(attempt));
                continue;
            }
            int status = r.code();
            if (status == 409 || status == 429 || status >= 500) {
                if (attempt < maxAttempts) {
                    long delay = status == 409 ? 0 : retryAfter(r) + backoff(attempt);
                    r.close();
                    if (status == 409) {
                        request = request.newBuilder().header("Prefer", "wait=" + waitSeconds).build();
                    }
                    sleep(delay);
                    continue;
                }
                if (status == 409) {
                    // still running elsewhere: no final answer yet, keep it pending
                    r.close();
                    throw new SubmitInterruptedException(token, lastError != null ? lastError
                            : new IOException("409: the first submit is still in progress"));
                }
            }
            if (status == 412) {
                String text = r.body() != null ? r.body().string() : "";
                r.close();
                forget(token);
                Long current = parseEtag(r.header("ETag"));
                throw new StaleFormException(field(text, "code"), detailOr(field(text, "detail"), "stale form"),
                        current);
            }
            forget(token);
            return r;
        }
    }

    private void forget(String token) throws IOException {
        if (store != null) {
            store.remove(token);
        }
    }

    /**
     * Sends every pending submit of the store again with its own token,
     * through CLIENT (which must have this interceptor), and returns what each
     * got: the replayed outcome of a submit that went through before the app
     * died, or the outcome of one that never reached the server. Call it
     * when the app starts, off the main thread.
     */
    public List<ResumedSubmit> resumePending(OkHttpClient client) throws IOException {
        List<ResumedSubmit> out = new ArrayList<>();
        if (store == null) {
            return out;
        }
        for (PendingSubmit p : store.list()) {
            Request.Builder rb = new Request.Builder().url(p.getUrl());
            p.getHeaders().forEach(rb::header);
            RequestBody rbody = null;
            if (p.getBody() != null) {
                rbody = RequestBody.create(p.getBody(),
                        p.getContentType() != null ? MediaType.parse(p.getContentType()) : null);
            }
            rb.method(p.getMethod(), rbody);
            try (Response r = client.newCall(rb.build()).execute()) {
                Map<String, String> h = new LinkedHashMap<>();
                for (String name : r.headers().names()) {
                    h.put(name.toLowerCase(java.util.Locale.ROOT), r.header(name));
                }
                out.add(new ResumedSubmit(p, r.code(), h, r.body() != null ? r.body().bytes() : new byte[0], null));
            } catch (IOException e) {
                out.add(new ResumedSubmit(p, 0, null, null, e));
            }
        }
        return out;
    }

    private long backoff(int attempt) {
        long window = Math.min(maxDelayMillis, baseDelayMillis << Math.min(attempt - 1, 20));
        return window <= 0 ? 0 : ThreadLocalRandom.current().nextLong(window + 1);
    }

    private long retryAfter(Response r) {
        String v = r.header("Retry-After");
        if (v == null) {
            return 0;
        }
        try {
            return Math.min(maxRetryAfterMillis, Long.parseLong(v.trim()) * 1000);
        } catch (NumberFormatException e) {
            return Math.min(maxRetryAfterMillis, 1000);
        }
    }

    private static void sleep(long millis) throws InterruptedIOException {
        if (millis <= 0) {
            return;
        }
        try {
            Thread.sleep(millis);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new InterruptedIOException("interrupted while waiting to retry");
        }
    }

    static Long parseEtag(String v) {
        if (v == null) {
            return null;
        }
        Matcher m = Pattern.compile("^\\s*\"(\\d{1,18})\"\\s*$").matcher(v);
        return m.matches() ? Long.parseLong(m.group(1)) : null;
    }

    private static String detailOr(String v, String dflt) {
        return v == null ? dflt : v;
    }

    /** A string member of a flat JSON object (the problem's code and detail), or null. */
    static String field(String json, String name) {
        Matcher m = Pattern.compile("\"" + Pattern.quote(name) + "\"\\s*:\\s*\"((?:[^\"\\\\]|\\\\.)*)\"")
                .matcher(json);
        if (!m.find()) {
            return null;
        }
        String s = m.group(1);
        StringBuilder sb = new StringBuilder();
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c != '\\' || i + 1 >= s.length()) {
                sb.append(c);
                continue;
            }
            char e = s.charAt(++i);
            switch (e) {
                case 'n':
                    sb.append('\n');
                    break;
                case 't':
                    sb.append('\t');
                    break;
                case 'u':
                    if (i + 4 < s.length()) {
                        sb.append((char) Integer.parseInt(s.substring(i + 1, i + 5), 16));
                        i += 4;
                    }
                    break;
                default:
                    sb.append(e);
            }
        }
        return new String(sb.toString().getBytes(StandardCharsets.UTF_8), StandardCharsets.UTF_8);
    }
}
