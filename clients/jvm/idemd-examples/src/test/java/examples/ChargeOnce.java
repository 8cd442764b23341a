package examples;

import dev.idemd.client.ClaimOptions;
import dev.idemd.client.ClaimTarget;
import dev.idemd.client.IdemdClient;
import dev.idemd.client.Outcome;
import dev.idemd.client.StoredResponse;
import java.util.Map;

public final class ChargeOnce {
    /** Whatever really moves the money. */
    public interface PaymentProvider {
        String charge(String paymentId, long amountCents) throws Exception;
    }

    private final IdemdClient idemd;
    private final PaymentProvider provider;

    public ChargeOnce(IdemdClient idemd, PaymentProvider provider) {
        this.idemd = idemd;
        this.provider = provider;
    }

    // Charges at most once per payment id, however often it is called: the
    // first call runs the work and stores its outcome, later calls get the
    // stored outcome back. An exception releases the claim (a retry runs
    // the work again) and is rethrown.
    public StoredResponse charge(String paymentId, long amountCents) {
        return idemd.runOnce(
                ClaimTarget.key("payment.capture", "payment:" + paymentId),
                ClaimOptions.request(Map.of("amount", amountCents)),
                claim -> {
                    String charge = provider.charge(paymentId, amountCents);
                    return Outcome.of(201, Map.of("charge_id", charge));
                });
    }
}
