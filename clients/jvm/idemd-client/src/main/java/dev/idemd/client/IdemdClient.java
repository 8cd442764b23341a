package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.idemd.client.internal.Answers;
import dev.idemd.client.internal.Json;
import dev.idemd.client.internal.Problems;
import dev.idemd.client.internal.Validation;
import java.io.IOException;
import java.net.ConnectException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.function.Function;
import java.util.function.Predicate;

/**
 * A client for one idemd endpoint and one tenant's API key. Thread-safe; share
 * one instance. Calls answered 409 {@code request_in_progress}, 429 or 503
 * are retried per the {@link RetryPolicy}; every other refusal throws the
 * {@link IdemdProblemException} subclass of its problem code.
 *
 * <pre>{@code
 * IdemdClient idemd = IdemdClient.builder("http://127.0.0.1:8080").apiKey(key).build();
 * IssuedToken t = idemd.issue("order.create", "user-42");
 * }</pre>
 */
public final class IdemdClient {
    /** Sent as User-Agent. */
    public static final String USER_AGENT = "idemd-java/0.1.0";

    private final URI base;
    private final String apiKey;
    private final Duration timeout;
    private final RetryPolicy retry;
    private final HttpClient http;

    private IdemdClient(Builder b) {
        String u = b.baseUrl.endsWith("/") ? b.baseUrl.substring(0, b.baseUrl.length() - 1) : b.baseUrl;
        URI uri = URI.create(u);
        if (uri.getScheme() == null || !(uri.getScheme().equals("http") || uri.getScheme().equals("https"))
                || uri.getHost() == null) {
            throw new IllegalArgumentException("base URL must be http://host[:port] or https://...: " + b.baseUrl);
        }
        this.base = uri;
        this.apiKey = b.apiKey;
        this.timeout = b.timeout;
        this.retry = b.retry;
        this.http = b.httpClient != null ? b.httpClient
                : HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(b.connectTimeout)
                        .followRedirects(HttpClient.Redirect.NEVER).build();
    }

    /** A builder for the idemd at BASE_URL ({@code http://127.0.0.1:8080}). */
    public static Builder builder(String baseUrl) {
        return new Builder(baseUrl);
    }

    /** How the client is made. */
    public static final class Builder {
        private final String baseUrl;
        private String apiKey;
        private Duration timeout = Duration.ofSeconds(10);
        private Duration connectTimeout = Duration.ofSeconds(5);
        private RetryPolicy retry = RetryPolicy.DEFAULT;
        private HttpClient httpClient;

        private Builder(String baseUrl) {
            this.baseUrl = baseUrl;
        }

        /** The tenant's API key, sent as {@code Authorization: Bearer}. */
        public Builder apiKey(String apiKey) {
            this.apiKey = apiKey;
            return this;
        }

        /** Per-request timeout (a claim with Prefer: wait adds the wait to it). */
        public Builder timeout(Duration timeout) {
            this.timeout = timeout;
            return this;
        }

        public Builder connectTimeout(Duration connectTimeout) {
            this.connectTimeout = connectTimeout;
            return this;
        }

        public Builder retry(RetryPolicy retry) {
            this.retry = retry;
            return this;
        }

        /** Your own java.net.http client (TLS settings, executor, proxy). */
        public Builder httpClient(HttpClient httpClient) {
            this.httpClient = httpClient;
            return this;
        }

        public IdemdClient build() {
            return new IdemdClient(this);
        }
    }

    public URI getBaseUri() {
        return base;
    }

    public RetryPolicy getRetryPolicy() {
        return retry;
    }

    /** The same endpoint and key with another retry policy. */
    public IdemdClient withRetry(RetryPolicy policy) {
        Builder b = builder(base.toString()).apiKey(apiKey).timeout(timeout).retry(policy).httpClient(http);
        return b.build();
    }

    // ------------------------------------------------------------------ transport

    private static final class Call<T> {
        final String method;
        final String path;
        final JsonNode body;
        final Map<String, String> headers = new LinkedHashMap<>();
        final Set<Integer> ok;
        final boolean auth;
        final Function<Answer, T> parse;
        Duration extraTimeout = Duration.ZERO;

        Call(String method, String path, JsonNode body, Set<Integer> ok, boolean auth, Function<Answer, T> parse) {
            this.method = method;
            this.path = path;
            this.body = body;
            this.ok = ok;
            this.auth = auth;
            this.parse = parse;
        }
    }

