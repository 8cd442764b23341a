package examples;

import dev.idemd.spring.Idempotent;
import dev.idemd.spring.KeySource;
import java.net.URI;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.springframework.http.ResponseEntity;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RequestBody;
import org.springframework.web.bind.annotation.RestController;

@RestController
public class OrderController {
    static final AtomicInteger ORDERS = new AtomicInteger();

    // A retried POST with the same Idempotency-Key gets the first answer
    // again (Idempotent-Replayed: true); the order is created once.
    @PostMapping("/orders")
    @Idempotent(operation = "order.create", key = KeySource.HEADER)
    public ResponseEntity<Map<String, Object>> create(@RequestBody Map<String, Object> cart) {
        String id = "o-" + ORDERS.incrementAndGet();
        return ResponseEntity.created(URI.create("/orders/" + id))
                .body(Map.of("order_id", id, "amount", cart.get("amount")));
    }
}
