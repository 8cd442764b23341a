package dev.idemd.client;

import static org.junit.jupiter.api.Assertions.fail;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import dev.idemd.client.internal.Json;
import dev.idemd.client.internal.Problems;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.SecureRandom;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Function;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.DynamicTest;
import org.junit.jupiter.api.TestFactory;

/**
 * The shared conformance scenarios (clients/conformance/*.json, format in its
 * README): one dynamic test per file, against the real idemd and a scripted
 * stub server.
 */
class ConformanceTest {
    private static final JsonNodeFactory F = JsonNodeFactory.instance;
    private static final Set<String> TOP = Set.of("name", "description", "clients", "steps");
    private static final Set<String> STEP = Set.of("op", "args", "client", "stub", "expect", "save", "background",
            "await", "note");
    private static final Set<String> EXPECT = Set.of("result", "error", "requests", "sent", "min_elapsed_ms",
            "max_elapsed_ms");

    @TestFactory
    Stream<DynamicTest> scenarios() throws IOException {
        Path dir = TestEnv.sourceDir().resolve("clients/conformance");
        List<Path> files;
        try (Stream<Path> s = Files.list(dir)) {
            files = s.filter(p -> p.toString().endsWith(".json")).sorted().collect(Collectors.toList());
        }
        if (files.isEmpty()) {
            fail("no scenarios in " + dir);
        }
        Path report = Path.of("target", "conformance.txt");
        Files.createDirectories(report.getParent());
        Files.deleteIfExists(report);
        return files.stream().map(f -> {
            String name = f.getFileName().toString().replaceAll("\\.json$", "");
            return DynamicTest.dynamicTest(name, () -> {
                String verdict = "FAIL";
                try {
                    new Run(f).run();
                    verdict = "pass";
                } catch (org.opentest4j.TestAbortedException e) {
                    verdict = "skipped";
                    throw e;
                } finally {
                    Files.writeString(report, name + " " + verdict + "\n", StandardCharsets.UTF_8,
                            java.nio.file.StandardOpenOption.CREATE, java.nio.file.StandardOpenOption.APPEND);
                }
            });
        });
    }

    /** A handler failure the claim helper releases. */
    static final class RetryableFailure extends RuntimeException {
        private static final long serialVersionUID = 1L;

        RetryableFailure(String m) {
            super(m);
        }
    }

    /** A handler failure the claim helper stores as final. */
    static final class FinalFailure extends RuntimeException {
        private static final long serialVersionUID = 1L;

        FinalFailure(String m) {
            super(m);
        }
    }

    /** What the stub server answers and records. */
    static final class Stub implements AutoCloseable {
        final HttpServer server;
        volatile List<JsonNode> answers = Collections.emptyList();
        final List<ObjectNode> received = Collections.synchronizedList(new ArrayList<>());
        int served;

        Stub() throws IOException {
            server = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
            server.createContext("/", this::handle);
            server.start();
        }

        String url() {
            return "http://127.0.0.1:" + server.getAddress().getPort();
        }

        synchronized void script(List<JsonNode> a) {
            answers = a;
            served = 0;
            received.clear();
        }