    private static final class Answer {
        final int status;
        final Map<String, String> headers;
        final byte[] body;

        Answer(int status, Map<String, String> headers, byte[] body) {
            this.status = status;
            this.headers = headers;
            this.body = body;
        }

        JsonNode json() {
            return body.length == 0 ? JsonNodeFactory.instance.nullNode() : Json.parse(body);
        }
    }

    private static final Set<Integer> OK = Set.of(200);

    private <T> Call<T> call(String method, String path, JsonNode body, Function<Answer, T> parse) {
        return new Call<>(method, path, body, OK, true, parse);
    }

    private Answer exchange(Call<?> c) {
        HttpRequest.Builder rb = HttpRequest.newBuilder(URI.create(base + c.path))
                .timeout(timeout.plus(c.extraTimeout))
                .header("User-Agent", USER_AGENT)
                .header("Accept", "application/json");
        if (c.auth && apiKey != null) {
            rb.header("Authorization", "Bearer " + apiKey);
        }
        if (c.body != null) {
            rb.header("Content-Type", "application/json");
            rb.method(c.method, HttpRequest.BodyPublishers.ofString(Json.write(c.body), StandardCharsets.UTF_8));
        } else if (c.method.equals("GET")) {
            rb.GET();
        } else if (c.method.equals("DELETE")) {
            rb.DELETE();
        } else {
            rb.method(c.method, HttpRequest.BodyPublishers.noBody());
        }
        c.headers.forEach(rb::header);
        try {
            HttpResponse<byte[]> r = http.send(rb.build(), HttpResponse.BodyHandlers.ofByteArray());
            Map<String, String> h = new TreeMap<>(String.CASE_INSENSITIVE_ORDER);
            r.headers().map().forEach((k, v) -> h.put(k, String.join(", ", v)));
            return new Answer(r.statusCode(), h, r.body() == null ? new byte[0] : r.body());
        } catch (ConnectException e) {
            throw new IdemdTransportException(c.method + " " + c.path + ": cannot connect: " + e, false, e);
        } catch (HttpTimeoutException e) {
            throw new IdemdTransportException(c.method + " " + c.path + ": timed out: " + e.getMessage(), true, e);
        } catch (IOException e) {
            throw new IdemdTransportException(c.method + " " + c.path + ": " + e, true, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IdemdTransportException(c.method + " " + c.path + ": interrupted", true, e);
        }
    }

    private static IdemdProblemException problemOf(Answer a) {
        JsonNode p = null;
        try {
            JsonNode n = a.body.length > 0 ? Json.parse(a.body) : null;
            if (n != null && n.isObject()) {
                p = n;
            }
        } catch (RuntimeException e) {
            // not JSON: a proxy's page
        }
        String code = p != null && p.path("code").isTextual() ? p.get("code").asText() : null;
        String detail;
        if (p != null && p.path("detail").isTextual()) {
            detail = p.get("detail").asText();
        } else if (a.body.length > 0 && p == null) {
            String s = new String(a.body, StandardCharsets.UTF_8);
            detail = s.length() > 200 ? s.substring(0, 200) : s;
        } else {
            detail = "HTTP " + a.status;
        }
        return Problems.of(a.status, code, detail, Problems.parseRetryAfter(a.headers.get("Retry-After")), p,
                a.headers);
    }

    private <T> T send(Call<T> c) {
        return send(c, retry);
    }

    private <T> T send(Call<T> c, RetryPolicy policy) {
        int tries = 0;
        while (true) {
            tries++;
            try {
                Answer a = exchange(c);
                if (!c.ok.contains(a.status)) {
                    throw problemOf(a);
                }
                return c.parse.apply(a);
            } catch (IdemdException e) {
                if (tries >= policy.attempts() || !policy.isRetryable(e)) {
                    throw e;
                }
                try {
                    Thread.sleep(policy.delay(tries, e).toMillis());
                } catch (InterruptedException ie) {
                    Thread.currentThread().interrupt();
                    throw e;
                }
            }
        }
    }

    /** One path segment, percent-encoded (keys may hold / % ? # : and spaces in version keys). */
    static String seg(String value) {
        if (value == null || value.isEmpty()) {
            throw new IllegalArgumentException("a path segment must be a non-empty string");
        }
        StringBuilder sb = new StringBuilder();
        for (byte b : value.getBytes(StandardCharsets.UTF_8)) {
            int c = b & 0xff;
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.'
                    || c == '_' || c == '~') {
                sb.append((char) c);
            } else {
                sb.append('%').append(Character.toUpperCase(Character.forDigit(c >> 4, 16)))
                        .append(Character.toUpperCase(Character.forDigit(c & 15, 16)));
            }
        }
        return sb.toString();
    }

