package dev.idemd.spring;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.idemd.client.CallerScope;
import dev.idemd.client.IdemdClient;
import dev.idemd.client.OperationPolicy;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfEnvironmentVariable;
import org.springframework.beans.factory.annotation.Autowired;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;
import org.springframework.test.context.DynamicPropertyRegistry;
import org.springframework.test.context.DynamicPropertySource;

/** The starter in a real embedded Tomcat against the real idemd. */
@EnabledIfEnvironmentVariable(named = "IDEMD_URL", matches = ".+")
@SpringBootTest(classes = TestShop.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT,
        properties = {"management.endpoint.health.show-details=always", "idemd.wait-seconds=10"})
class IdempotentTest {
    @DynamicPropertySource
    static void idemd(DynamicPropertyRegistry r) {
        r.add("idemd.url", () -> System.getenv("IDEMD_URL"));
        r.add("idemd.api-key", () -> System.getenv("IDEMD_API_KEY"));
    }

    @LocalServerPort
    int port;

    @Autowired
    IdemdClient idemd;

    final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();

    void operation() {
        idemd.putOperation(TestShop.OP, OperationPolicy.of(3600, 86400, 30));
    }

    HttpResponse<String> post(String path, String key, String type, String body, String... headers)
            throws Exception {
        HttpRequest.Builder b = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + path))
                .header("Content-Type", type).POST(HttpRequest.BodyPublishers.ofString(body));
        if (key != null) {
            b.header("Idempotency-Key", key);
        }
        if (headers.length > 0) {
            b.headers(headers);
        }
        return http.send(b.build(), HttpResponse.BodyHandlers.ofString());
    }

    @Test
    void theBodyIsPutAsGoAndExpressPutIt() {
        com.fasterxml.jackson.databind.node.ObjectNode id = dev.idemd.client.internal.Json.MAPPER.createObjectNode();
        IdempotencyFilter.putBody(id, "{ \"a\": [1, 2.0] }".getBytes(java.nio.charset.StandardCharsets.UTF_8));
        assertEquals("{\"json\":{\"a\":[1,2.0]}}", id.toString());
        id.removeAll();
        IdempotencyFilter.putBody(id, "sku=A-1&qty=2 é".getBytes(java.nio.charset.StandardCharsets.UTF_8));
        assertEquals("{\"body\":\"sku=A-1&qty=2 é\"}", id.toString());
        id.removeAll();
        IdempotencyFilter.putBody(id, new byte[0]);
        assertEquals("{\"body\":null}", id.toString());
        id.removeAll();
        IdempotencyFilter.putBody(id, new byte[] {(byte) 0xff, (byte) 0xfe});
        // sha256 of the two bytes, as Go's RequestIdentity and Express's requestIdentity put it
        assertEquals("{\"body_sha256\":\"b3d510ef04275ca8e698e5b3cbb0ece3949ef9252f0cdc839e9ee347409a2209\"}",
                id.toString());
    }

    @Test
    void keysAreScopedPerCaller() throws Exception {
        operation();
        String key = "order:" + UUID.randomUUID();
        int before = TestShop.apiRuns.get();
        HttpResponse<String> alice = post("/api/orders", key, "application/json", "{\"amount\":1}",
                "Authorization", "Bearer alice");
        HttpResponse<String> bob = post("/api/orders", key, "application/json", "{\"amount\":1}",
                "Authorization", "Bearer bob");
        HttpResponse<String> again = post("/api/orders", key, "application/json", "{\"amount\":1}",
                "Authorization", "Bearer alice");
        assertEquals("false", alice.headers().firstValue("Idempotent-Replayed").orElse(null));
        assertEquals("false", bob.headers().firstValue("Idempotent-Replayed").orElse(null)); // not alice's answer
        assertEquals("true", again.headers().firstValue("Idempotent-Replayed").orElse(null));
        assertEquals(alice.body(), again.body());
        assertEquals(before + 2, TestShop.apiRuns.get());
        // stored under the key every middleware sends: <scope>:<key>
        String scoped = CallerScope.scopedKey(key, Map.of("authorization", "Bearer alice"),
                CallerScope.DEFAULT_HEADERS);
        assertEquals(1, idemd.getKey(TestShop.OP, scoped).attempt());
        assertEquals(33 + key.length(), scoped.length());
    }

    @Test
    void guardedOperationTakesTheSubjectFromThePathOrAHeader() throws Exception {
        idemd.putOperation(TestShop.GUARDED, OperationPolicy.of(3600, 86400, 30).withVersionKey("orders:{subject}"));
        String key = "order:" + UUID.randomUUID();
        HttpResponse<String> first = post("/api/users/u-7/orders", key, "application/json", "{}");
        assertEquals(200, first.statusCode(), first.body());
        HttpResponse<String> again = post("/api/users/u-7/orders", key, "application/json", "{}");
        assertEquals("true", again.headers().firstValue("Idempotent-Replayed").orElse(null));
        assertEquals(first.body(), again.body());

        String mine = "order:" + UUID.randomUUID();
        HttpResponse<String> byHeader = post("/api/me/orders", mine, "application/json", "{}", "X-User-Id", "u-8");
        assertEquals(200, byHeader.statusCode(), byHeader.body());
        // scopeHeaders = "-": the key as sent
        assertEquals(1, idemd.getKey(TestShop.GUARDED, mine).attempt());
        HttpResponse<String> none = post("/api/me/orders", "order:" + UUID.randomUUID(), "application/json", "{}");
        assertEquals(400, none.statusCode());
        assertTrue(none.body().contains("invalid_request") && none.body().contains("X-User-Id"), none.body());

        String team = "order:" + UUID.randomUUID();
        String t = "t" + UUID.randomUUID().toString().substring(0, 8);
        HttpResponse<String> byBean = post("/api/team/orders", team, "application/json", "{}", "X-Team", t,
                "X-User-Id", "u-9");
        assertEquals(200, byBean.statusCode(), byBean.body());
        assertEquals(1L, idemd.getVersion("orders:" + t + ".u-9").version()); // the claim bumped it
        HttpResponse<String> noTeam = post("/api/team/orders", team + "x", "application/json", "{}");
        assertEquals(400, noTeam.statusCode());
        assertTrue(noTeam.body().contains("teamSubject"), noTeam.body());
    }

    @Test
    void callerKeyRunsOnceAndReplays() throws Exception {
        operation();
        String key = "order:user-42:" + UUID.randomUUID();
        int before = TestShop.apiRuns.get();
        HttpResponse<String> first = post("/api/orders", key, "application/json", "{\"amount\":4200}");
        assertEquals(201, first.statusCode(), first.body());
        assertEquals("false", first.headers().firstValue("Idempotent-Replayed").orElse(null));
        HttpResponse<String> again = post("/api/orders", key, "application/json", "{\"amount\":4200}");
        assertEquals(201, again.statusCode());
        assertEquals("true", again.headers().firstValue("Idempotent-Replayed").orElse(null));
        assertEquals(first.body(), again.body());
        assertEquals(first.headers().firstValue("Location"), again.headers().firstValue("Location"));
        assertTrue(again.headers().firstValue("Content-Type").orElse("").startsWith("application/json"));
        assertEquals(before + 1, TestShop.apiRuns.get());
        // the same JSON meaning in other bytes is the same request
        HttpResponse<String> spaced = post("/api/orders", key, "application/json", "{ \"amount\": 4200 }");
        assertEquals(201, spaced.statusCode(), spaced.body());
        assertEquals("true", spaced.headers().firstValue("Idempotent-Replayed").orElse(null));
        assertEquals(before + 1, TestShop.apiRuns.get());

        HttpResponse<String> other = post("/api/orders", key, "application/json", "{\"amount\":1}");
        assertEquals(422, other.statusCode());
        assertTrue(other.body().contains("fingerprint_mismatch"), other.body());
        // idemd's own problem, unchanged
        assertTrue(other.body().contains("\"title\":\"Unprocessable Content\""), other.body());
        assertEquals(400, post("/api/orders", null, "application/json", "{}").statusCode());
        HttpResponse<String> bad = post("/api/orders", "has space", "application/json", "{}");
        assertEquals(400, bad.statusCode());
        assertTrue(bad.body().contains("idempotency_key_invalid"), bad.body());
        assertEquals(before + 1, TestShop.apiRuns.get());
    }

    @Test
    void concurrentDuplicateWaitsForTheOutcome() throws Exception {
        operation();
        String key = "order:user-43:" + UUID.randomUUID();
        TestShop.slowMillis = 800;
        try {
            int before = TestShop.apiRuns.get();
            CompletableFuture<HttpResponse<String>> a = CompletableFuture.supplyAsync(() -> {
                try {
                    return post("/api/orders", key, "application/json", "{\"amount\":1}");
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            Thread.sleep(250);
            HttpResponse<String> b = post("/api/orders", key, "application/json", "{\"amount\":1}");
            assertEquals(201, a.get().statusCode());
            assertEquals(201, b.statusCode());
            assertEquals(a.get().body(), b.body());
            assertEquals("true", b.headers().firstValue("Idempotent-Replayed").orElse(null));
            assertEquals(before + 1, TestShop.apiRuns.get());
        } finally {
            TestShop.slowMillis = 0;
        }
    }

    @Test
    void anExceptionReleasesTheClaim() throws Exception {
        operation();
        String key = "pay:" + UUID.randomUUID();
        TestShop.failRuns.set(0);
        HttpResponse<String> failed = post("/api/flaky", key, "application/json", "{}");
        assertEquals(500, failed.statusCode());
        HttpResponse<String> retried = post("/api/flaky", key, "application/json", "{}");
        assertEquals(200, retried.statusCode(), retried.body());
        assertEquals(2, TestShop.failRuns.get());
        // no Authorization, no Cookie: the scope of their empty values
        assertEquals(2, idemd.getKey(TestShop.OP, CallerScope.scopedKey(key, Map.of(), CallerScope.DEFAULT_HEADERS))
                .attempt());
    }

    @Test
    void formTokenIsIssuedConsumedAndReplayed() throws Exception {
        operation();
        HttpResponse<String> page = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port
                + "/checkout")).build(), HttpResponse.BodyHandlers.ofString());
        Matcher m = Pattern.compile("name=idemd_token value=\"([^\"]+)\"").matcher(page.body());
        assertTrue(m.find(), page.body());
        String token = m.group(1);
        int before = TestShop.formRuns.get();
        String form = "idemd_token=" + token + "&sku=A-1";
        HttpResponse<String> first = post("/checkout", null, "application/x-www-form-urlencoded", form);
        assertEquals(303, first.statusCode());
        HttpResponse<String> dbl = post("/checkout", null, "application/x-www-form-urlencoded", form);
        assertEquals(303, dbl.statusCode());
        assertEquals(first.headers().firstValue("Location"), dbl.headers().firstValue("Location"));
        assertEquals("true", dbl.headers().firstValue("Idempotent-Replayed").orElse(null));
        assertEquals(before + 1, TestShop.formRuns.get());
        assertEquals("completed", idemd.introspect(token).state());

        HttpResponse<String> forged = post("/checkout", null, "application/x-www-form-urlencoded",
                "idemd_token=" + token.substring(0, token.length() - 2) + "xx&sku=A-1");
        assertTrue(forged.statusCode() == 400 || forged.statusCode() == 403, forged.body()); // malformed or invalid
        assertEquals(400, post("/checkout", null, "application/x-www-form-urlencoded", "sku=A-1").statusCode());
        assertEquals(before + 1, TestShop.formRuns.get());
    }

    @Test
    void healthContributor() throws Exception {
        HttpResponse<String> h = http.send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port
                + "/actuator/health/idemd")).build(), HttpResponse.BodyHandlers.ofString());
        assertEquals(200, h.statusCode(), h.body());
        assertTrue(h.body().contains("\"UP\""), h.body());
        assertNotNull(idemd);
    }
}