        private void handle(HttpExchange ex) throws IOException {
            byte[] body = ex.getRequestBody().readAllBytes();
            ObjectNode r = F.objectNode();
            r.put("method", ex.getRequestMethod());
            r.put("path", ex.getRequestURI().getRawPath()
                    + (ex.getRequestURI().getRawQuery() != null ? "?" + ex.getRequestURI().getRawQuery() : ""));
            ObjectNode h = r.putObject("headers");
            ex.getRequestHeaders().forEach((k, v) -> h.put(k.toLowerCase(), String.join(", ", v)));
            JsonNode b = F.nullNode();
            if (body.length > 0) {
                try {
                    b = Json.parse(body);
                } catch (RuntimeException e) {
                    b = F.nullNode();
                }
            }
            r.set("body", b);
            JsonNode a;
            synchronized (this) {
                received.add(r);
                if (answers.isEmpty()) {
                    a = Json.tree(Map.of("status", 599));
                } else {
                    a = answers.get(Math.min(served, answers.size() - 1));
                }
                served++;
            }
            int status = a.path("status").asInt(200);
            byte[] out = new byte[0];
            String type = null;
            if (a.has("body")) {
                out = Json.write(a.get("body")).getBytes(StandardCharsets.UTF_8);
                type = status >= 400 ? "application/problem+json" : "application/json";
            } else if (a.has("body_text")) {
                out = a.get("body_text").asText().getBytes(StandardCharsets.UTF_8);
                type = "text/plain";
            }
            if (type != null) {
                ex.getResponseHeaders().set("Content-Type", type);
            }
            for (Iterator<Map.Entry<String, JsonNode>> it = a.path("headers").fields(); it.hasNext();) {
                Map.Entry<String, JsonNode> e = it.next();
                ex.getResponseHeaders().set(e.getKey(), e.getValue().asText());
            }
            ex.sendResponseHeaders(status, out.length == 0 ? -1 : out.length);
            if (out.length > 0) {
                ex.getResponseBody().write(out);
            }
            ex.close();
        }

        @Override
        public void close() {
            server.stop(0);
        }
    }

    /** What one call ended with. */
    static final class Done {
        JsonNode result;
        Throwable error;
        Throwable handlerError;
        long elapsedMs;
    }

    /** One run of one scenario. */
    static final class Run {
        final Path file;
        final JsonNode scenario;
        final Map<String, JsonNode> vars = new HashMap<>();
        final Map<String, IdemdClient> clients = new HashMap<>();
        final Map<String, Boolean> stubbed = new HashMap<>();
        final Map<String, CompletableFuture<Done>> background = new HashMap<>();
        Stub stub;

        Run(Path file) throws IOException {
            this.file = file;
            this.scenario = Json.parse(Files.readAllBytes(file));
        }

        void run() throws Exception {
            for (Iterator<String> it = scenario.fieldNames(); it.hasNext();) {
                String f = it.next();
                if (!TOP.contains(f)) {
                    fail("unknown top-level field " + f);
                }
            }
            String expectedName = file.getFileName().toString().replaceAll("\\.json$", "");
            if (!expectedName.equals(scenario.path("name").asText())) {
                fail("name " + scenario.path("name") + " is not the file's name " + expectedName);
            }
            byte[] rnd = new byte[6];
            new SecureRandom().nextBytes(rnd);
            StringBuilder run = new StringBuilder("c");
            for (byte b : rnd) {
                run.append(String.format("%02x", b & 0xff));
            }
            vars.put("run", F.textNode(run.toString()));
            vars.put("run_long_key", F.textNode("k".repeat(256)));
            vars.put("run_max_key", F.textNode("k".repeat(255)));
            try {
                JsonNode steps = scenario.get("steps");
                for (int i = 0; i < steps.size(); i++) {
                    try {
                        step(steps.get(i));
                    } catch (AssertionError e) {
                        throw new AssertionError("step " + i + " (" + steps.get(i).path("op").asText(
                                steps.get(i).path("await").asText()) + "): " + e.getMessage(), e);
                    }
                }
            } finally {
                if (stub != null) {
                    stub.close();
                }
            }
        }

