package dev.idemd.spring;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.idemd.client.CallerScope;
import dev.idemd.client.ClaimOptions;
import dev.idemd.client.ClaimTarget;
import dev.idemd.client.Claimed;
import dev.idemd.client.IdemdClient;
import dev.idemd.client.IdemdException;
import dev.idemd.client.IdemdProblemException;
import dev.idemd.client.Outcome;
import dev.idemd.client.StoredResponse;
import dev.idemd.client.internal.Json;
import dev.idemd.client.internal.Problems;
import jakarta.servlet.FilterChain;
import jakarta.servlet.ReadListener;
import jakarta.servlet.ServletException;
import jakarta.servlet.ServletInputStream;
import jakarta.servlet.http.HttpServletRequest;
import jakarta.servlet.http.HttpServletRequestWrapper;
import jakarta.servlet.http.HttpServletResponse;
import java.io.BufferedReader;
import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.commons.logging.Log;
import org.apache.commons.logging.LogFactory;
import org.springframework.context.ApplicationContext;
import org.springframework.web.filter.OncePerRequestFilter;
import org.springframework.web.method.HandlerMethod;
import org.springframework.web.servlet.HandlerExecutionChain;
import org.springframework.web.servlet.mvc.method.annotation.RequestMappingHandlerMapping;
import org.springframework.web.util.ContentCachingResponseWrapper;

/**
 * Runs {@link Idempotent} handler methods through idemd: claims the key,
 * replays a stored response to duplicates, and stores the method's response.
 * Requests to other handlers pass untouched (nothing is buffered for them).
 */
public class IdempotencyFilter extends OncePerRequestFilter {
    private static final Log LOG = LogFactory.getLog(IdempotencyFilter.class);
    private static final String FORM = "application/x-www-form-urlencoded";

    private final IdemdClient client;
    private final IdemdProperties properties;
    private final ApplicationContext context;
    private volatile RequestMappingHandlerMapping mapping;

    public IdempotencyFilter(IdemdClient client, IdemdProperties properties, ApplicationContext context) {
        this.client = client;
        this.properties = properties;
        this.context = context;
    }

    private Idempotent annotationOf(HttpServletRequest request) {
        RequestMappingHandlerMapping m = mapping;
        if (m == null) {
            m = context.getBean("requestMappingHandlerMapping", RequestMappingHandlerMapping.class);
            mapping = m;
        }
        try {
            HandlerExecutionChain chain = m.getHandler(request);
            if (chain != null && chain.getHandler() instanceof HandlerMethod) {
                return ((HandlerMethod) chain.getHandler()).getMethodAnnotation(Idempotent.class);
            }
        } catch (Exception e) {
            return null; // no handler (or not ours to decide): the dispatcher answers
        }
        return null;
    }

