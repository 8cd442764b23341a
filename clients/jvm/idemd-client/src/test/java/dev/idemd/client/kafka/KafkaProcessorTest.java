package dev.idemd.client.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.idemd.client.BatchClaimResult;
import dev.idemd.client.ClaimOptions;
import dev.idemd.client.IdemdClient;
import dev.idemd.client.MessageOutcome;
import dev.idemd.client.OperationPolicy;
import dev.idemd.client.RetryPolicy;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.UUID;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetResetStrategy;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** KafkaProcessor against a real idemd, with Kafka's own MockConsumer (tests/kafka.sh runs a real broker). */
class KafkaProcessorTest {
    private static final String T = "ad-events";
    private static final TopicPartition P0 = new TopicPartition(T, 0);
    private static final TopicPartition P1 = new TopicPartition(T, 1);

    private IdemdClient client;
    private String op;
    private MockConsumer<String, String> consumer;
    private final List<Long> ran = new ArrayList<>();

    @BeforeEach
    void setUp() {
        String url = System.getenv("IDEMD_URL");
        String key = System.getenv("IDEMD_API_KEY");
        Assumptions.assumeTrue(url != null && !url.isEmpty() && key != null, "IDEMD_URL is not set");
        client = IdemdClient.builder(url).apiKey(key).retry(RetryPolicy.NONE).build();
        op = "jvm.kafka." + UUID.randomUUID().toString().substring(0, 12);
        client.putOperation(op, OperationPolicy.of(3600, 3600, 30));
        consumer = new MockConsumer<>(OffsetResetStrategy.EARLIEST);
        consumer.assign(List.of(P0, P1));
        consumer.updateBeginningOffsets(Map.of(P0, 0L, P1, 0L));
    }

    private KafkaProcessor<String, String> processor(java.util.function.Function<ConsumerRecord<String, String>,
            String> key) {
        return KafkaProcessor.<String, String>builder(client, op).key(key).retryDelay(Duration.ZERO).build();
    }

    private static ConsumerRecord<String, String> rec(int partition, long offset, String value, String... headers) {
        RecordHeaders h = new RecordHeaders();
        for (int i = 0; i + 1 < headers.length; i += 2) {
            h.add(headers[i], headers[i + 1].getBytes(StandardCharsets.UTF_8));
        }
        return new ConsumerRecord<>(T, partition, offset, 0L, TimestampType.CREATE_TIME, 0, 0, null, value, h,
                Optional.empty());
    }

    private static String event(String id) {
        return "{\"event_id\":\"" + id + "\",\"campaign_id\":\"c-1\",\"spend_amount\":120}";
    }

    private Object handle(ConsumerRecord<String, String> r, BatchClaimResult claim) {
        ran.add(r.offset());
        return Map.of("offset", r.offset());
    }

    private Map<TopicPartition, Long> committed() {
        Map<TopicPartition, Long> out = new HashMap<>();
        consumer.committed(java.util.Set.of(P0, P1)).forEach((tp, om) -> {
            if (om != null) {
                out.put(tp, om.offset());
            }
        });
        return out;
    }

    @Test
    void newRecordsRunOnceThenReplayAndOffsetsFollow() {
        String id = UUID.randomUUID().toString();
        var p = processor(RecordKeys.jsonField("event_id"));
        var recs = List.of(rec(0, 0, event(id + "-1")), rec(0, 1, event(id + "-2")), rec(1, 5, event(id + "-3")));
        var out = p.process(consumer, recs, this::handle);
        assertEquals(List.of(0L, 1L, 5L), ran);
        out.forEach(o -> assertEquals(MessageOutcome.Kind.PROCESSED, o.kind()));
        assertEquals(Map.of(P0, 2L, P1, 6L), committed());
        var again = processor(RecordKeys.jsonField("event_id")).process(consumer, recs, this::handle);
        again.forEach(o -> assertEquals(MessageOutcome.Kind.REPLAYED, o.kind()));
        assertEquals(List.of(0L, 1L, 5L), ran);
        assertEquals(1, again.get(1).response().body().get("offset").asInt());
    }

    @Test
    void producerDuplicatesKeyedByHeaderRunOnce() {
        String id = UUID.randomUUID().toString();
        var p = processor(RecordKeys.header("event-id"));
        p.process(consumer, List.of(rec(0, 0, "a", "event-id", id + "-1"), rec(0, 1, "b", "event-id", id + "-2"),
                rec(0, 2, "a", "event-id", id + "-1")), this::handle);
        p.process(consumer, List.of(rec(0, 3, "b", "event-id", id + "-2")), this::handle);
        assertEquals(List.of(0L, 1L), ran);
        assertEquals(4L, committed().get(P0));
        assertEquals(3, p.counts().processed());
        assertEquals(1, p.counts().replayed());
    }

    @Test
    void defaultKeyIsTopicPartitionOffset() {
        var p = KafkaProcessor.<String, String>builder(client, op).prefix("spend:").build();
        assertEquals("spend:ad-events/1/7", p.keyOf(rec(1, 7, "not json")));
    }

