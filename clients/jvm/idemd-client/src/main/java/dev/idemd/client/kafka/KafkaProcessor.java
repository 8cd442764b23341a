package dev.idemd.client.kafka;

import dev.idemd.client.ConsumeOptions;
import dev.idemd.client.IdemdClient;
import dev.idemd.client.MessageHandler;
import dev.idemd.client.MessageOutcome;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.IdentityHashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.kafka.common.errors.WakeupException;

/**
 * Runs a handler once per Kafka event and commits offsets only after idemd
 * stored the outcomes.
 *
 * <pre>{@code
 * KafkaProcessor<String, String> spend = KafkaProcessor.<String, String>builder(client, "spend.add")
 *     .key(RecordKeys.jsonField("event_id")).prefix("spend:").build();
 * spend.subscribe(consumer, List.of("ad-events"));      // enable.auto.commit=false
 * while (running) {
 *     spend.process(consumer, consumer.poll(Duration.ofSeconds(1)), (record, claim) -> addSpend(record));
 * }
 * }</pre>
 *
 * <p>Each {@link #process} call claims the poll's records in one batch call
 * (keyed by the key function, {@code topic/partition/offset} by default,
 * with the prefix), runs the handler for the new ones, completes them in one
 * call, then commits each partition's offset past its settled records with
 * {@code commitSync}. A record answered IN_PROGRESS (another consumer holds
 * it, or held it and died, until its lease ends), or released after its
 * handler threw, is sought back with what follows it in its partition: the
 * next poll delivers it again, after the retry delay (doubled for each call
 * in a row that seeks the same partition back, up to the maximum). A refused commit (the
 * group moved on, for instance after {@code max.poll.interval.ms}) is
 * counted, not thrown: the outcomes are stored, so the partition's next
 * owner replays those records. One consumer thread per processor, as for the
 * consumer itself.
 *
 * @param <K> the records' key type
 * @param <V> the records' value type
 */
public final class KafkaProcessor<K, V> {
    private final IdemdClient client;
    private final String operation;
    private final Function<ConsumerRecord<K, V>, String> key;
    private final String prefix;
    private final ConsumeOptions<ConsumerRecord<K, V>> options;
    private final Duration retryDelay;
    private final Duration maxRetryDelay;
    private final boolean commitEachPoll;
    private final Map<TopicPartition, Integer> retryRounds = new HashMap<>();  // calls in a row seeking it back
    private final Map<TopicPartition, Long> uncommitted = new HashMap<>();
    private final long[] counts = new long[Counts.FIELDS];

    private KafkaProcessor(Builder<K, V> b) {
        this.client = b.client;
        this.operation = b.operation;
        this.key = b.key;
        this.prefix = b.prefix;
        this.options = b.options;
        this.retryDelay = b.retryDelay;
        this.maxRetryDelay = b.maxRetryDelay;
        this.commitEachPoll = b.commitEachPoll;
    }

    /**
     * @param <K> the records' key type
     * @param <V> the records' value type
     * @param client the idemd client
     * @param operation the idemd operation the records are claimed under
     * @return a builder
     */
    public static <K, V> Builder<K, V> builder(IdemdClient client, String operation) {
        return new Builder<>(client, operation);
    }

    /**
     * The idemd key of RECORD.
     *
     * @param record the record
     * @return the prefix and the key function's answer
     * @throws RecordKeyException if the record lacks its key
     */
    public String keyOf(ConsumerRecord<K, V> record) {
        String k = key.apply(record);
        if (k == null || k.isEmpty()) {
            throw new RecordKeyException(record, "the key function returned " + k + ", not a text");
        }
        return prefix + k;
    }