    private static ObjectNode obj() {
        return JsonNodeFactory.instance.objectNode();
    }

    private static Claimed claimedOf(Answer a) {
        String replayed = a.headers.get("Idempotent-Replayed");
        return Answers.claimed(a.json(), a.status == 200 || "true".equalsIgnoreCase(replayed),
                a.headers.get("Preference-Applied"));
    }

    private Call<Claimed> claimCall(String path, ClaimOptions o, boolean withSubject) {
        ClaimOptions opt = o == null ? ClaimOptions.NONE : o;
        ObjectNode b = obj();
        if (opt.request() != null) {
            b.set("request", opt.request());
        }
        if (opt.fingerprint() != null) {
            b.put("fingerprint", opt.fingerprint());
        }
        if (withSubject && opt.subject() != null) {
            b.put("subject", opt.subject());
        }
        Call<Claimed> c = new Call<>("POST", path, b, Set.of(200, 201), true, IdemdClient::claimedOf);
        if (opt.ifMatch() != null) {
            c.headers.put("If-Match", opt.ifMatch());
        }
        if (opt.waitSeconds() != null) {
            c.headers.put("Prefer", "wait=" + opt.waitSeconds());
            c.extraTimeout = Duration.ofSeconds(opt.waitSeconds());
        }
        return c;
    }

    private static ObjectNode attemptBody(int attempt) {
        Validation.checkAttempt(attempt);
        ObjectNode b = obj();
        b.put("attempt", attempt);
        return b;
    }

    private static ObjectNode completeBody(int attempt, Outcome outcome) {
        ObjectNode b = attemptBody(attempt);
        b.setAll(outcome.toJson());
        return b;
    }

    private static ObjectNode extendBody(int attempt, Integer leaseSeconds) {
        ObjectNode b = attemptBody(attempt);
        if (leaseSeconds != null) {
            b.put("lease_seconds", leaseSeconds);
        }
        return b;
    }

    private static ObjectNode checkpointBody(int attempt, String phase, Object data) {
        ObjectNode b = attemptBody(attempt);
        b.put("phase", phase);
        if (data != null) {
            b.set("data", Json.tree(data));
        }
        return b;
    }

    private static SimpleResult simple(Answer a) {
        return Answers.simpleResult(a.json());
    }

    private static String tokenPath(String token) {
        Validation.checkToken(token);
        return "/v1/tokens/" + seg(token);
    }

    private static String keyPath(String operation, String key) {
        Validation.checkKey(key);
        return "/v1/operations/" + seg(operation) + "/keys/" + seg(key);
    }

    // ------------------------------------------------------------------ tokens

    /** Issues one token for OPERATION and SUBJECT ({@code POST /v1/tokens}). */
    public IssuedToken issue(String operation, String subject) {
        return issue(operation, subject, null);
    }

    /** Issues one token living TTL_SECONDS (null: the operation's token_ttl_seconds). */
    public IssuedToken issue(String operation, String subject, Integer ttlSeconds) {
        ObjectNode b = obj();
        b.put("operation", operation);
        b.put("subject", subject);
        if (ttlSeconds != null) {
            b.put("ttl_seconds", ttlSeconds);
        }
        return send(new Call<>("POST", "/v1/tokens", b, Set.of(201), true, a -> Answers.issuedToken(a.json())));
    }

    /** Issues COUNT (1..100) distinct tokens in one call. */
    public List<IssuedToken> issueMany(String operation, String subject, int count, Integer ttlSeconds) {
        ObjectNode b = obj();
        b.put("operation", operation);
        b.put("subject", subject);
        b.put("count", count);
        if (ttlSeconds != null) {
            b.put("ttl_seconds", ttlSeconds);
        }
        return send(new Call<>("POST", "/v1/tokens", b, Set.of(201), true, a -> {
            List<IssuedToken> out = new ArrayList<>();
            a.json().path("tokens").forEach(t -> out.add(Answers.issuedToken(t)));
            return Collections.unmodifiableList(out);
        }));
    }

    /** A token's state (issued, in_progress, completed, revoked, expired). */
    public RecordInfo introspect(String token) {
        return send(call("GET", tokenPath(token), null, a -> Answers.recordInfo(a.json())));
    }

