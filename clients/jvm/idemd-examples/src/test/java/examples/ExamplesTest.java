package examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import dev.idemd.client.IdemdClient;
import dev.idemd.client.OperationPolicy;
import dev.idemd.client.StoredResponse;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfEnvironmentVariable;
import org.junit.jupiter.api.io.TempDir;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.boot.test.context.SpringBootTest;
import org.springframework.boot.test.web.server.LocalServerPort;

/** Runs each example of docs/clients/jvm.md against the real idemd. */
@EnabledIfEnvironmentVariable(named = "IDEMD_URL", matches = ".+")
@SpringBootTest(classes = ExamplesTest.App.class, webEnvironment = SpringBootTest.WebEnvironment.RANDOM_PORT)
class ExamplesTest {
    @SpringBootApplication
    static class App {
    }

    @LocalServerPort
    int port;

    static IdemdClient idemd() {
        IdemdClient c = IdemdClient.builder(System.getenv("IDEMD_URL")).apiKey(System.getenv("IDEMD_API_KEY")).build();
        // as the quick start leaves it: guarding orders:{subject}
        c.putOperation("order.create", OperationPolicy.of(3600, 86400, 30).withVersionKey("orders:{subject}"));
        c.putOperation("payment.capture", OperationPolicy.of(3600, 86400, 30));
        c.putOperation("payment.webhook", OperationPolicy.of(3600, 86400, 30));
        return c;
    }

    @Test
    void springController() throws Exception {
        idemd();
        HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
        String key = "order:user-42:" + UUID.randomUUID();
        HttpRequest req = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + port + "/users/user-42/orders"))
                .header("Content-Type", "application/json").header("Idempotency-Key", key)
                .POST(HttpRequest.BodyPublishers.ofString("{\"amount\":4200}")).build();
        int before = OrderController.ORDERS.get();
        HttpResponse<String> a = http.send(req, HttpResponse.BodyHandlers.ofString());
        HttpResponse<String> b = http.send(req, HttpResponse.BodyHandlers.ofString());
        assertEquals(201, a.statusCode(), a.body());
        assertEquals(a.body(), b.body());
        assertEquals("true", b.headers().firstValue("Idempotent-Replayed").orElse(""));
        assertEquals(before + 1, OrderController.ORDERS.get());
        // another caller (Authorization) with the same key is another request
        HttpResponse<String> c = http.send(HttpRequest.newBuilder(req, (n, v) -> true)
                .header("Authorization", "Bearer other").build(), HttpResponse.BodyHandlers.ofString());
        assertEquals("false", c.headers().firstValue("Idempotent-Replayed").orElse(""));
        assertEquals(before + 2, OrderController.ORDERS.get());
    }

    @Test
    void firstCalls() {
        idemd();
        assertEquals("o-1", FirstCalls.placeOrder(System.getenv("IDEMD_URL"), System.getenv("IDEMD_API_KEY")));
    }

    @Test
    void consumer() {
        IdemdClient c = idemd();
        String run = UUID.randomUUID().toString();
        java.util.List<WebhookConsumer.Event> batch = java.util.List.of(new WebhookConsumer.Event("evt-1-" + run, "a"),
                new WebhookConsumer.Event("evt-2-" + run, "b"), new WebhookConsumer.Event("evt-1-" + run, "a"));
        java.util.List<String> processed = new java.util.ArrayList<>();
        assertTrue(WebhookConsumer.handleBatch(c, batch, processed).isEmpty());
        assertTrue(WebhookConsumer.handleBatch(c, batch, processed).isEmpty()); // redelivered: replayed
        assertEquals(java.util.List.of("evt-1-" + run, "evt-2-" + run), processed);
    }

    @Test
    void claimHelper() {
        AtomicInteger charges = new AtomicInteger();
        AtomicInteger fail = new AtomicInteger(1);
        ChargeOnce payments = new ChargeOnce(idemd(), (id, amount) -> {
            if (fail.getAndDecrement() > 0) {
                throw new java.io.IOException("provider timed out");
            }
            return "ch_" + charges.incrementAndGet();
        });
        String id = UUID.randomUUID().toString();
        assertThrows(RuntimeException.class, () -> payments.charge(id, 4200)); // released
        StoredResponse first = payments.charge(id, 4200);
        StoredResponse again = payments.charge(id, 4200);
        assertEquals(201, first.status());
        assertEquals("ch_1", again.body().get("charge_id").asText());
        assertEquals(1, charges.get());
    }

    @Test
    void androidSubmit(@TempDir Path files) throws Exception {
        IdemdClient c = idemd();
        AtomicInteger placed = new AtomicInteger();
        HttpServer upstream = HttpServer.create(new InetSocketAddress("127.0.0.1",
                Integer.parseInt(System.getenv("IDEMD_UPSTREAM_PORT"))), 0);
        upstream.createContext("/orders", ex -> {
            ex.getRequestBody().readAllBytes();
            byte[] out = ("{\"order_id\":\"o-" + placed.incrementAndGet() + "\"}").getBytes(StandardCharsets.UTF_8);
            ex.getResponseHeaders().set("Content-Type", "application/json");
            ex.sendResponseHeaders(201, out.length);
            ex.getResponseBody().write(out);
            ex.close();
        });
        upstream.start();
        try {
            AndroidCheckout app = new AndroidCheckout(files, System.getenv("IDEMD_GATEWAY_URL"));
            String token = c.issue("order.create", "user-42").token();
            String first = app.placeOrder(token, "{\"cart\":\"c-1\"}");
            String twice = app.placeOrder(token, "{\"cart\":\"c-1\"}");
            assertTrue(first.contains("order_id"), first);
            assertEquals(first, twice);
            assertEquals(1, placed.get());
            assertTrue(app.resume().isEmpty());
        } finally {
            upstream.stop(0);
        }
    }
}