    /**
     * One poll's records: claimed as one batch, HANDLER for the new ones,
     * completed, then the offsets committed (unless the builder's
     * commitEachPoll is false).
     *
     * @param consumer the consumer that polled them
     * @param records the poll's records
     * @param handler runs once per new event; returns what to store
     * @return one outcome per record, in order
     * @throws RecordKeyException before any claim, if a record lacks its key
     */
    public List<MessageOutcome<ConsumerRecord<K, V>>> process(Consumer<K, V> consumer,
            Iterable<ConsumerRecord<K, V>> records, MessageHandler<ConsumerRecord<K, V>> handler) {
        List<ConsumerRecord<K, V>> batch = new ArrayList<>();
        records.forEach(batch::add);
        if (batch.isEmpty()) {
            return List.of();
        }
        Map<ConsumerRecord<K, V>, String> keys = new IdentityHashMap<>();
        for (ConsumerRecord<K, V> r : batch) {
            keys.put(r, keyOf(r));  // every key checked before anything is claimed
        }
        List<MessageOutcome<ConsumerRecord<K, V>>> out = client.consume(operation, batch, keys::get, handler,
                options);
        count(out);
        // The completions are stored (consume returned): the offsets may move.
        Map<TopicPartition, Long> retry = new LinkedHashMap<>();
        Map<TopicPartition, Long> settled = new LinkedHashMap<>();
        List<MessageOutcome<ConsumerRecord<K, V>>> sorted = new ArrayList<>(out);
        sorted.sort(Comparator.comparing((MessageOutcome<ConsumerRecord<K, V>> o) -> o.message().topic())
                .thenComparingInt(o -> o.message().partition()).thenComparingLong(o -> o.message().offset()));
        for (MessageOutcome<ConsumerRecord<K, V>> o : sorted) {
            TopicPartition tp = new TopicPartition(o.message().topic(), o.message().partition());
            if (retry.containsKey(tp)) {
                continue;
            }
            if (o.retry()) {
                retry.put(tp, o.message().offset());
            } else {
                settled.put(tp, o.message().offset() + 1);
            }
        }
        uncommitted.putAll(settled);
        for (TopicPartition tp : settled.keySet()) {
            if (!retry.containsKey(tp)) {
                retryRounds.remove(tp);  // the partition moved on
            }
        }
        if (commitEachPoll) {
            commit(consumer, null);
        }
        if (!retry.isEmpty()) {
            for (Map.Entry<TopicPartition, Long> e : retry.entrySet()) {
                try {
                    consumer.seek(e.getKey(), e.getValue());
                } catch (IllegalStateException notAssigned) {
                    // no longer ours: its new owner reads it
                }
            }
            int rounds = 0;
            for (TopicPartition tp : retry.keySet()) {
                rounds = Math.max(rounds, retryRounds.getOrDefault(tp, 0));
                retryRounds.merge(tp, 1, Integer::sum);
            }
            Duration d = retryDelay.multipliedBy(1L << Math.min(rounds, 20));
            sleep(d.compareTo(maxRetryDelay) > 0 ? maxRetryDelay : d);
        }
        return out;
    }

    /**
     * Commits the settled offsets (of the partitions ONLY, or all when null)
     * synchronously.
     *
     * @param consumer the consumer
     * @param only the partitions to commit, or null for all
     * @return false (and counted) when the broker refused
     * @throws WakeupException after {@code consumer.wakeup()}, as commitSync throws it
     */
    public boolean commit(Consumer<K, V> consumer, Collection<TopicPartition> only) {
        Map<TopicPartition, OffsetAndMetadata> todo = new HashMap<>();
        uncommitted.forEach((tp, off) -> {
            if (only == null || only.contains(tp)) {
                todo.put(tp, new OffsetAndMetadata(off));
            }
        });
        if (todo.isEmpty()) {
            return true;
        }
        boolean ok;
        try {
            consumer.commitSync(todo);
            counts[Counts.COMMITS]++;
            ok = true;
        } catch (WakeupException | InterruptException stop) {
            throw stop;  // the application's own stop: its loop must see it
        } catch (KafkaException refused) {  // CommitFailedException, RebalanceInProgressException...
            counts[Counts.COMMIT_FAILURES]++;
            ok = false;  // the partitions' new owners replay from their offsets
        }
        todo.forEach((tp, om) -> uncommitted.remove(tp, om.offset()));
        return ok;
    }

    /**
     * A listener for {@code consumer.subscribe}: on revoke it commits the
     * revoked partitions' settled offsets (a process() call settles its
     * batch before the next poll, where revocations come, so no claim is
     * held across one); on loss it forgets them (a commit would be refused;
     * the outcomes are stored and the new owner replays those records).
     *
     * @param consumer the consumer it is registered on
     * @param also a listener of the application's to call after, or null
     * @return the listener
     */
    public ConsumerRebalanceListener rebalanceListener(Consumer<K, V> consumer, ConsumerRebalanceListener also) {
        return new ConsumerRebalanceListener() {
            @Override
            public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
                commit(consumer, partitions);
                if (also != null) {
                    also.onPartitionsRevoked(partitions);
                }
            }

            @Override
            public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
                if (also != null) {
                    also.onPartitionsAssigned(partitions);
                }
            }