    /** Revokes an unused token; in progress or completed: {@link TokenInUseException}. */
    public void revoke(String token) {
        send(new Call<>("DELETE", tokenPath(token), null, Set.of(204), true, a -> null));
    }

    public Claimed claimToken(String token) {
        return claimToken(token, ClaimOptions.NONE);
    }

    /**
     * Claims a token: {@link Claimed#replayed()} with the stored response,
     * or a new attempt to complete or release.
     */
    public Claimed claimToken(String token, ClaimOptions options) {
        return send(claimCall(tokenPath(token) + "/claim", options, false));
    }

    /** Stores the outcome of ATTEMPT. */
    public SimpleResult completeToken(String token, int attempt, Outcome outcome) {
        return send(call("POST", tokenPath(token) + "/complete", completeBody(attempt, outcome), IdemdClient::simple));
    }

    /** Gives the claim back after a retryable failure. */
    public SimpleResult releaseToken(String token, int attempt) {
        return send(call("POST", tokenPath(token) + "/release", attemptBody(attempt), IdemdClient::simple));
    }

    /** A new lease for the current ATTEMPT (null: the operation's lease_seconds). */
    public SimpleResult extendToken(String token, int attempt, Integer leaseSeconds) {
        return send(call("POST", tokenPath(token) + "/extend", extendBody(attempt, leaseSeconds),
                IdemdClient::simple));
    }

    /** Leaves a recovery point (PHASE {@code [a-z0-9._-]{1,64}}, DATA any JSON up to 64 KiB). */
    public SimpleResult checkpointToken(String token, int attempt, String phase, Object data) {
        return send(call("POST", tokenPath(token) + "/checkpoint", checkpointBody(attempt, phase, data),
                IdemdClient::simple));
    }

    // ------------------------------------------------------------------ caller keys

    public Claimed claimKey(String operation, String key) {
        return claimKey(operation, key, ClaimOptions.NONE);
    }

    /** Claims caller KEY under OPERATION (refused before sending when the key is invalid). */
    public Claimed claimKey(String operation, String key, ClaimOptions options) {
        return send(claimCall(keyPath(operation, key) + "/claim", options, true));
    }

    public SimpleResult completeKey(String operation, String key, int attempt, Outcome outcome) {
        return send(call("POST", keyPath(operation, key) + "/complete", completeBody(attempt, outcome),
                IdemdClient::simple));
    }

    public SimpleResult releaseKey(String operation, String key, int attempt) {
        return send(call("POST", keyPath(operation, key) + "/release", attemptBody(attempt), IdemdClient::simple));
    }

    public SimpleResult extendKey(String operation, String key, int attempt, Integer leaseSeconds) {
        return send(call("POST", keyPath(operation, key) + "/extend", extendBody(attempt, leaseSeconds),
                IdemdClient::simple));
    }

    public SimpleResult checkpointKey(String operation, String key, int attempt, String phase, Object data) {
        return send(call("POST", keyPath(operation, key) + "/checkpoint", checkpointBody(attempt, phase, data),
                IdemdClient::simple));
    }

    /** A caller key's record; never claimed: {@link RecordNotFoundException}. */
    public RecordInfo getKey(String operation, String key) {
        return send(call("GET", keyPath(operation, key), null, a -> Answers.recordInfo(a.json())));
    }

    /**
     * Claims 1..500 distinct keys in one call; each result is what a single
     * claim would have answered. An invalid key is that item's 400, the
     * others go on (the batch is sent as it is).
     */
    public List<BatchClaimResult> claimBatch(String operation, List<BatchClaimItem> items) {
        ObjectNode b = obj();
        ArrayNode arr = b.putArray("items");
        items.forEach(i -> arr.add(i.toJson()));
        return send(call("POST", "/v1/operations/" + seg(operation) + "/claims", b, a -> {
            List<BatchClaimResult> out = new ArrayList<>();
            a.json().path("items").forEach(i -> out.add(Answers.batchClaimResult(i)));
            return Collections.unmodifiableList(out);
        }));
    }

