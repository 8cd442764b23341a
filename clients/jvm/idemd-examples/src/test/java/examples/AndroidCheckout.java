package examples;

import dev.idemd.okhttp.FileSubmitStore;
import dev.idemd.okhttp.IdemdSubmitInterceptor;
import dev.idemd.okhttp.ResumedSubmit;
import dev.idemd.okhttp.StaleFormException;
import java.io.IOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import okhttp3.MediaType;
import okhttp3.OkHttpClient;
import okhttp3.Request;
import okhttp3.RequestBody;
import okhttp3.Response;

public final class AndroidCheckout {
    private final IdemdSubmitInterceptor interceptor;
    private final OkHttpClient http;
    private final String shopUrl;

    // filesDir: on Android, context.getFilesDir().
    public AndroidCheckout(Path filesDir, String shopUrl) throws IOException {
        this.interceptor = IdemdSubmitInterceptor.builder(new FileSubmitStore(filesDir.resolve("idemd")))
                .maxAttempts(6)
                .build();
        this.http = new OkHttpClient.Builder()
                .addInterceptor(interceptor)
                .readTimeout(Duration.ofSeconds(10))
                .build();
        this.shopUrl = shopUrl;
    }

    // token: issued by the shop's backend when it rendered the checkout.
    public String placeOrder(String token, String cartJson) throws IOException {
        Request submit = new Request.Builder()
                .url(shopUrl + "/shop/orders")
                .header("Idempotency-Key", token)
                .post(RequestBody.create(cartJson, MediaType.get("application/json")))
                .build();
        try (Response r = http.newCall(submit).execute()) {
            return r.body().string(); // the order, placed once, or replayed
        } catch (StaleFormException e) {
            return "the cart changed: reload the checkout"; // nothing was placed
        }
    }

    // At app start (off the main thread): a submit cut off by process death
    // is sent again with its token and shows the order it placed.
    public List<ResumedSubmit> resume() throws IOException {
        return interceptor.resumePending(http);
    }
}