    @Override
    protected void doFilterInternal(HttpServletRequest request, HttpServletResponse response, FilterChain chain)
            throws ServletException, IOException {
        Idempotent ann = annotationOf(request);
        if (ann == null) {
            chain.doFilter(request, response);
            return;
        }
        boolean form = request.getContentType() != null && request.getContentType().toLowerCase().startsWith(FORM);
        HttpServletRequest req = request;
        String key;
        if (ann.key() == KeySource.TOKEN) {
            key = form ? request.getParameter(properties.getTokenParameter()) : null;
            if (key == null) {
                key = request.getParameter(properties.getTokenParameter());
            }
            if (key == null || key.isEmpty()) {
                key = request.getHeader(ann.header());
            }
        } else {
            key = request.getHeader(ann.header());
            if (key != null && key.length() >= 2 && key.startsWith("\"") && key.endsWith("\"")) {
                key = key.substring(1, key.length() - 1); // an sf-string
            }
        }
        ClaimOptions subjectOption = ClaimOptions.NONE;
        if (ann.key() == KeySource.HEADER && key != null && !key.isEmpty()) {
            try {
                key = CallerScope.scopedKey(key, name -> headerValue(request, name), scopeHeaders(ann));
            } catch (IdemdProblemException e) {
                problem(response, e.getStatus(), e.getCode(), e.getDetail(), null);
                return;
            }
            SubjectSource source = SubjectSource.parse(ann.subject());
            if (source != null) {
                String subject = source.resolve(request, context);
                if (subject == null) {
                    problem(response, 400, "invalid_request", source.missing(), null);
                    return;
                }
                subjectOption = ClaimOptions.NONE.withSubject(subject);
            }
        }
        // what idemd fingerprints (its canonical JSON): the same JSON meaning
        // is the same request, as for every client and the gateway
        ObjectNode identity = Json.MAPPER.createObjectNode();
        identity.put("method", request.getMethod());
        identity.put("path", request.getRequestURI());
        identity.put("query", request.getQueryString() == null ? "" : request.getQueryString());
        if (form) {
            TreeMap<String, String[]> params = new TreeMap<>(request.getParameterMap());
            params.remove(properties.getTokenParameter());
            ObjectNode fields = identity.putObject("form");
            params.forEach((k, v) -> fields.put(k, String.join(",", v)));
        } else {
            byte[] body = request.getInputStream().readAllBytes();
            req = new CachedBodyRequest(request, body);
            putBody(identity, body);
        }
        if (key == null || key.isEmpty()) {
            problem(response, 400, "idempotency_key_missing", ann.key() == KeySource.TOKEN
                    ? "the form carries no idemd token (field " + properties.getTokenParameter() + ")"
                    : "the request has no " + ann.header() + " header", null);
            return;
        }
        int wait = ann.waitSeconds() >= 0 ? ann.waitSeconds() : properties.getWaitSeconds();
        ClaimOptions options = subjectOption.withRequest(identity).withWaitSeconds(Math.min(60, wait));
        ClaimTarget target = ann.key() == KeySource.TOKEN ? ClaimTarget.token(key)
                : ClaimTarget.key(ann.operation(), key);
        Claimed claimed;
        try {
            claimed = target.isToken() ? client.claimToken(key, options)
                    : client.claimKey(ann.operation(), key, options);
        } catch (IdemdProblemException e) {
            problem(response, e.getStatus(), e.getCode(), e.getDetail(), e);
            return;
        } catch (IdemdException e) {
            LOG.warn("idemd unreachable: " + e.getMessage());
            response.setHeader("Retry-After", "1");
            problem(response, 503, "unavailable", "the idempotency service is unavailable", null);
            return;
        }
        if (claimed.replayed()) {
            replay(response, claimed.response());
            return;
        }
        int attempt = claimed.attempt();
        ContentCachingResponseWrapper wrapped = new ContentCachingResponseWrapper(response);
        try {
            chain.doFilter(req, wrapped);
        } catch (IOException | ServletException | RuntimeException | Error e) {
            releaseQuietly(target, attempt);
            throw e;
        }
        int status = wrapped.getStatus();
        if (status >= 500) {
            releaseQuietly(target, attempt);
        } else {
            Map<String, String> headers = new LinkedHashMap<>();
            List<String> names = new ArrayList<>(List.of("Content-Type", "Location"));
            names.addAll(properties.getStoreHeaders());
            for (String name : names) {
                String v = name.equalsIgnoreCase("Content-Type") ? wrapped.getContentType() : wrapped.getHeader(name);
                if (v != null) {
                    headers.put(name, v);
                }
            }
            Outcome outcome = Outcome.bytes(status, wrapped.getContentAsByteArray(), headers);
            try {
                if (target.isToken()) {
                    client.completeToken(key, attempt, outcome);
                } else {
                    client.completeKey(ann.operation(), key, attempt, outcome);
                }
            } catch (IdemdException e) {
                LOG.warn("idemd did not store the outcome of " + ann.operation() + ": " + e.getMessage());
            }
            if (!wrapped.isCommitted()) {
                wrapped.setHeader("Idempotent-Replayed", "false");
            }
        }
        wrapped.copyBodyToResponse();
    }

    private List<String> scopeHeaders(Idempotent ann) {
        String[] names = ann.scopeHeaders();
        if (names.length == 0) {
            return properties.getScopeHeaders() == null ? List.of() : properties.getScopeHeaders();
        }
        if (names.length == 1 && names[0].equals("-")) {
            return List.of();
        }
        return List.of(names);
    }

    /** A header's values joined with ", " (as every middleware reads them), or null. */
    private static String headerValue(HttpServletRequest request, String name) {
        List<String> values = Collections.list(request.getHeaders(name));
        return values.isEmpty() ? null : String.join(", ", values);
    }