    /** Completes 1..500 claimed keys in one call. */
    public List<BatchCompleteResult> completeBatch(String operation, List<BatchCompleteItem> items) {
        ObjectNode b = obj();
        ArrayNode arr = b.putArray("items");
        for (BatchCompleteItem i : items) {
            Validation.checkAttempt(i.attempt());
            arr.add(i.toJson());
        }
        return send(call("POST", "/v1/operations/" + seg(operation) + "/completions", b, a -> {
            List<BatchCompleteResult> out = new ArrayList<>();
            a.json().path("items").forEach(i -> out.add(Answers.batchCompleteResult(i)));
            return Collections.unmodifiableList(out);
        }));
    }

    // ------------------------------------------------------------------ versions and operations

    /** A version counter (an unknown key is version 0). */
    public Version getVersion(String key) {
        return send(call("GET", "/v1/versions/" + seg(key), null, a -> Answers.version(a.json())));
    }

    /** Bumps from IF_MATCH to IF_MATCH+1; stale: {@link VersionMismatchException}. */
    public long bumpVersion(String key, long ifMatch) {
        return bumpVersion(key, "\"" + ifMatch + "\"");
    }

    /** Bumps with a raw If-Match header value ({@code "7"}; a weak {@code W/"7"} never matches). */
    public long bumpVersion(String key, String ifMatchHeader) {
        Call<Long> c = call("POST", "/v1/versions/" + seg(key), null, a -> a.json().path("version").asLong());
        c.headers.put("If-Match", ifMatchHeader);
        return send(c);
    }

    /** Creates or replaces an operation's policy. */
    public Operation putOperation(String name, OperationPolicy policy) {
        return send(new Call<>("PUT", "/v1/operations/" + seg(name), policy.toJson(), Set.of(200, 201), true,
                a -> Answers.operation(a.json())));
    }

    public Operation getOperation(String name) {
        return send(call("GET", "/v1/operations/" + seg(name), null, a -> Answers.operation(a.json())));
    }

    public List<Operation> listOperations() {
        return send(call("GET", "/v1/operations", null, a -> {
            List<Operation> out = new ArrayList<>();
            a.json().path("operations").forEach(o -> out.add(Answers.operation(o)));
            return Collections.unmodifiableList(out);
        }));
    }

    // ------------------------------------------------------------------ records

    /** A record by its 32-hex id; unknown: {@link RecordNotFoundException}. */
    public RecordInfo getRecord(String id) {
        return send(call("GET", "/v1/records/" + seg(id), null, a -> Answers.recordInfo(a.json())));
    }

    /** The record's audit trail, oldest first. */
    public List<RecordEvent> recordEvents(String id) {
        return send(call("GET", "/v1/records/" + seg(id) + "/events", null, a -> {
            List<RecordEvent> out = new ArrayList<>();
            a.json().path("events").forEach(e -> out.add(Answers.recordEvent(e)));
            return Collections.unmodifiableList(out);
        }));
    }

    /** One page of records, newest claim first. */
    public RecordPage listRecords(RecordQuery q) {
        StringBuilder sb = new StringBuilder("/v1/records");
        List<String> parts = new ArrayList<>();
        if (q.operation() != null) {
            parts.add("operation=" + seg(q.operation()));
        }
        if (q.state() != null) {
            parts.add("state=" + seg(q.state()));
        }
        if (q.subject() != null) {
            parts.add("subject=" + seg(q.subject()));
        }
        if (q.olderThan() != null) {
            parts.add("older_than=" + q.olderThan());
        }
        if (q.limit() != null) {
            parts.add("limit=" + q.limit());
        }
        if (q.cursor() != null) {
            parts.add("cursor=" + seg(q.cursor()));
        }
        if (!parts.isEmpty()) {
            sb.append('?').append(String.join("&", parts));
        }
        return send(call("GET", sb.toString(), null, a -> Answers.recordPage(a.json())));
    }

    /** Every record matching Q, following the cursor page by page. */
    public List<RecordInfo> listAllRecords(RecordQuery q) {
        List<RecordInfo> out = new ArrayList<>();
        RecordQuery page = q;
        while (true) {
            RecordPage p = listRecords(page);
            out.addAll(p.records());
            if (p.nextCursor() == null) {
                return out;
            }
            page = page.withCursor(p.nextCursor());
        }
    }

    // ------------------------------------------------------------------ health

    /** {@code GET /healthz}. */
    public Health health() {
        return send(new Call<>("GET", "/healthz", null, Set.of(200), false, a -> Answers.health(a.json(), a.status)));
    }

