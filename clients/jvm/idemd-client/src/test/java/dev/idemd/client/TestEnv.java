package dev.idemd.client;

import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.UUID;
import org.junit.jupiter.api.Assumptions;

/** The idemd the tests run against (clients/jvm/run-tests.sh exports these). */
final class TestEnv {
    private TestEnv() {
    }

    static String get(String name) {
        String v = System.getenv(name);
        Assumptions.assumeTrue(v != null && !v.isEmpty(), name + " is not set: no idemd to test against");
        return v;
    }

    static IdemdClient client() {
        return IdemdClient.builder(get("IDEMD_URL")).apiKey(get("IDEMD_API_KEY")).build();
    }

    static IdemdClient client(RetryPolicy retry) {
        return IdemdClient.builder(get("IDEMD_URL")).apiKey(get("IDEMD_API_KEY")).retry(retry).build();
    }

    /** A fresh operation for one test: 1 h TTL and retention, LEASE seconds of lease. */
    static String operation(IdemdClient c, int lease) {
        String name = "jvm." + UUID.randomUUID().toString().substring(0, 12);
        c.putOperation(name, OperationPolicy.of(3600, 3600, lease));
        return name;
    }

    static String unique(String prefix) {
        return prefix + "-" + UUID.randomUUID();
    }

    /** The repository's root (IDEMD_SOURCE_DIR, else found upwards from here). */
    static Path sourceDir() {
        String v = System.getenv("IDEMD_SOURCE_DIR");
        if (v != null && !v.isEmpty()) {
            return Paths.get(v);
        }
        Path p = Paths.get("").toAbsolutePath();
        while (p != null && !Files.exists(p.resolve("api/openapi.yaml"))) {
            p = p.getParent();
        }
        Assumptions.assumeTrue(p != null, "repository root not found");
        return p;
    }
}