        IdemdClient client(String name) throws IOException {
            IdemdClient c = clients.get(name);
            if (c != null) {
                return c;
            }
            JsonNode conf = scenario.path("clients").path(name);
            if (conf.isMissingNode()) {
                if (!name.equals("default")) {
                    fail("no client " + name);
                }
                conf = F.objectNode();
            }
            String server = conf.path("server").asText("main");
            String url;
            switch (server) {
                case "main":
                    url = TestEnv.get("IDEMD_URL");
                    break;
                case "limited":
                    url = TestEnv.get("IDEMD_LIMITED_URL");
                    break;
                case "stub":
                    if (stub == null) {
                        stub = new Stub();
                    }
                    url = stub.url();
                    break;
                default:
                    throw new AssertionError("unknown server " + server);
            }
            JsonNode k = conf.path("api_key");
            String key;
            if (k.isMissingNode() || k.asText().equals("acme")) {
                key = TestEnv.get("IDEMD_API_KEY");
            } else if (k.isObject()) {
                key = k.path("literal").asText();
            } else if (k.asText().equals("globex")) {
                key = TestEnv.get("IDEMD_API_KEY_2");
            } else if (k.asText().equals("none")) {
                key = null;
            } else {
                throw new AssertionError("unknown api_key " + k);
            }
            JsonNode r = conf.path("retry");
            RetryPolicy retry = new RetryPolicy(r.path("attempts").asInt(3),
                    Duration.ofMillis(r.path("base_delay_ms").asLong(10)),
                    Duration.ofMillis(r.path("max_delay_ms").asLong(100)), Duration.ofSeconds(30));
            c = IdemdClient.builder(url).apiKey(key).retry(retry).build();
            clients.put(name, c);
            stubbed.put(name, server.equals("stub"));
            return c;
        }

        void step(JsonNode step) throws Exception {
            for (Iterator<String> it = step.fieldNames(); it.hasNext();) {
                String f = it.next();
                if (!STEP.contains(f)) {
                    fail("unknown step field " + f);
                }
            }
            JsonNode expect = step.has("expect") ? expand(step.get("expect")) : null;
            if (expect != null) {
                for (Iterator<String> it = expect.fieldNames(); it.hasNext();) {
                    String f = it.next();
                    if (!EXPECT.contains(f)) {
                        fail("unknown expect field " + f);
                    }
                }
            }
            if (step.has("await")) {
                CompletableFuture<Done> f = background.remove(step.get("await").asText());
                if (f == null) {
                    fail("no background call " + step.get("await"));
                }
                check(step, expect, f.get(120, TimeUnit.SECONDS), null);
                return;
            }
            String clientName = step.path("client").asText("default");
            IdemdClient c = client(clientName);
            String op = step.path("op").asText();
            JsonNode args = expand(step.has("args") ? step.get("args") : F.objectNode());
            List<ObjectNode> received = null;
            if (Boolean.TRUE.equals(stubbed.get(clientName))) {
                List<JsonNode> answers = new ArrayList<>();
                if (step.has("stub")) {
                    expand(step.get("stub")).forEach(answers::add);
                }
                stub.script(answers);
                received = stub.received;
            }
            if (step.has("background")) {
                background.put(step.get("background").asText(), CompletableFuture.supplyAsync(() -> call(c, op, args)));
                return;
            }
            Done d = call(c, op, args);
            check(step, expect, d, received);
        }

        void check(JsonNode step, JsonNode expect, Done d, List<ObjectNode> received) {
            if (expect != null && expect.has("error")) {
                if (d.error == null) {
                    fail("expected an error " + expect.get("error") + ", got the result " + d.result);
                }
                matchError(expect.get("error"), d);
            } else if (d.error != null) {
                throw new AssertionError("unexpected error: " + d.error, d.error);
            } else if (expect != null && expect.has("result")) {
                match(expect.get("result"), d.result, "result");
            }
            if (expect != null) {
                List<ObjectNode> got = received == null ? List.of() : new ArrayList<>(received);
                if (expect.has("requests") && got.size() != expect.get("requests").asInt()) {
                    fail("expected " + expect.get("requests") + " requests, the stub got " + got.size() + ": " + got);
                }
                if (expect.has("sent")) {
                    JsonNode sent = expect.get("sent");
                    if (got.size() < sent.size()) {
                        fail("expected at least " + sent.size() + " requests, got " + got);
                    }
                    for (int i = 0; i < sent.size(); i++) {
                        match(sent.get(i), got.get(i), "sent[" + i + "]");
                    }
                }
                if (expect.has("min_elapsed_ms") && d.elapsedMs < expect.get("min_elapsed_ms").asLong()) {
                    fail("took " + d.elapsedMs + " ms, less than " + expect.get("min_elapsed_ms"));
                }
                if (expect.has("max_elapsed_ms") && d.elapsedMs > expect.get("max_elapsed_ms").asLong()) {
                    fail("took " + d.elapsedMs + " ms, more than " + expect.get("max_elapsed_ms"));
                }
            }
            if (step.has("save")) {
                if (d.error != null) {
                    fail("cannot save from a failed call: " + d.error);
                }
                for (Iterator<Map.Entry<String, JsonNode>> it = step.get("save").fields(); it.hasNext();) {
                    Map.Entry<String, JsonNode> e = it.next();
                    vars.put(e.getKey(), path(d.result, e.getValue().asText()));
                }
            }
        }

