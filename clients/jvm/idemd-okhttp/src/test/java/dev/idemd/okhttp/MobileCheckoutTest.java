package dev.idemd.okhttp;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.sun.net.httpserver.HttpServer;
import dev.idemd.client.IdemdClient;
import dev.idemd.client.IssuedToken;
import dev.idemd.client.OperationPolicy;
import java.io.File;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.BooleanSupplier;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The mobile checkout, proven: the "app" (a separate JVM running
 * {@link CheckoutApp}) submits orders through the interceptor, via a TCP
 * proxy that loses answers, to idemd's gateway route POST /shop/orders,
 * whose upstream (here) counts the orders it gets per Idempotency-Key. The
 * app is killed between a submit and its retry and started again: every
 * token places exactly one order, and the restarted app shows it.
 */
class MobileCheckoutTest {
    static HttpServer upstream;
    static final Map<String, AtomicInteger> orders = new ConcurrentHashMap<>();
    static final AtomicInteger orderNo = new AtomicInteger();
    static volatile long upstreamDelayMillis = 0;
    static TcpProxy proxy;
    static IdemdClient idemd;
    static String shopUrl;
    static int kills;
    static int appStarts;
    static final Map<String, String> figures = new LinkedHashMap<>();

    static String env(String name) {
        String v = System.getenv(name);
        Assumptions.assumeTrue(v != null && !v.isEmpty(), name + " is not set");
        return v;
    }

