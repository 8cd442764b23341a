package dev.idemd.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.databind.JsonNode;
import dev.idemd.client.internal.Json;
import dev.idemd.client.internal.Validation;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/** The whole API against a real idemd. */
class ClientTest {
    private final IdemdClient idemd = TestEnv.client();

    @Test
    void valueTypesAreRecordsWithTheirGetters() {
        assertEquals(ClaimTarget.key("op", "k"), ClaimTarget.key("op", "k"));
        assertEquals("k", ClaimTarget.key("op", "k").key());
        assertEquals("op/k", ClaimTarget.key("op", "k").toString());
        assertTrue(ClaimTarget.token("t").isToken());
        assertEquals(new RetryPolicy(4, java.time.Duration.ofMillis(200), java.time.Duration.ofSeconds(5),
                java.time.Duration.ofSeconds(30)), RetryPolicy.DEFAULT);
        assertEquals(4, RetryPolicy.DEFAULT.attempts());
        assertThrows(IllegalArgumentException.class, () -> new RetryPolicy(0, null, null, null));
        assertEquals(ClaimOptions.NONE, BatchClaimItem.of("k", null).options());
        assertEquals(BatchCompleteItem.of("k", 2, null), BatchCompleteItem.of("k", 2, null));
        assertTrue(Record.class.isAssignableFrom(ClaimResult.class));
    }

    @Test
    void tokenLifecycle() {
        String op = TestEnv.operation(idemd, 30);
        IssuedToken t = idemd.issue(op, "user-42");
        assertEquals(op, t.operation());
        assertEquals(32, t.id().length());
        assertEquals("issued", idemd.introspect(t.token()).state());

        Claimed c = idemd.claimToken(t.token(), ClaimOptions.request(Map.of("cart", "c-1")));
        assertFalse(c.replayed());
        assertEquals(1, c.attempt());
        assertNotNull(c.leaseExpiresAt());

        IdemdClient once = idemd.withRetry(RetryPolicy.NONE);
        RequestInProgressException busy = assertThrows(RequestInProgressException.class,
                () -> once.claimToken(t.token(), ClaimOptions.request(Map.of("cart", "c-1"))));
        assertEquals(409, busy.getStatus());
        assertNotNull(busy.getRetryAfter());

        SimpleResult done = idemd.completeToken(t.token(), 1, Outcome.of(201, Map.of("order_id", "o-1")));
        assertEquals("completed", done.state());
        assertEquals(201, done.response().status());

        Claimed replay = idemd.claimToken(t.token(), ClaimOptions.request(Map.of("cart", "c-1")));
        assertTrue(replay.replayed());
        assertEquals("o-1", replay.response().body().get("order_id").asText());
        assertThrows(FingerprintMismatchException.class,
                () -> idemd.claimToken(t.token(), ClaimOptions.request(Map.of("cart", "c-2"))));
        assertThrows(TokenInUseException.class, () -> idemd.revoke(t.token()));
        assertThrows(LeaseLostException.class, () -> idemd.releaseToken(t.token(), 7));

        IssuedToken t2 = idemd.issue(op, "user-42", 60);
        idemd.revoke(t2.token());
        assertThrows(TokenRevokedException.class, () -> idemd.claimToken(t2.token()));
        assertThrows(TokenMalformedException.class, () -> idemd.claimToken("not a token!"));
        // one character changed (never to itself: that would be the same token)
        String tampered = t2.token().substring(0, 20) + (t2.token().charAt(20) == 'x' ? "y" : "x")
                + t2.token().substring(21);
        assertThrows(TokenInvalidException.class, () -> idemd.claimToken(tampered));

        List<IssuedToken> many = idemd.issueMany(op, "user-43", 3, null);
        assertEquals(3, many.size());
    }

    @Test
    void releaseThenTakeOverWithCheckpoint() {
        String op = TestEnv.operation(idemd, 30);
        String t = idemd.issue(op, "u").token();
        Claimed c = idemd.claimToken(t);
        assertNotNull(idemd.extendToken(t, 1, 10).leaseExpiresAt());
        idemd.checkpointToken(t, 1, "charged", Map.of("charge", "ch_1"));
        assertEquals("issued", idemd.releaseToken(t, c.attempt()).state());
        Claimed again = idemd.claimToken(t);
        assertEquals(2, again.attempt());
        assertEquals("charged", again.checkpoint().phase());
        assertEquals("ch_1", again.checkpoint().data().get("charge").asText());
        assertThrows(LeaseLostException.class, () -> idemd.checkpointToken(t, 1, "x", null));
    }