        void matchError(JsonNode pattern, Done d) {
            ObjectNode e = F.objectNode();
            Throwable t = d.error;
            if (pattern.has("handler")) {
                e.put("handler", d.handlerError != null && t == d.handlerError);
            }
            if (t instanceof IdemdProblemException) {
                IdemdProblemException p = (IdemdProblemException) t;
                if (p.getCode() == null) {
                    e.putNull("code");
                } else {
                    e.put("code", p.getCode());
                }
                e.put("status", p.getStatus());
                if (p.getRetryAfter() != null) {
                    e.put("retry_after", p.getRetryAfter().toMillis() / 1000.0);
                } else {
                    e.putNull("retry_after");
                }
                if (p.getProblem() != null) {
                    e.set("problem", p.getProblem());
                }
                if (p instanceof VersionMismatchException && ((VersionMismatchException) p).getCurrentVersion() != null) {
                    e.put("current_version", ((VersionMismatchException) p).getCurrentVersion());
                }
                if (pattern.has("code")) {
                    Class<?> want = pattern.get("code").isNull() ? IdemdProblemException.class
                            : Problems.classFor(pattern.get("code").asText());
                    if (t.getClass() != want) {
                        fail("expected " + want.getSimpleName() + ", got " + t);
                    }
                }
            } else if (pattern.has("code") || pattern.has("status")) {
                throw new AssertionError("expected a problem " + pattern + ", got " + t, t);
            }
            match(pattern, e, "error");
        }

        JsonNode expand(JsonNode n) {
            if (n.isTextual()) {
                String s = n.asText();
                Matcher whole = Pattern.compile("^\\$\\{([A-Za-z0-9_]+)\\}$").matcher(s);
                if (whole.matches()) {
                    return var(whole.group(1)).deepCopy();
                }
                Matcher m = Pattern.compile("\\$\\{([A-Za-z0-9_]+)\\}").matcher(s);
                StringBuilder sb = new StringBuilder();
                while (m.find()) {
                    JsonNode v = var(m.group(1));
                    String text = v.isTextual() ? v.asText() : Json.write(v);
                    m.appendReplacement(sb, Matcher.quoteReplacement(text));
                }
                m.appendTail(sb);
                return F.textNode(sb.toString());
            }
            if (n.isArray()) {
                ArrayNode a = F.arrayNode();
                n.forEach(x -> a.add(expand(x)));
                return a;
            }
            if (n.isObject()) {
                ObjectNode o = F.objectNode();
                n.fields().forEachRemaining(e -> o.set(e.getKey(), expand(e.getValue())));
                return o;
            }
            return n;
        }

        JsonNode var(String name) {
            JsonNode v = vars.get(name);
            if (v == null) {
                fail("undefined variable " + name);
            }
            return v;
        }
    }

    // ------------------------------------------------------------------ the ops

    static String s(JsonNode args, String name) {
        JsonNode n = args.get(name);
        return n == null || n.isNull() ? null : n.asText();
    }

    static Integer i(JsonNode args, String name) {
        JsonNode n = args.get(name);
        return n == null || n.isNull() ? null : n.asInt();
    }

    /** The attempt, or 0 (the client's "no attempt", refused before sending). */
    static int attempt(JsonNode args) {
        JsonNode n = args.get("attempt");
        return n != null && n.canConvertToInt() && n.isIntegralNumber() ? n.asInt() : 0;
    }