    @BeforeAll
    static void start() throws IOException {
        idemd = IdemdClient.builder(env("IDEMD_URL")).apiKey(env("IDEMD_API_KEY")).build();
        URI gw = URI.create(env("IDEMD_GATEWAY_URL"));
        int upPort = Integer.parseInt(env("IDEMD_UPSTREAM_PORT"));
        idemd.putOperation("order.create", OperationPolicy.of(3600, 86400, 30));
        upstream = HttpServer.create(new InetSocketAddress("127.0.0.1", upPort), 0);
        upstream.createContext("/orders", ex -> {
            ex.getRequestBody().readAllBytes();
            String key = ex.getRequestHeaders().getFirst("Idempotency-Key");
            int n = orderNo.incrementAndGet();
            orders.computeIfAbsent(String.valueOf(key), k -> new AtomicInteger()).incrementAndGet();
            try {
                Thread.sleep(upstreamDelayMillis);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            byte[] out = ("{\"order_id\":\"o-" + n + "\"}").getBytes(StandardCharsets.UTF_8);
            ex.getResponseHeaders().set("Content-Type", "application/json");
            ex.getResponseHeaders().set("Location", "/orders/o-" + n);
            ex.sendResponseHeaders(201, out.length);
            ex.getResponseBody().write(out);
            ex.close();
        });
        upstream.setExecutor(java.util.concurrent.Executors.newCachedThreadPool());
        upstream.start();
        proxy = new TcpProxy(gw.getHost(), gw.getPort());
        shopUrl = "http://127.0.0.1:" + proxy.port() + "/shop/orders";
    }

    @AfterAll
    static void stop() throws IOException {
        if (upstream != null) {
            upstream.stop(0);
        }
        if (proxy != null) {
            StringBuilder sb = new StringBuilder("mobile checkout: submits " + proxy.requests.get() + ", drops "
                    + proxy.drops.get() + ", stalls " + proxy.stalls.get() + ", swallowed " + proxy.swallowed.get()
                    + ", kills " + kills + ", app starts " + appStarts + "; orders placed per token:");
            figures.forEach((k, v) -> sb.append(' ').append(k).append('=').append(v));
            System.out.println(sb);
            Files.writeString(Path.of("target", "mobile-figures.txt"), sb + "\n", StandardCharsets.UTF_8);
            proxy.close();
        }
    }

    static Process app(Path out, String... args) throws IOException {
        String cp = System.getProperty("surefire.test.class.path", System.getProperty("java.class.path"));
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(),
                "-Xshare:auto", "-XX:TieredStopAtLevel=1", "-cp", cp, CheckoutApp.class.getName()));
        cmd.addAll(List.of(args));
        appStarts++;
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(out.toFile()).start();
    }

    static void await(String what, long millis, BooleanSupplier cond) throws InterruptedException {
        long end = System.currentTimeMillis() + millis;
        while (!cond.getAsBoolean()) {
            if (System.currentTimeMillis() > end) {
                throw new AssertionError("timed out waiting for " + what);
            }
            Thread.sleep(20);
        }
    }

    static int placed(IssuedToken t) {
        AtomicInteger n = orders.get(t.id());
        return n == null ? 0 : n.get();
    }

    static String finish(Process p, Path out) throws Exception {
        assertTrue(p.waitFor(60, TimeUnit.SECONDS), "the app did not finish");
        String text = Files.readString(out);
        assertEquals(0, p.exitValue(), text);
        return text;
    }

    @Test
    void killedBetweenTheSubmitAndItsRetry(@TempDir Path dir) throws Exception {
        Path store = dir.resolve("store");
        IssuedToken t = idemd.issue("order.create", "user-kill");
        // the first try's answer is lost, and the network is gone for the retries
        proxy.set(TcpProxy.Mode.DROP, 1, TcpProxy.Mode.BLACKHOLE);
        int drops = proxy.drops.get();
        Process first = app(dir.resolve("first.out"), "submit", shopUrl, store.toString(), t.token());
        await("the order to be placed and its answer dropped", 30000,
                () -> placed(t) == 1 && proxy.drops.get() == drops + 1);
        await("the retry to be under way", 10000, () -> proxy.swallowed.get() > 0 || !first.isAlive());
        assertTrue(first.isAlive(), "the app must still be retrying when it is killed");
        first.destroyForcibly();
        assertTrue(first.waitFor(10, TimeUnit.SECONDS));
        kills++;
        String before = Files.readString(dir.resolve("first.out"));
        assertFalse(before.contains("ORDER"), "the killed app never saw its order: " + before);
        File[] pending = store.toFile().listFiles((d, n) -> n.endsWith(".submit"));
        assertEquals(1, pending.length, "the submit is pending in the store");

        proxy.set(TcpProxy.Mode.PASS);
        Process again = app(dir.resolve("second.out"), "resume", store.toString());
        String shown = finish(again, dir.resolve("second.out"));
        assertTrue(shown.contains("RESUMED 1"), shown);
        assertTrue(shown.contains("ORDER 201 replayed=true {\"order_id\":\"o-"), shown);
        assertEquals(1, placed(t));
        assertEquals(0, store.toFile().listFiles((d, n) -> n.endsWith(".submit")).length);
        figures.put("killed", String.valueOf(placed(t)));

        // started once more: nothing pending, nothing sent
        String third = finish(app(dir.resolve("third.out"), "resume", store.toString()), dir.resolve("third.out"));
        assertTrue(third.contains("RESUMED 0"), third);
        assertEquals(1, placed(t));
    }

    @Test
    void droppedConnectionRetriedInProcess(@TempDir Path dir) throws Exception {
        IssuedToken t = idemd.issue("order.create", "user-drop");
        upstreamDelayMillis = 700; // the retry arrives while the first is still in progress: 409, then a wait
        proxy.set(TcpProxy.Mode.DROP, 1, TcpProxy.Mode.PASS);
        try {
            String shown = finish(app(dir.resolve("out"), "submit", shopUrl, dir.resolve("s").toString(),
                    t.token()), dir.resolve("out"));
            assertTrue(shown.contains("ORDER 201 replayed=true"), shown);
        } finally {
            upstreamDelayMillis = 0;
        }
        assertEquals(1, placed(t));
        figures.put("dropped", String.valueOf(placed(t)));
    }

    @Test
    void timeoutRetriedInProcess(@TempDir Path dir) throws Exception {
        IssuedToken t = idemd.issue("order.create", "user-slow");
        proxy.holdMillis = 2500; // past the app's 1.5 s read timeout
        proxy.set(TcpProxy.Mode.STALL, 1, TcpProxy.Mode.PASS);
        String shown = finish(app(dir.resolve("out"), "submit", shopUrl, dir.resolve("s").toString(),
                t.token()), dir.resolve("out"));
        assertTrue(shown.contains("ORDER 201 replayed=true"), shown);
        assertEquals(1, placed(t));
        figures.put("timed-out", String.valueOf(placed(t)));
    }

    @Test
    void cleanSubmitIsNotReplayed(@TempDir Path dir) throws Exception {
        IssuedToken t = idemd.issue("order.create", "user-ok");
        proxy.set(TcpProxy.Mode.PASS);
        String shown = finish(app(dir.resolve("out"), "submit", shopUrl, dir.resolve("s").toString(),
                t.token()), dir.resolve("out"));
        assertTrue(shown.contains("ORDER 201 replayed=false"), shown);
        assertEquals(1, placed(t));
        figures.put("clean", String.valueOf(placed(t)));
    }
}
