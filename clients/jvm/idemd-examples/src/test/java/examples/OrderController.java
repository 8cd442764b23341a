package examples;

import dev.idemd.spring.Idempotent;
import java.net.URI;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.PathVariable;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

@RestController
public class OrderController {
    static final AtomicInteger ORDERS = new AtomicInteger();

    // A retried POST with the same Idempotency-Key gets the first answer
    // again (Idempotent-Replayed: true); the order is created once. The
    // quick start's order.create guards the counter orders:{subject}: the
    // subject is the user of the path (with Spring Security, "principal").
    @PostMapping("/users/{user}/orders")
    @Idempotent(operation = "order.create", subject = "path:user")
    public ResponseEntity<Map<String, Object>> create(@PathVariable("user") String user,
            @RequestBody Map<String, Object> cart) {
        String id = "o-" + ORDERS.incrementAndGet();
        return ResponseEntity.created(URI.create("/users/" + user + "/orders/" + id))
                .body(Map.of("order_id", id, "amount", cart.get("amount")));
    }
}
