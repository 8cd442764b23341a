package dev.idemd.startcheck;

import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.idemd.client.IdemdClient;
import dev.idemd.client.OperationPolicy;
import dev.idemd.spring.Idempotent;
import java.util.Map;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfEnvironmentVariable;
import org.springframework.boot.autoconfigure.EnableAutoConfiguration;
import org.springframework.boot.builder.SpringApplicationBuilder;
import org.springframework.context.ConfigurableApplicationContext;
import org.springframework.context.annotation.Configuration;
import org.springframework.context.annotation.Import;
import org.springframework.web.bind.annotation.PostMapping;
import org.springframework.web.bind.annotation.RestController;

/**
 * An {@code @Idempotent} method that could never fill its operation's
 * subject stops the application at start (outside dev.idemd.spring so that
 * the shop of IdempotentTest does not scan these controllers).
 */
@EnabledIfEnvironmentVariable(named = "IDEMD_URL", matches = ".+")
class StartCheckTest {
    static final String GUARDED = "spring.startcheck";

    @RestController
    static class NoSubject {
        @PostMapping("/orders")
        @Idempotent(operation = GUARDED)
        public String create() {
            return "{}";
        }
    }

    @RestController
    static class NoSuchPathVariable {
        @PostMapping("/orders")
        @Idempotent(operation = GUARDED, subject = "path:user")
        public String create() {
            return "{}";
        }
    }

    @RestController
    static class WithSubject {
        @PostMapping("/users/{user}/orders")
        @Idempotent(operation = GUARDED, subject = "path:user")
        public String create() {
            return "{}";
        }
    }

    @Configuration(proxyBeanMethods = false)
    @EnableAutoConfiguration
    static class App {
    }

    static ConfigurableApplicationContext start(Class<?> controller) {
        return new SpringApplicationBuilder(App.class, controller).properties(Map.of(
                "server.port", "0", "idemd.url", System.getenv("IDEMD_URL"),
                "idemd.api-key", System.getenv("IDEMD_API_KEY"), "spring.main.banner-mode", "off"))
                .run();
    }

    static void guarded() {
        IdemdClient c = IdemdClient.builder(System.getenv("IDEMD_URL")).apiKey(System.getenv("IDEMD_API_KEY")).build();
        c.putOperation(GUARDED, OperationPolicy.of(3600, 86400, 30).withVersionKey("orders:{subject}"));
    }

    @Test
    void guardedOperationWithoutSubjectIsRefusedAtStart() {
        guarded();
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> start(NoSubject.class).close());
        assertTrue(e.getMessage().contains("operation " + GUARDED + " guards the version counter orders:{subject}"),
                e.getMessage());
        assertTrue(e.getMessage().contains("set @Idempotent(subject = ...)"), e.getMessage());
        assertTrue(e.getMessage().contains("NoSubject"), e.getMessage());
    }

    @Test
    void aSubjectNamingNoPathVariableIsRefusedAtStart() {
        guarded();
        IllegalStateException e = assertThrows(IllegalStateException.class,
                () -> start(NoSuchPathVariable.class).close());
        assertTrue(e.getMessage().contains("names no variable of the path"), e.getMessage());
    }

    @Test
    void aGuardedOperationWithASubjectStarts() {
        guarded();
        start(WithSubject.class).close();
    }
}