    @Test
    void inProgressIsSoughtBackAndNotCommitted() {
        String held = UUID.randomUUID().toString();
        client.claimKey(op, held, ClaimOptions.NONE);  // another consumer holds it
        var p = processor(RecordKeys.jsonField("event_id"));
        var out = p.process(consumer, List.of(rec(0, 10, event("a-" + held)), rec(0, 11, event(held)),
                rec(0, 12, event("b-" + held)), rec(1, 3, event("c-" + held))), this::handle);
        assertEquals(MessageOutcome.Kind.IN_PROGRESS, out.get(1).kind());
        assertEquals(Map.of(P0, 11L, P1, 4L), committed());
        assertEquals(11L, consumer.position(P0));
        assertEquals(1, p.counts().retried());
    }

    @Test
    void aRefusedCommitIsCountedAndTheOutcomesStayStored() {
        String id = UUID.randomUUID().toString();
        MockConsumer<String, String> refusing = new MockConsumer<>(OffsetResetStrategy.EARLIEST) {
            @Override
            public synchronized void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets) {
                throw new CommitFailedException();
            }
        };
        var p = processor(RecordKeys.jsonField("event_id"));
        p.process(refusing, List.of(rec(0, 0, event(id))), this::handle);
        assertEquals(1, p.counts().commitFailures());
        assertTrue(p.uncommitted().isEmpty());
        var out = processor(RecordKeys.jsonField("event_id")).process(consumer, List.of(rec(0, 0, event(id))),
                this::handle);
        assertEquals(MessageOutcome.Kind.REPLAYED, out.get(0).kind());
        assertEquals(List.of(0L), ran);
    }

    @Test
    void aWakeupIsNotTakenForARefusedCommit() {
        MockConsumer<String, String> wokenUp = new MockConsumer<>(OffsetResetStrategy.EARLIEST) {
            @Override
            public synchronized void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets) {
                throw new org.apache.kafka.common.errors.WakeupException();
            }
        };
        var p = processor(RecordKeys.offsets());
        assertThrows(org.apache.kafka.common.errors.WakeupException.class,
                () -> p.process(wokenUp, List.of(rec(0, 0, "x")), this::handle));
        assertEquals(0, p.counts().commitFailures());
    }

    @Test
    void revokeCommitsTheRevokedPartitionsSettledOffsets() {
        var p = KafkaProcessor.<String, String>builder(client, op).commitEachPoll(false).build();
        p.process(consumer, List.of(rec(0, 0, "x"), rec(1, 4, "y")), this::handle);
        assertTrue(committed().isEmpty());
        assertEquals(Map.of(P0, 1L, P1, 5L), p.uncommitted());
        List<String> told = new ArrayList<>();
        ConsumerRebalanceListener l = p.rebalanceListener(consumer, new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(java.util.Collection<TopicPartition> parts) {
                told.add("revoked " + parts);
            }

            @Override
            public void onPartitionsAssigned(java.util.Collection<TopicPartition> parts) {
                told.add("assigned " + parts);
            }
        });
        l.onPartitionsRevoked(List.of(P0));
        assertEquals(Map.of(P0, 1L), committed());
        assertEquals(List.of("revoked [ad-events-0]"), told);
        l.onPartitionsLost(List.of(P1));
        assertTrue(p.uncommitted().isEmpty());
        assertTrue(p.commit(consumer, null));
    }

    @Test
    void theRetryDelayDoublesWhileRecordsAreHeld() {
        String held = UUID.randomUUID().toString();
        client.claimKey(op, held, ClaimOptions.NONE);
        var p = KafkaProcessor.<String, String>builder(client, op).key(RecordKeys.jsonField("event_id"))
                .retryDelay(Duration.ofMillis(60)).maxRetryDelay(Duration.ofMillis(150)).build();
        long t0 = System.nanoTime();
        for (int i = 0; i < 4; i++) {  // 60, 120, 150, 150 ms
            p.process(consumer, List.of(rec(0, 0, event(held))), this::handle);
        }
        long ms = (System.nanoTime() - t0) / 1_000_000;
        assertTrue(ms >= 480 && ms < 5000, ms + " ms");
        assertEquals(4, p.counts().retried());
    }

    @Test
    void badInputIsAClearErrorAndNothingIsClaimed() {
        String id = UUID.randomUUID().toString();
        var p = processor(RecordKeys.jsonField("event_id"));
        Map<String, String> bad = Map.of("plain text", "not JSON", "[1, 2]", "not an object",
                "{\"id\":\"x\"}", "no member 'event_id'", "{\"event_id\":null}", "not a text or an integer");
        bad.forEach((value, why) -> {
            var e = assertThrows(RecordKeyException.class,
                    () -> p.process(consumer, List.of(rec(0, 1, event(id)), rec(0, 0, value)), this::handle));
            assertTrue(e.getMessage().contains(why), e.getMessage());
            assertEquals("ad-events/0/0", e.where());
        });
        assertTrue(ran.isEmpty());
        var h = processor(RecordKeys.header("event-id"));
        var e = assertThrows(RecordKeyException.class,
                () -> h.process(consumer, List.of(rec(0, 0, "{}", "other", "1")), this::handle));
        assertTrue(e.getMessage().contains("no header 'event-id'"), e.getMessage());
        assertTrue(committed().isEmpty());
        // the good record was not claimed: it is still new
        assertEquals(MessageOutcome.Kind.PROCESSED,
                p.process(consumer, List.of(rec(0, 1, event(id))), this::handle).get(0).kind());
    }
}