    /** {@code GET /readyz}: ready, or not_ready (503) with a reason; never retried. */
    public Health ready() {
        return send(new Call<>("GET", "/readyz", null, Set.of(200, 503), false,
                a -> Answers.health(a.json(), a.status)), RetryPolicy.NONE);
    }

    // ------------------------------------------------------------------ claim helper

    /** Every exception releases the claim (the default of {@link #claim}). */
    public static final Predicate<Throwable> RELEASE_ON_ANY = e -> true;

    /** {@link #claim(ClaimTarget, ClaimOptions, Predicate, ClaimWork)} releasing on any exception. */
    public ClaimResult claim(ClaimTarget target, ClaimOptions options, ClaimWork work) {
        return claim(target, options, RELEASE_ON_ANY, work);
    }

    /**
     * Runs WORK at most once for TARGET. The target is claimed first (a
     * refusal such as {@link FingerprintMismatchException} throws there). A
     * duplicate of a completed submit gets the stored response and WORK does
     * not run. Otherwise WORK runs; its result is completed (stored). An
     * exception matching RELEASE_ON releases the claim so that a retry may
     * run the work again; any other stores a final 500
     * {@code {"error":"<class>"}}. The exception is rethrown (a checked one
     * wrapped in {@link ClaimWorkException}).
     */
    public ClaimResult claim(ClaimTarget target, ClaimOptions options, Predicate<Throwable> releaseOn,
            ClaimWork work) {
        Claimed c = target.isToken() ? claimToken(target.token(), options)
                : claimKey(target.operation(), target.key(), options);
        if (c.replayed()) {
            return new ClaimResult(true, c.response(), null, c);
        }
        int attempt = c.attempt();
        Object value;
        try {
            value = work.run(new ActiveClaim(this, target, c));
        } catch (Throwable e) {
            try {
                if (releaseOn.test(e)) {
                    release(target, attempt);
                } else {
                    complete(target, attempt, failureOutcome(e));
                }
            } catch (IdemdException ignored) {
                e.addSuppressed(ignored); // the work's own failure is the one that matters; the lease runs out
            }
            throw rethrow(e);
        }
        Outcome outcome = asOutcome(value);
        SimpleResult done = complete(target, attempt, outcome);
        return new ClaimResult(false, done.response(), value, c);
    }

    /** Runs WORK at most once for TARGET and returns the stored response (new or replayed). */
    public StoredResponse runOnce(ClaimTarget target, ClaimOptions options, ClaimWork work) {
        return claim(target, options, work).response();
    }

    private SimpleResult complete(ClaimTarget t, int attempt, Outcome o) {
        return t.isToken() ? completeToken(t.token(), attempt, o)
                : completeKey(t.operation(), t.key(), attempt, o);
    }

    private SimpleResult release(ClaimTarget t, int attempt) {
        return t.isToken() ? releaseToken(t.token(), attempt) : releaseKey(t.operation(), t.key(), attempt);
    }

    static Outcome asOutcome(Object value) {
        return value instanceof Outcome ? (Outcome) value : Outcome.of(200, value);
    }

    static Outcome failureOutcome(Throwable e) {
        return Outcome.of(500, Map.of("error", e.getClass().getSimpleName()));
    }

    static RuntimeException rethrow(Throwable e) {
        if (e instanceof RuntimeException) {
            return (RuntimeException) e;
        }
        if (e instanceof Error) {
            throw (Error) e;
        }
        return new ClaimWorkException(e);
    }

    // ------------------------------------------------------------------ consumer helper

    /** {@link #consume(String, List, Function, MessageHandler, ConsumeOptions)} with the defaults. */
    public <M> List<MessageOutcome<M>> consume(String operation, List<M> messages, Function<M, String> key,
            MessageHandler<M> handler) {
        return consume(operation, messages, key, handler, ConsumeOptions.defaults());
    }