    static ClaimOptions claimOptions(JsonNode a) {
        ClaimOptions o = ClaimOptions.NONE;
        if (a.has("request") && !a.get("request").isNull()) {
            o = o.withRequest(a.get("request"));
        }
        if (s(a, "fingerprint") != null) {
            o = o.withFingerprint(s(a, "fingerprint"));
        }
        if (s(a, "subject") != null) {
            o = o.withSubject(s(a, "subject"));
        }
        JsonNode im = a.get("if_match");
        if (im != null && !im.isNull()) {
            o = im.isNumber() ? o.withIfMatch(im.asLong()) : o.withIfMatchHeader(im.asText());
        }
        if (i(a, "wait") != null) {
            o = o.withWaitSeconds(i(a, "wait"));
        }
        return o;
    }

    static Outcome outcome(JsonNode a) {
        Map<String, String> headers = new LinkedHashMap<>();
        a.path("headers").fields().forEachRemaining(e -> headers.put(e.getKey(), e.getValue().asText()));
        int status = a.path("status").asInt();
        if (a.has("body_base64") && !a.get("body_base64").isNull()) {
            return Outcome.bytes(status, Base64.getDecoder().decode(a.get("body_base64").asText()), headers);
        }
        return Outcome.of(status, a.has("body") ? a.get("body") : null, headers);
    }

    static ObjectNode claimed(Claimed c) {
        ObjectNode o = c.raw().isObject() ? ((ObjectNode) c.raw()).deepCopy() : F.objectNode();
        o.put("replayed", c.replayed());
        return o;
    }

    static <T> ObjectNode list(String name, List<T> items, Function<T, JsonNode> raw) {
        ObjectNode o = F.objectNode();
        ArrayNode arr = o.putArray(name);
        items.forEach(x -> arr.add(raw.apply(x)));
        return o;
    }

    static Done call(IdemdClient c, String op, JsonNode a) {
        Done d = new Done();
        long t0 = System.nanoTime();
        try {
            d.result = dispatch(c, op, a, d);
        } catch (Throwable e) {
            d.error = e;
        }
        d.elapsedMs = (System.nanoTime() - t0) / 1_000_000;
        return d;
    }

