package dev.idemd.spring;

import java.net.URI;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.springframework.boot.autoconfigure.SpringBootApplication;
import org.springframework.context.annotation.Bean;
import org.springframework.http.HttpStatus;
import org.springframework.http.MediaType;
import org.springframework.http.ResponseEntity;
import org.springframework.ui.Model;
import org.springframework.web.bind.annotation.GetMapping;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RequestParam;
import org.springframework.web.bind.annotation.ResponseBody;
import org.springframework.web.bind.annotation.RestController;

/** A shop with one idempotent API route, one idempotent form and a route that fails. */
@SpringBootApplication
@RestController
public class TestShop {
    static final String OP = "spring.order";
    /** Guards orders:{subject}, as the quick start's order.create does. */
    static final String GUARDED = "spring.guarded";
    static final AtomicInteger apiRuns = new AtomicInteger();
    static final AtomicInteger formRuns = new AtomicInteger();
    static final AtomicInteger failRuns = new AtomicInteger();
    static volatile long slowMillis = 0;

    private final IdemdFormTokens tokens;

    public TestShop(IdemdFormTokens tokens) {
        this.tokens = tokens;
    }

    @PostMapping(path = "/api/orders", produces = MediaType.APPLICATION_JSON_VALUE)
    @Idempotent(operation = OP, key = KeySource.HEADER)
    public ResponseEntity<Map<String, Object>> create(@RequestBody Map<String, Object> cart) throws Exception {
        int n = apiRuns.incrementAndGet();
        Thread.sleep(slowMillis);
        return ResponseEntity.status(HttpStatus.CREATED).header("Location", "/api/orders/o-" + n)
                .body(Map.of("order_id", "o-" + n, "amount", cart.get("amount")));
    }

    @PostMapping("/api/flaky")
    @Idempotent(operation = OP, key = KeySource.HEADER)
    public Map<String, Object> flaky() {
        if (failRuns.incrementAndGet() == 1) {
            throw new IllegalStateException("the payment provider timed out");
        }
        return Map.of("charged", true);
    }

    @PostMapping("/api/users/{user}/orders")
    @Idempotent(operation = GUARDED, subject = "path:user")
    public Map<String, Object> userOrder(@PathVariable("user") String user) {
        return Map.of("order_id", "o-" + apiRuns.incrementAndGet(), "user", user);
    }

    @PostMapping("/api/me/orders")
    @Idempotent(operation = GUARDED, subject = "header:X-User-Id", scopeHeaders = "-")
    public Map<String, Object> myOrder() {
        return Map.of("order_id", "o-" + apiRuns.incrementAndGet());
    }

    @PostMapping("/api/team/orders")
    @Idempotent(operation = GUARDED, subject = "bean:teamSubject")
    public Map<String, Object> teamOrder() {
        return Map.of("order_id", "o-" + apiRuns.incrementAndGet());
    }

    /** The subject of /api/team/orders: the team and the user, from two headers. */
    @Bean
    SubjectResolver teamSubject() {
        return request -> request.getHeader("X-Team") == null ? null
                : request.getHeader("X-Team") + "." + request.getHeader("X-User-Id");
    }

    @GetMapping(path = "/checkout", produces = MediaType.TEXT_HTML_VALUE)
    @ResponseBody
    public String checkout(Model model) {
        String token = tokens.issue(model, OP, "user-42");
        return "<form method=post action=/checkout><input type=hidden name=idemd_token value=\"" + token
                + "\"><input name=sku value=A-1><button>Pay</button></form>";
    }

    @PostMapping("/checkout")
    @Idempotent(operation = OP, key = KeySource.TOKEN)
    public ResponseEntity<Void> submit(@RequestParam("sku") String sku) {
        int n = formRuns.incrementAndGet();
        return ResponseEntity.status(HttpStatus.SEE_OTHER).location(URI.create("/orders/f-" + n)).build();
    }
}