    /**
     * Processes a polled batch (Kafka, RabbitMQ...) exactly once per key: all
     * keys are claimed in one call, HANDLER runs for the new ones only, and
     * their results are completed in one call. A handler exception matching
     * the options' releaseOn releases that key (redeliver it); others store a
     * final 500. Returns one outcome per message, in order; a key repeated
     * within the batch shares the first message's outcome.
     */
    public <M> List<MessageOutcome<M>> consume(String operation, List<M> messages, Function<M, String> key,
            MessageHandler<M> handler, ConsumeOptions<M> options) {
        if (messages.isEmpty()) {
            return Collections.emptyList();
        }
        List<String> keys = new ArrayList<>();
        Map<String, Integer> first = new LinkedHashMap<>();
        List<BatchClaimItem> items = new ArrayList<>();
        for (int i = 0; i < messages.size(); i++) {
            M m = messages.get(i);
            String k = key.apply(m);
            keys.add(k);
            if (first.containsKey(k)) {
                continue;
            }
            first.put(k, i);
            ClaimOptions o = ClaimOptions.NONE;
            if (options.request() != null) {
                o = o.withRequest(options.request().apply(m));
            }
            if (options.fingerprint() != null) {
                o = o.withFingerprint(options.fingerprint().apply(m));
            }
            if (options.subject() != null) {
                o = o.withSubject(options.subject().apply(m));
            }
            items.add(BatchClaimItem.of(k, o));
        }
        List<BatchClaimResult> claims = claimBatch(operation, items);
        Map<Integer, MessageOutcome<M>> done = new LinkedHashMap<>();
        List<BatchCompleteItem> completions = new ArrayList<>();
        Map<String, Integer> pending = new LinkedHashMap<>();
        List<BatchClaimResult> todo = new ArrayList<>();
        for (BatchClaimResult r : claims) {
            int i = first.get(r.key());
            M m = messages.get(i);
            if (r.status() == 201) {
                todo.add(r);
            } else if (r.status() == 200) {
                done.put(i, new MessageOutcome<>(m, r.key(), MessageOutcome.Kind.REPLAYED, null, r.response(),
                        null, 200, null, false, null));
            } else if (RequestInProgressException.CODE.equals(r.code())) {
                done.put(i, new MessageOutcome<>(m, r.key(), MessageOutcome.Kind.IN_PROGRESS, null, null, null,
                        r.status(), r.code(), true, null));
            } else {
                boolean retryLater = r.status() == 429 || r.status() == 503;
                done.put(i, new MessageOutcome<>(m, r.key(), MessageOutcome.Kind.REJECTED, null, null,
                        r.toException(), r.status(), r.code(), retryLater, null));
            }
        }
        Throwable fatal = null;
        for (BatchClaimResult r : todo) {
            int i = first.get(r.key());
            M m = messages.get(i);
            int attempt = r.attempt();
            if (fatal != null) {
                releaseQuietly(operation, r.key(), attempt);
                done.put(i, new MessageOutcome<>(m, r.key(), MessageOutcome.Kind.FAILED, null, null, fatal,
                        r.status(), null, true, attempt));
                continue;
            }
            try {
                Object value = handler.handle(m, r);
                completions.add(BatchCompleteItem.of(r.key(), attempt, asOutcome(value)));
                pending.put(r.key(), i);
                done.put(i, new MessageOutcome<>(m, r.key(), MessageOutcome.Kind.PROCESSED, value, null, null,
                        r.status(), null, false, attempt));
            } catch (Throwable e) {
                if (e instanceof Error || options.releaseOn().test(e)) {
                    releaseQuietly(operation, r.key(), attempt);
                    done.put(i, new MessageOutcome<>(m, r.key(), MessageOutcome.Kind.FAILED, null, null, e,
                            r.status(), null, true, attempt));
                    if (e instanceof Error) {
                        fatal = e;
                    }
                } else {
                    completions.add(BatchCompleteItem.of(r.key(), attempt, failureOutcome(e)));
                    pending.put(r.key(), i);
                    done.put(i, new MessageOutcome<>(m, r.key(), MessageOutcome.Kind.FAILED, null, null, e,
                            r.status(), null, false, attempt));
                }
            }
        }
        if (!completions.isEmpty()) {
            for (BatchCompleteResult r : completeBatch(operation, completions)) {
                Integer i = pending.get(r.key());
                if (!r.isOk() && i != null) {
                    done.put(i, done.get(i).lost(r.status(), r.code()));
                }
            }
        }
        if (fatal != null) {
            throw rethrow(fatal);
        }
        List<MessageOutcome<M>> out = new ArrayList<>();
        for (int i = 0; i < messages.size(); i++) {
            int f = first.get(keys.get(i));
            MessageOutcome<M> o = done.get(f);
            out.add(f == i ? o : o.forMessage(messages.get(i)));
        }
        return Collections.unmodifiableList(out);
    }

    private void releaseQuietly(String operation, String key, int attempt) {
        try {
            releaseKey(operation, key, attempt);
        } catch (IdemdException e) {
            // the lease runs out; the next delivery takes over
        }
    }
}
