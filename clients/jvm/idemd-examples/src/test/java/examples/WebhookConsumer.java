package examples;

import dev.idemd.client.IdemdClient;
import dev.idemd.client.MessageOutcome;
import java.util.ArrayList;
import java.util.List;

public final class WebhookConsumer {
    public record Event(String id, String payload) {
    }

    // One polled batch: one claim call, the handler for new events only, one
    // completion call. Returns the events to redeliver; ack the others.
    public static List<Event> handleBatch(IdemdClient idemd, List<Event> batch, List<String> processed) {
        List<MessageOutcome<Event>> done = idemd.consume("payment.webhook", batch, Event::id,
                (event, claim) -> {
                    processed.add(event.id());
                    return "handled " + event.payload();
                });
        List<Event> redeliver = new ArrayList<>();
        for (MessageOutcome<Event> o : done) {
            if (o.retry()) {
                redeliver.add(o.message());
            }
        }
        return redeliver;
    }
}
