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
        Claimed c = idemd.claimToken(t.getToken(), ClaimOptions.request(Map.of("cart", "c-1")));
        if (c.isReplayed()) {
            return c.getResponse().getBody().get("order_id").asText(); // done before
        }
        idemd.completeToken(t.getToken(), c.getAttempt(), Outcome.of(201, Map.of("order_id", "o-1")));
        return "o-1";
    }
}
