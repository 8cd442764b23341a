package dev.idemd.spring;

import dev.idemd.client.Health;
import dev.idemd.client.IdemdClient;
import dev.idemd.client.IdemdException;
import org.springframework.boot.actuate.health.AbstractHealthIndicator;

/** {@code /actuator/health/idemd}: UP when idemd's /readyz says ready. */
public class IdemdHealthIndicator extends AbstractHealthIndicator {
    private final IdemdClient client;

    public IdemdHealthIndicator(IdemdClient client) {
        super("idemd health check failed");
        this.client = client;
    }

    @Override
    protected void doHealthCheck(org.springframework.boot.actuate.health.Health.Builder builder) {
        try {
            Health h = client.ready();
            builder.withDetail("url", client.getBaseUri().toString()).withDetail("status", String.valueOf(h.status()));
            if (h.isUp()) {
                builder.up();
            } else {
                builder.down().withDetail("reason", String.valueOf(h.reason()));
            }
        } catch (IdemdException e) {
            builder.down(e);
        }
    }
}