    static JsonNode dispatch(IdemdClient c, String op, JsonNode a, Done d) throws Exception {
        switch (op) {
            case "scoped_key": {
                Map<String, String> h = new HashMap<>();
                a.get("headers").fields().forEachRemaining(e -> h.put(e.getKey(), e.getValue().asText()));
                List<String> names = CallerScope.DEFAULT_HEADERS;
                if (a.has("scope_headers")) {
                    names = new ArrayList<>();
                    for (JsonNode n : a.get("scope_headers")) {
                        names.add(n.asText());
                    }
                }
                return F.objectNode().put("key", CallerScope.scopedKey(s(a, "key"), h, names));
            }
            case "put_operation": {
                OperationPolicy p = OperationPolicy.of(i(a, "token_ttl_seconds"), i(a, "retention_seconds"),
                        i(a, "lease_seconds"));
                if (s(a, "version_key") != null) {
                    p = p.withVersionKey(s(a, "version_key"));
                }
                if (a.has("require_version")) {
                    p = p.withRequireVersion(a.get("require_version").asBoolean());
                }
                if (i(a, "wait_seconds") != null) {
                    p = p.withWaitSeconds(i(a, "wait_seconds"));
                }
                if (a.has("audit_retention_seconds")) {
                    p = p.withAuditRetentionSeconds(a.get("audit_retention_seconds").asLong());
                }
                return c.putOperation(s(a, "name"), p).raw();
            }
            case "get_operation":
                return c.getOperation(s(a, "name")).raw();
            case "list_operations":
                return list("operations", c.listOperations(), Operation::raw);
            case "issue":
                return c.issue(s(a, "operation"), s(a, "subject"), i(a, "ttl_seconds")).raw();
            case "issue_many":
                return list("tokens", c.issueMany(s(a, "operation"), s(a, "subject"), i(a, "count"),
                        i(a, "ttl_seconds")), IssuedToken::raw);
            case "introspect":
                return c.introspect(s(a, "token")).raw();
            case "revoke":
                c.revoke(s(a, "token"));
                return F.nullNode();
            case "claim_token":
                return claimed(c.claimToken(s(a, "token"), claimOptions(a)));
            case "complete_token":
                return c.completeToken(s(a, "token"), attempt(a), outcome(a)).raw();
            case "release_token":
                return c.releaseToken(s(a, "token"), attempt(a)).raw();
            case "extend_token":
                return c.extendToken(s(a, "token"), attempt(a), i(a, "lease_seconds")).raw();
            case "checkpoint_token":
                return c.checkpointToken(s(a, "token"), attempt(a), s(a, "phase"), a.get("data")).raw();
            case "claim_key":
                return claimed(c.claimKey(s(a, "operation"), s(a, "key"), claimOptions(a)));
            case "complete_key":
                return c.completeKey(s(a, "operation"), s(a, "key"), attempt(a), outcome(a)).raw();
            case "release_key":
                return c.releaseKey(s(a, "operation"), s(a, "key"), attempt(a)).raw();
            case "extend_key":
                return c.extendKey(s(a, "operation"), s(a, "key"), attempt(a), i(a, "lease_seconds")).raw();
            case "checkpoint_key":
                return c.checkpointKey(s(a, "operation"), s(a, "key"), attempt(a), s(a, "phase"), a.get("data"))
                        .raw();
            case "get_key":
                return c.getKey(s(a, "operation"), s(a, "key")).raw();
            case "claim_batch": {
                List<BatchClaimItem> items = new ArrayList<>();
                a.path("items").forEach(it -> items.add(BatchClaimItem.of(s(it, "key"), claimOptions(it))));
                return list("items", c.claimBatch(s(a, "operation"), items), BatchClaimResult::raw);
            }
            case "complete_batch": {
                List<BatchCompleteItem> items = new ArrayList<>();
                a.path("items").forEach(it -> items.add(BatchCompleteItem.of(s(it, "key"), attempt(it), outcome(it))));
                return list("items", c.completeBatch(s(a, "operation"), items), BatchCompleteResult::raw);
            }
            case "get_version":
                return c.getVersion(s(a, "key")).raw();
            case "bump_version": {
                JsonNode im = a.get("if_match");
                ObjectNode o = F.objectNode();
                o.put("version", im.isNumber() ? c.bumpVersion(s(a, "key"), im.asLong())
                        : c.bumpVersion(s(a, "key"), im.asText()));
                return o;
            }
            case "get_record":
                return c.getRecord(s(a, "id")).raw();
            case "record_events":
                return list("events", c.recordEvents(s(a, "id")), RecordEvent::raw);
            case "list_records": {
                RecordQuery q = RecordQuery.ALL;
                if (s(a, "operation") != null) {
                    q = q.withOperation(s(a, "operation"));
                }
                if (s(a, "state") != null) {
                    q = q.withState(s(a, "state"));
                }
                if (s(a, "subject") != null) {
                    q = q.withSubject(s(a, "subject"));
                }
                if (a.has("older_than")) {
                    q = q.withOlderThan(a.get("older_than").asLong());
                }
                if (i(a, "limit") != null) {
                    q = q.withLimit(i(a, "limit"));
                }
                if (s(a, "cursor") != null) {
                    q = q.withCursor(s(a, "cursor"));
                }
                return c.listRecords(q).raw();
            }
            case "run_once":
                return runOnce(c, a, d);
            case "consume":
                return consume(c, a);
            case "sleep":
                Thread.sleep(a.path("ms").asLong());
                return F.nullNode();
            default:
                throw new AssertionError("unknown op " + op);
        }
    }

