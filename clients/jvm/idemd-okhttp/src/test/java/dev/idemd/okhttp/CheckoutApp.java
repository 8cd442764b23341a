package dev.idemd.okhttp;

import java.nio.charset.StandardCharsets;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.List;
import okhttp3.MediaType;
import okhttp3.OkHttpClient;
import okhttp3.Request;
import okhttp3.RequestBody;
import okhttp3.Response;

/**
 * The "app" of the mobile checkout test, run as its own JVM process so that
 * the test can kill it. {@code submit URL STORE TOKEN} places the order;
 * {@code resume STORE} is what the app does when it starts: it sends the
 * pending submits again and shows their outcome. Prints one line per answer:
 * {@code ORDER <status> replayed=<bool> <body>}.
 */
public final class CheckoutApp {
    private CheckoutApp() {
    }

    public static void main(String[] args) throws Exception {
        IdemdSubmitInterceptor interceptor = IdemdSubmitInterceptor.builder(new FileSubmitStore(Paths.get(
                args[0].equals("submit") ? args[2] : args[1]))).maxAttempts(8).backoff(300, 2000).waitSeconds(10)
                .build();
        OkHttpClient http = new OkHttpClient.Builder().addInterceptor(interceptor)
                .readTimeout(Duration.ofMillis(1500)).connectTimeout(Duration.ofSeconds(2)).build();
        if (args[0].equals("submit")) {
            Request req = new Request.Builder().url(args[1]).header("Idempotency-Key", args[3])
                    .post(RequestBody.create("{\"cart\":\"c-1\",\"amount\":4200}",
                            MediaType.get("application/json")))
                    .build();
            System.out.println("SUBMIT");
            System.out.flush();
            try (Response r = http.newCall(req).execute()) {
                System.out.println("ORDER " + r.code() + " replayed=" + "true".equals(r.header("Idempotent-Replayed"))
                        + " " + r.body().string());
            }
        } else {
            List<ResumedSubmit> done = interceptor.resumePending(http);
            System.out.println("RESUMED " + done.size());
            for (ResumedSubmit s : done) {
                System.out.println("ORDER " + s.getStatus() + " replayed=" + s.isReplayed() + " "
                        + new String(s.getBody(), StandardCharsets.UTF_8));
            }
        }
        System.out.flush();
        http.dispatcher().executorService().shutdown();
        http.connectionPool().evictAll();
    }
}