            @Override
            public void onPartitionsLost(Collection<TopicPartition> partitions) {
                partitions.forEach(uncommitted::remove);
                if (also != null) {
                    also.onPartitionsLost(partitions);
                }
            }
        };
    }

    /**
     * {@code consumer.subscribe(topics)} with {@link #rebalanceListener}.
     *
     * @param consumer the consumer
     * @param topics the topics
     */
    public void subscribe(Consumer<K, V> consumer, Collection<String> topics) {
        consumer.subscribe(topics, rebalanceListener(consumer, null));
    }

    /** @return the partitions' offsets settled and not committed yet */
    public Map<TopicPartition, Long> uncommitted() {
        return Map.copyOf(uncommitted);
    }

    /** @return what this processor did, summed over its calls */
    public Counts counts() {
        return new Counts(counts.clone());
    }

    private void count(List<MessageOutcome<ConsumerRecord<K, V>>> out) {
        counts[Counts.RECORDS] += out.size();
        for (MessageOutcome<ConsumerRecord<K, V>> o : out) {
            if (o.retry()) {
                counts[Counts.RETRIED]++;
            }
            switch (o.kind()) {
                case PROCESSED -> counts[Counts.PROCESSED]++;
                case REPLAYED -> counts[Counts.REPLAYED]++;
                case FAILED -> counts[Counts.FAILED]++;
                case REJECTED -> counts[Counts.REJECTED]++;
                case LOST -> counts[Counts.LOST]++;
                default -> { }
            }
        }
    }

    private static void sleep(Duration d) {
        if (d.isZero() || d.isNegative()) {
            return;
        }
        try {
            Thread.sleep(d.toMillis());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * What a processor did: records handed to process(), processed (the
     * handler ran, its outcome stored), replayed (completed before: skipped),
     * retried (in progress elsewhere or released: sought back), failed,
     * rejected, lost (ran, but the lease had run out), commits and refused
     * commits.
     *
     * @param records records handed to process()
     * @param processed the handler ran and its outcome is stored
     * @param replayed completed before: skipped
     * @param retried in progress elsewhere, or released: sought back
     * @param failed the handler threw
     * @param rejected idemd refused the claim
     * @param lost ran, but the lease had run out
     * @param commits synchronous commits that succeeded
     * @param commitFailures commits the broker refused
     */
    public record Counts(long records, long processed, long replayed, long retried, long failed, long rejected,
            long lost, long commits, long commitFailures) {
        static final int RECORDS = 0;
        static final int PROCESSED = 1;
        static final int REPLAYED = 2;
        static final int RETRIED = 3;
        static final int FAILED = 4;
        static final int REJECTED = 5;
        static final int LOST = 6;
        static final int COMMITS = 7;
        static final int COMMIT_FAILURES = 8;
        static final int FIELDS = 9;

        Counts(long[] c) {
            this(c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7], c[8]);
        }
    }

    /**
     * A {@link KafkaProcessor}'s settings.
     *
     * @param <K> the records' key type
     * @param <V> the records' value type
     */
    public static final class Builder<K, V> {
        private final IdemdClient client;
        private final String operation;
        private Function<ConsumerRecord<K, V>, String> key = RecordKeys.offsets();
        private String prefix = "";
        private ConsumeOptions<ConsumerRecord<K, V>> options = ConsumeOptions.defaults();
        private Duration retryDelay = Duration.ofMillis(200);
        private Duration maxRetryDelay = Duration.ofSeconds(5);
        private boolean commitEachPoll = true;

        private Builder(IdemdClient client, String operation) {
            this.client = Objects.requireNonNull(client, "client");
            this.operation = Objects.requireNonNull(operation, "operation");
        }

        /**
         * @param f the key function ({@link RecordKeys}); {@code topic/partition/offset} by default
         * @return this builder
         */
        public Builder<K, V> key(Function<ConsumerRecord<K, V>, String> f) {
            this.key = Objects.requireNonNull(f, "key");
            return this;
        }

        /**
         * @param p put before every key (one per use of the events), "" by default
         * @return this builder
         */
        public Builder<K, V> prefix(String p) {
            this.prefix = Objects.requireNonNull(p, "prefix");
            return this;
        }

        /**
         * @param o request, fingerprint, subject and releaseOn, as for {@link IdemdClient#consume}
         * @return this builder
         */
        public Builder<K, V> options(ConsumeOptions<ConsumerRecord<K, V>> o) {
            this.options = Objects.requireNonNull(o, "options");
            return this;
        }

        /**
         * @param d how long to wait after seeking back records to deliver again (200 ms by default)
         * @return this builder
         */
        public Builder<K, V> retryDelay(Duration d) {
            this.retryDelay = Objects.requireNonNull(d, "retryDelay");
            return this;
        }

        /**
         * @param d the longest wait after seeking back (5 s by default): the
         *        delay doubles for each process() call in a row that seeks back
         * @return this builder
         */
        public Builder<K, V> maxRetryDelay(Duration d) {
            this.maxRetryDelay = Objects.requireNonNull(d, "maxRetryDelay");
            return this;
        }

        /**
         * @param each true (the default): commit after every process() call;
         *        false: the caller calls {@link KafkaProcessor#commit} when it
         *        likes (and the rebalance listener on revoke)
         * @return this builder
         */
        public Builder<K, V> commitEachPoll(boolean each) {
            this.commitEachPoll = each;
            return this;
        }

        /** @return the processor */
        public KafkaProcessor<K, V> build() {
            return new KafkaProcessor<>(this);
        }
    }
}