    private void releaseQuietly(ClaimTarget target, int attempt) {
        try {
            if (target.isToken()) {
                client.releaseToken(target.token(), attempt);
            } else {
                client.releaseKey(target.operation(), target.key(), attempt);
            }
        } catch (IdemdException e) {
            LOG.warn("idemd did not release a claim (its lease will run out): " + e.getMessage());
        }
    }

    private static void replay(HttpServletResponse response, StoredResponse stored) throws IOException {
        response.setStatus(stored.status());
        stored.headers().forEach(response::setHeader);
        response.setHeader("Idempotent-Replayed", "true");
        byte[] body = stored.bodyBytes();
        if (!stored.isBinary() && stored.body() != null && !stored.body().isNull()
                && response.getContentType() == null) {
            response.setContentType("application/json");
        }
        response.setContentLength(body.length);
        response.getOutputStream().write(body);
    }

    private static void problem(HttpServletResponse response, int status, String code, String detail,
            IdemdProblemException from) throws IOException {
        response.setStatus(status);
        if (from != null) {
            for (String h : new String[] {"Retry-After", "ETag"}) {
                if (from.header(h) != null) {
                    response.setHeader(h, from.header(h));
                }
            }
        }
        byte[] out;
        if (from != null && from.getProblem() != null && from.getProblem().isObject()) {
            out = Json.write(from.getProblem()).getBytes(StandardCharsets.UTF_8); // idemd's own, unchanged
        } else {
            ObjectNode p = Json.MAPPER.createObjectNode();
            p.put("type", "https://idemd.dev/problems/" + code);
            p.put("title", Problems.title(status));
            p.put("status", status);
            p.put("detail", detail);
            p.put("code", code);
            out = Json.write(p).getBytes(StandardCharsets.UTF_8);
        }
        response.setContentType("application/problem+json");
        response.setContentLength(out.length);
        response.getOutputStream().write(out);
    }

    /**
     * The body of a request's identity, as Go's RequestIdentity and the
     * Express middleware put it: {@code json} when it is JSON, else
     * {@code body} (its text when it is UTF-8, null when empty) or
     * {@code body_sha256} (bytes that are not UTF-8).
     */
    static void putBody(ObjectNode identity, byte[] body) {
        JsonNode doc = null;
        if (body.length > 0) {
            try {
                doc = Json.MAPPER.reader().with(DeserializationFeature.FAIL_ON_TRAILING_TOKENS).readTree(body);
            } catch (IOException notJson) {
                doc = null;
            }
        }
        if (doc != null && !doc.isMissingNode()) {
            identity.set("json", doc);
        } else if (body.length == 0) {
            identity.putNull("body");
        } else {
            try {
                identity.put("body", StandardCharsets.UTF_8.newDecoder()
                        .onMalformedInput(CodingErrorAction.REPORT).onUnmappableCharacter(CodingErrorAction.REPORT)
                        .decode(ByteBuffer.wrap(body)).toString());
            } catch (CharacterCodingException notText) {
                identity.put("body_sha256", sha256(new String(body, StandardCharsets.ISO_8859_1)));
            }
        }
    }

    static String sha256(String s) {
        try {
            byte[] d = MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.ISO_8859_1));
            StringBuilder sb = new StringBuilder();
            for (byte b : d) {
                sb.append(String.format("%02x", b & 0xff));
            }
            return sb.toString();
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    /** A request whose body was read once and is served again from memory. */
    static final class CachedBodyRequest extends HttpServletRequestWrapper {
        private final byte[] body;

        CachedBodyRequest(HttpServletRequest request, byte[] body) {
            super(request);
            this.body = body;
        }

        @Override
        public ServletInputStream getInputStream() {
            ByteArrayInputStream in = new ByteArrayInputStream(body);
            return new ServletInputStream() {
                @Override
                public int read() {
                    return in.read();
                }

                @Override
                public int read(byte[] b, int off, int len) {
                    return in.read(b, off, len);
                }

                @Override
                public boolean isFinished() {
                    return in.available() == 0;
                }

                @Override
                public boolean isReady() {
                    return true;
                }

                @Override
                public void setReadListener(ReadListener listener) {
                    throw new UnsupportedOperationException();
                }
            };
        }

        @Override
        public BufferedReader getReader() {
            String enc = getCharacterEncoding();
            return new BufferedReader(new InputStreamReader(getInputStream(),
                    enc != null ? java.nio.charset.Charset.forName(enc) : StandardCharsets.UTF_8));
        }
    }
}
