package examples;

import dev.idemd.client.ClaimOptions;
import dev.idemd.client.Claimed;
import dev.idemd.client.IdemdClient;
import dev.idemd.client.IssuedToken;
import dev.idemd.client.Outcome;
import java.util.Map;

public final class FirstCalls {
    public static String placeOrder(String idemdUrl, String apiKey) {
        IdemdClient idemd = IdemdClient.builder(idemdUrl).apiKey(apiKey).build();
        IssuedToken t = idemd.issue("order.create", "user-42"); // rendered into the checkout
        Claimed c = idemd.claimToken(t.token(), ClaimOptions.request(Map.of("cart", "c-1")));
        if (c.replayed()) {
            return c.response().body().get("order_id").asText(); // done before
        }
        idemd.completeToken(t.token(), c.attempt(), Outcome.of(201, Map.of("order_id", "o-1")));
        return "o-1";
    }
}