    static JsonNode runOnce(IdemdClient c, JsonNode a, Done d) {
        ClaimTarget target = s(a, "token") != null ? ClaimTarget.token(s(a, "token"))
                : ClaimTarget.key(s(a, "operation"), s(a, "key"));
        JsonNode h = a.path("handler");
        boolean[] ran = {false};
        ClaimResult r = c.claim(target, claimOptions(a), e -> e instanceof RetryableFailure, claim -> {
            ran[0] = true;
            String failure = s(h, "fail");
            if ("release".equals(failure)) {
                d.handlerError = new RetryableFailure("retryable failure");
                throw (RetryableFailure) d.handlerError;
            }
            if ("final".equals(failure)) {
                d.handlerError = new FinalFailure("final failure");
                throw (FinalFailure) d.handlerError;
            }
            return outcome(h);
        });
        ObjectNode o = F.objectNode();
        o.put("ran", ran[0]);
        o.put("replayed", r.replayed());
        ObjectNode resp = r.response().raw().deepCopy();
        if (!resp.has("headers")) {
            resp.putObject("headers");
        }
        o.set("response", resp);
        return o;
    }

    static JsonNode consume(IdemdClient c, JsonNode a) {
        List<JsonNode> messages = new ArrayList<>();
        a.path("messages").forEach(messages::add);
        JsonNode handler = a.path("handler");
        Map<String, String> fail = new HashMap<>();
        handler.path("fail").fields().forEachRemaining(e -> fail.put(e.getKey(), e.getValue().asText()));
        handler.path("release").forEach(k -> fail.put(k.asText(), "release"));
        handler.path("final").forEach(k -> fail.put(k.asText(), "final"));
        List<String> handled = Collections.synchronizedList(new ArrayList<>());
        ConsumeOptions<JsonNode> opts = ConsumeOptions.<JsonNode>defaults()
                .withReleaseOn(e -> e instanceof RetryableFailure);
        if (messages.stream().anyMatch(m -> m.has("request"))) {
            opts = opts.withRequest(m -> m.get("request"));
        }
        List<MessageOutcome<JsonNode>> outcomes = c.consume(s(a, "operation"), messages, m -> m.get("key").asText(),
                (m, claim) -> {
                    String key = m.get("key").asText();
                    handled.add(key);
                    String f = fail.get(key);
                    if ("release".equals(f)) {
                        throw new RetryableFailure("retryable failure of " + key);
                    }
                    if ("final".equals(f)) {
                        throw new FinalFailure("final failure of " + key);
                    }
                    return Outcome.of(200, Map.of("handled", key));
                }, opts);
        ObjectNode o = F.objectNode();
        ArrayNode h = o.putArray("handled");
        List<String> sorted = new ArrayList<>(handled);
        sorted.sort((x, y) -> {
            byte[] bx = x.getBytes(StandardCharsets.UTF_8);
            byte[] by = y.getBytes(StandardCharsets.UTF_8);
            return java.util.Arrays.compareUnsigned(bx, by);
        });
        sorted.forEach(h::add);
        ArrayNode out = o.putArray("outcomes");
        for (MessageOutcome<JsonNode> m : outcomes) {
            ObjectNode x = out.addObject();
            x.put("key", m.key());
            x.put("outcome", m.kind().name().toLowerCase());
            x.put("retry", m.retry());
            if (m.status() != null) {
                x.put("status", m.status());
            } else {
                x.putNull("status");
            }
            if (m.code() != null) {
                x.put("code", m.code());
            } else {
                x.putNull("code");
            }
            if (m.response() != null) {
                x.set("response", m.response().raw());
            }
        }
        return o;
    }

    // ------------------------------------------------------------------ patterns

    static JsonNode path(JsonNode root, String path) {
        JsonNode n = root;
        for (String part : path.split("\\.")) {
            if (n == null) {
                break;
            }
            if (n.isArray() && part.matches("\\d+")) {
                n = n.get(Integer.parseInt(part));
            } else {
                n = n.get(part);
            }
        }
        if (n == null || n.isMissingNode()) {
            fail("no " + path + " in " + root);
        }
        return n;
    }

    static void match(JsonNode pattern, JsonNode value, String where) {
        String why = mismatch(pattern, value == null ? F.nullNode() : value, where);
        if (why != null) {
            fail(why + "\n  pattern: " + pattern + "\n  value:   " + value);
        }
    }

