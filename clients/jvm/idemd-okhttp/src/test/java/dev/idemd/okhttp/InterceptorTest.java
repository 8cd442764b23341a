package dev.idemd.okhttp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import okhttp3.MediaType;
import okhttp3.OkHttpClient;
import okhttp3.Request;
import okhttp3.RequestBody;
import okhttp3.Response;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The interceptor's answers to each status, against a scripted local server (no idemd needed). */
class InterceptorTest {
    HttpServer server;
    final List<String> prefer = Collections.synchronizedList(new ArrayList<>());
    final List<String> keys = Collections.synchronizedList(new ArrayList<>());
    volatile List<int[]> script = List.of();
    volatile int served;

    void serve(int... statuses) throws Exception {
        List<int[]> s = new ArrayList<>();
        for (int st : statuses) {
            s.add(new int[] {st});
        }
        script = s;
        server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        server.createContext("/", ex -> {
            ex.getRequestBody().readAllBytes();
            prefer.add(String.valueOf(ex.getRequestHeaders().getFirst("Prefer")));
            keys.add(ex.getRequestHeaders().getFirst("Idempotency-Key"));
            int status = script.get(Math.min(served++, script.size() - 1))[0];
            String body = status == 412
                    ? "{\"type\":\"https://idemd.dev/problems/version_mismatch\",\"status\":412,\"code\":\"version_mismatch\",\"detail\":\"the cart changed\"}"
                    : status >= 400 ? "{\"code\":\"x\"}" : "{\"order_id\":\"o-1\"}";
            if (status == 412) {
                ex.getResponseHeaders().set("ETag", "\"8\"");
            }
            if (status == 503) {
                ex.getResponseHeaders().set("Retry-After", "0");
            }
            byte[] out = body.getBytes(StandardCharsets.UTF_8);
            ex.sendResponseHeaders(status, out.length);
            ex.getResponseBody().write(out);
            ex.close();
        });
        server.start();
    }

    @AfterEach
    void stop() {
        if (server != null) {
            server.stop(0);
        }
    }

    Request submit(String token) {
        return new Request.Builder().url("http://127.0.0.1:" + server.getAddress().getPort() + "/shop/orders")
                .header("Idempotency-Key", token)
                .post(RequestBody.create("{\"cart\":\"c-1\"}", MediaType.get("application/json"))).build();
    }

    OkHttpClient client(IdemdSubmitInterceptor i) {
        return new OkHttpClient.Builder().addInterceptor(i).build();
    }

    @Test
    void conflictIsRetriedWithPreferWaitAndServerErrorsAfterRetryAfter(@TempDir Path dir) throws Exception {
        serve(409, 503, 201);
        FileSubmitStore store = new FileSubmitStore(dir);
        IdemdSubmitInterceptor i = IdemdSubmitInterceptor.builder(store).backoff(10, 20).waitSeconds(7).build();
        try (Response r = client(i).newCall(submit("tok-1")).execute()) {
            assertEquals(201, r.code());
        }
        assertEquals(List.of("null", "wait=7", "wait=7"), prefer);
        assertEquals(List.of("tok-1", "tok-1", "tok-1"), keys);
        assertTrue(store.list().isEmpty(), "a final answer leaves the store");
    }

    @Test
    void staleFormIsItsOwnException(@TempDir Path dir) throws Exception {
        serve(412);
        FileSubmitStore store = new FileSubmitStore(dir);
        IdemdSubmitInterceptor i = IdemdSubmitInterceptor.builder(store).build();
        StaleFormException e = assertThrows(StaleFormException.class,
                () -> client(i).newCall(submit("tok-2")).execute());
        assertEquals(412, e.getStatus());
        assertEquals("version_mismatch", e.getCode());
        assertEquals("the cart changed", e.getDetail());
        assertEquals(8L, e.getCurrentVersion());
        assertEquals(1, keys.size(), "412 is not retried");
        assertTrue(store.list().isEmpty());
    }

    @Test
    void otherClientErrorsAreFinalAndRequestsWithoutTokenPassUntouched(@TempDir Path dir) throws Exception {
        serve(422);
        IdemdSubmitInterceptor i = IdemdSubmitInterceptor.builder(new FileSubmitStore(dir)).build();
        try (Response r = client(i).newCall(submit("tok-3")).execute()) {
            assertEquals(422, r.code());
        }
        try (Response r = client(i).newCall(new Request.Builder()
                .url("http://127.0.0.1:" + server.getAddress().getPort() + "/x").build()).execute()) {
            assertEquals(422, r.code());
        }
        assertEquals(2, keys.size());
    }

    @Test
    void noAnswerLeavesTheSubmitPending(@TempDir Path dir) throws Exception {
        FileSubmitStore store = new FileSubmitStore(dir);
        IdemdSubmitInterceptor i = IdemdSubmitInterceptor.builder(store).maxAttempts(2).backoff(10, 10).build();
        Request r = new Request.Builder().url("http://127.0.0.1:9/shop/orders").header("Idempotency-Key", "tok-4")
                .post(RequestBody.create("{}", MediaType.get("application/json"))).build();
        SubmitInterruptedException e = assertThrows(SubmitInterruptedException.class,
                () -> client(i).newCall(r).execute());
        assertEquals("tok-4", e.getToken());
        assertEquals(1, store.list().size());
        PendingSubmit p = store.list().get(0);
        assertEquals("tok-4", p.getHeaders().get("Idempotency-Key"));
        assertEquals("{}", new String(p.getBody(), StandardCharsets.UTF_8));
    }

    @Test
    void storeWritesAtomicallyAndSkipsForeignFiles(@TempDir Path dir) throws Exception {
        FileSubmitStore store = new FileSubmitStore(dir);
        PendingSubmit p = new PendingSubmit("t\u00e9 \n", "POST", "http://x/y", Map.of("A", "b c"),
                new byte[] {0, 1, 2}, "application/json", 5);
        store.save(p);
        store.save(p);
        Files.writeString(dir.resolve("junk.submit"), "half a fi");
        assertEquals(List.of(p), store.list());
        try (var s = Files.list(dir)) {
            assertTrue(s.noneMatch(f -> f.toString().endsWith(".tmp")));
        }
        store.remove(p.getToken());
        assertTrue(store.list().isEmpty());
    }
}