    @Test
    void callerKeys() {
        String op = TestEnv.operation(idemd, 30);
        String key = "order:user-42/cart?9#x%20" + TestEnv.unique("k");
        Claimed c = idemd.claimKey(op, key, ClaimOptions.request(Map.of("a", 1)).withSubject("user-42"));
        assertEquals(32, c.id().length());
        assertEquals("in_progress", idemd.getKey(op, key).state());
        idemd.completeKey(op, key, c.attempt(), Outcome.bytes(202, "raw".getBytes(StandardCharsets.UTF_8),
                Map.of("Content-Type", "text/plain")));
        Claimed r = idemd.claimKey(op, key, ClaimOptions.request(Map.of("a", 1)));
        assertTrue(r.replayed());
        assertEquals("raw", new String(r.response().bodyBytes(), StandardCharsets.UTF_8));
        assertEquals("text/plain", r.response().headers().get("content-type") != null
                ? r.response().headers().get("content-type") : r.response().headers().get("Content-Type"));
        RecordInfo rec = idemd.getRecord(c.id());
        assertEquals(op, rec.operation()); // the key itself is not stored (api/openapi.yaml)
        List<RecordEvent> events = idemd.recordEvents(c.id());
        assertEquals("claimed", events.get(0).event());
        assertEquals("completed", events.get(events.size() - 1).event());
        assertThrows(RecordNotFoundException.class, () -> idemd.getKey(op, "never-claimed"));
        assertThrows(RecordNotFoundException.class, () -> idemd.completeKey(op, "never", 1, Outcome.ok(null)));
        assertThrows(OperationUnknownException.class, () -> idemd.claimKey("no.such.op", "k"));
        RecordPage page = idemd.listRecords(RecordQuery.ALL.withOperation(op).withLimit(1));
        assertEquals(1, page.records().size());
    }

    @Test
    void refusedBeforeSendingWithTheErrorIdemdWouldGive() throws Exception {
        // a client pointed at nothing: the refusal cannot have come from a server
        IdemdClient nowhere = IdemdClient.builder("http://127.0.0.1:9").retry(RetryPolicy.NONE).build();
        String[] bad = {"", "a b", "caf\u00e9", "x".repeat(256), "tab\there", "nul\u0000"};
        for (String k : bad) {
            IdempotencyKeyInvalidException e = assertThrows(IdempotencyKeyInvalidException.class,
                    () -> nowhere.claimKey("order.create", k));
            assertEquals(400, e.getStatus());
            assertEquals("idempotency_key_invalid", e.getCode());
        }
        InvalidRequestException a = assertThrows(InvalidRequestException.class,
                () -> nowhere.completeKey("order.create", "k", 0, Outcome.ok(null)));
        assertEquals(400, a.getStatus());
        assertThrows(InvalidRequestException.class, () -> nowhere.releaseToken("tok", 0));
        assertTrue(Validation.isValidKey("x".repeat(255)));
        assertTrue(Validation.isValidKey("!~"));

        // and idemd answers the same: status, code and detail
        HttpClient raw = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
        String op = TestEnv.operation(idemd, 30);
        HttpResponse<String> r = raw.send(HttpRequest.newBuilder(URI.create(TestEnv.get("IDEMD_URL")
                + "/v1/operations/" + op + "/keys/a%20b/claim")).header("Authorization", "Bearer "
                        + TestEnv.get("IDEMD_API_KEY")).header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString("{}")).build(), HttpResponse.BodyHandlers.ofString());
        JsonNode p = Json.parse(r.body().getBytes(StandardCharsets.UTF_8));
        IdempotencyKeyInvalidException mine = assertThrows(IdempotencyKeyInvalidException.class,
                () -> nowhere.claimKey(op, "a b"));
        assertEquals(r.statusCode(), mine.getStatus());
        assertEquals(p.get("code").asText(), mine.getCode());
        assertEquals(p.get("detail").asText(), mine.getDetail());