    static String mismatch(JsonNode p, JsonNode v, String where) {
        if (p.isObject() && p.size() == 1 && p.fieldNames().next().startsWith("$")) {
            String op = p.fieldNames().next();
            JsonNode arg = p.get(op);
            switch (op) {
                case "$type": {
                    String t = arg.asText();
                    boolean ok = t.equals("string") ? v.isTextual() : t.equals("number") ? v.isNumber()
                            : t.equals("integer") ? v.isIntegralNumber() || (v.isNumber() && v.asDouble() == Math.rint(v.asDouble()))
                            : t.equals("boolean") ? v.isBoolean() : t.equals("object") ? v.isObject()
                            : t.equals("array") ? v.isArray() : t.equals("null") && v.isNull();
                    return ok ? null : where + ": not of type " + t;
                }
                case "$regex":
                    return v.isTextual() && Pattern.compile(arg.asText()).matcher(v.asText()).find() ? null
                            : where + ": does not match " + arg.asText();
                case "$gte":
                    return v.isNumber() && v.asDouble() >= arg.asDouble() ? null : where + ": not >= " + arg;
                case "$lte":
                    return v.isNumber() && v.asDouble() <= arg.asDouble() ? null : where + ": not <= " + arg;
                case "$len": {
                    int len = v.isArray() ? v.size() : v.isTextual() ? v.asText().getBytes(StandardCharsets.UTF_8).length : -1;
                    return len == arg.asInt() ? null : where + ": length " + len + " is not " + arg;
                }
                case "$eq":
                    return deepEq(arg, v) ? null : where + ": not equal to " + arg;
                case "$not_eq":
                    return !deepEq(arg, v) ? null : where + ": equal to " + arg;
                case "$absent":
                    return v.isNull() || v.isMissingNode() ? null : where + ": present";
                default:
                    return where + ": unknown operator " + op;
            }
        }
        if (p.isObject()) {
            if (!v.isObject()) {
                return where + ": not an object";
            }
            for (Iterator<Map.Entry<String, JsonNode>> it = p.fields(); it.hasNext();) {
                Map.Entry<String, JsonNode> e = it.next();
                JsonNode pv = e.getValue();
                JsonNode vv = v.get(e.getKey());
                if (pv.isObject() && pv.size() == 1 && pv.has("$absent")) {
                    if (vv != null && !vv.isNull()) {
                        return where + "." + e.getKey() + ": present";
                    }
                    continue;
                }
                if (vv == null) {
                    return where + "." + e.getKey() + ": missing";
                }
                String w = mismatch(pv, vv, where + "." + e.getKey());
                if (w != null) {
                    return w;
                }
            }
            return null;
        }
        if (p.isArray()) {
            if (!v.isArray() || v.size() != p.size()) {
                return where + ": not an array of " + p.size();
            }
            for (int i = 0; i < p.size(); i++) {
                String w = mismatch(p.get(i), v.get(i), where + "[" + i + "]");
                if (w != null) {
                    return w;
                }
            }
            return null;
        }
        if (p.isNumber()) {
            return v.isNumber() && v.decimalValue().compareTo(p.decimalValue()) == 0 ? null
                    : where + ": " + v + " is not " + p;
        }
        return p.equals(v) ? null : where + ": " + v + " is not " + p;
    }

    static boolean deepEq(JsonNode a, JsonNode b) {
        if (a.isNumber() && b.isNumber()) {
            return a.decimalValue().compareTo(b.decimalValue()) == 0;
        }
        if (a.isObject() && b.isObject()) {
            if (a.size() != b.size()) {
                return false;
            }
            for (Iterator<Map.Entry<String, JsonNode>> it = a.fields(); it.hasNext();) {
                Map.Entry<String, JsonNode> e = it.next();
                if (!b.has(e.getKey()) || !deepEq(e.getValue(), b.get(e.getKey()))) {
                    return false;
                }
            }
            return true;
        }
        if (a.isArray() && b.isArray()) {
            if (a.size() != b.size()) {
                return false;
            }
            for (int i = 0; i < a.size(); i++) {
                if (!deepEq(a.get(i), b.get(i))) {
                    return false;
                }
            }
            return true;
        }
        return a.equals(b);
    }

}