        idemd.claimKey(op, "k1");
        HttpResponse<String> r2 = raw.send(HttpRequest.newBuilder(URI.create(TestEnv.get("IDEMD_URL")
                + "/v1/operations/" + op + "/keys/k1/complete")).header("Authorization", "Bearer "
                        + TestEnv.get("IDEMD_API_KEY")).header("Content-Type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString("{\"attempt\":0,\"status\":200}")).build(),
                HttpResponse.BodyHandlers.ofString());
        JsonNode p2 = Json.parse(r2.body().getBytes(StandardCharsets.UTF_8));
        assertEquals(r2.statusCode(), a.getStatus());
        assertEquals(p2.get("code").asText(), a.getCode());
        assertEquals(p2.get("detail").asText(), a.getDetail());
    }

    @Test
    void versions() {
        String key = TestEnv.unique("orders:user");
        Version v = idemd.getVersion(key);
        assertEquals(0, v.version());
        assertEquals("\"0\"", v.etag());
        assertEquals(1, idemd.bumpVersion(key, 0));
        VersionMismatchException e = assertThrows(VersionMismatchException.class, () -> idemd.bumpVersion(key, 0));
        assertEquals(1L, e.getCurrentVersion());
    }

    @Test
    void staleFormIsVersionMismatch() {
        String op = "jvm.v." + TestEnv.unique("o").substring(2, 14);
        idemd.putOperation(op, OperationPolicy.of(3600, 3600, 30).withVersionKey("cart:{subject}"));
        String subject = TestEnv.unique("u");
        IssuedToken t = idemd.issue(op, subject);
        assertEquals(0L, t.version());
        idemd.bumpVersion("cart:" + subject, 0);
        VersionMismatchException e = assertThrows(VersionMismatchException.class, () -> idemd.claimToken(t.token()));
        assertEquals(1L, e.getCurrentVersion());
        assertEquals(op, idemd.getOperation(op).name());
        assertEquals("cart:{subject}", idemd.getOperation(op).versionKey());
        assertTrue(idemd.listOperations().stream().anyMatch(o -> o.name().equals(op)));
    }

    @Test
    void preferWaitGetsTheOutcome() throws Exception {
        String op = TestEnv.operation(idemd, 30);
        Claimed first = idemd.claimKey(op, "w");
        CompletableFuture<Claimed> waiter = CompletableFuture.supplyAsync(
                () -> idemd.claimKey(op, "w", ClaimOptions.NONE.withWaitSeconds(10)));
        Thread.sleep(300);
        idemd.completeKey(op, "w", first.attempt(), Outcome.of(201, Map.of("ok", true)));
        Claimed c = waiter.get();
        assertTrue(c.replayed());
        assertEquals(201, c.response().status());
        assertNotNull(c.preferenceApplied());
    }

    @Test
    void authAndTenants() {
        IdemdClient wrong = IdemdClient.builder(TestEnv.get("IDEMD_URL")).apiKey("idk_wrong").build();
        assertThrows(UnauthorizedException.class, () -> wrong.listOperations());
        String op = TestEnv.operation(idemd, 30);
        String t = idemd.issue(op, "u").token();
        IdemdClient globex = IdemdClient.builder(TestEnv.get("IDEMD_URL")).apiKey(TestEnv.get("IDEMD_API_KEY_2"))
                .build();
        assertThrows(TokenScopeMismatchException.class, () -> globex.claimToken(t));
        assertEquals("ok", idemd.health().status());
        assertTrue(idemd.ready().isUp());
    }

    @Test
    void rateLimitedIsRetriedHonouringRetryAfter() {
        IdemdClient limited = IdemdClient.builder(TestEnv.get("IDEMD_LIMITED_URL")).apiKey(TestEnv.get("IDEMD_API_KEY"))
                .build();
        String op = TestEnv.operation(limited, 30);
        IdemdClient once = limited.withRetry(RetryPolicy.NONE);
        RateLimitedException e = null;
        for (int i = 0; i < 3 && e == null; i++) {
            try {
                once.issue(op, "u");
            } catch (RateLimitedException x) {
                e = x;
            }
        }
        assertNotNull(e, "the second issue within a second is 429");
        assertNotNull(e.getRetryAfter());
        long t0 = System.nanoTime();
        once.getOperation(op); // not rate limited
        IssuedToken t = limited.issue(op, "u"); // waits out Retry-After
        assertNotNull(t.token());
        assertTrue(Duration.ofNanos(System.nanoTime() - t0).toMillis() >= 200);
    }

    @Test
    void overTheInflightBudgetIs503() {
        IdemdClient limited = IdemdClient.builder(TestEnv.get("IDEMD_LIMITED_URL")).apiKey(TestEnv.get("IDEMD_API_KEY"))
                .retry(RetryPolicy.NONE).build();
        String op = TestEnv.operation(limited, 30);
        String big = "x".repeat(1_200_000);
        IdemdException e = assertThrows(IdemdException.class,
                () -> limited.claimKey(op, "big", ClaimOptions.request(Map.of("blob", big))));
        if (e instanceof IdemdProblemException) {
            assertEquals(UnavailableException.class, e.getClass());
            assertNotNull(((IdemdProblemException) e).getRetryAfter());
        }
        assertNull(null);
    }
}
