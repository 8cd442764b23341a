// One JVM consumer process of tests/kafka/scenarios.py: the arguments and
// the kill points of tests/kafka/consumer.py, with dev.idemd.client.kafka's
// KafkaProcessor on kafka-clients. Its effect is a line appended to a file
// (one write per line, which a SIGKILL does not undo), as are its
// deliveries; scenarios.py loads them into the ledger tables afterwards.

import dev.idemd.client.IdemdClient;
import dev.idemd.client.RetryPolicy;
import dev.idemd.client.kafka.KafkaProcessor;
import dev.idemd.client.kafka.RecordKeys;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.function.BooleanSupplier;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.StringDeserializer;

public final class KafkaConsumerMain {
    private static final Map<String, String> ARGS = new HashMap<>();
    private static int batchNo;
    private static boolean batchNew;

    private static String arg(String name, String dflt) {
        return ARGS.getOrDefault(name, dflt);
    }

    private static void die() {
        try {
            new ProcessBuilder("kill", "-9", Long.toString(ProcessHandle.current().pid())).start().waitFor();
        } catch (IOException | InterruptedException e) {
            // fall through
        }
        Runtime.getRuntime().halt(137);
    }

    private static void append(FileOutputStream out, String line) {
        try {
            out.write((line + "\n").getBytes(StandardCharsets.UTF_8));
        } catch (IOException e) {
            throw new IllegalStateException(e);
        }
    }

    public static void main(String[] argv) throws Exception {
        for (int i = 0; i + 1 < argv.length; i += 2) {
            ARGS.put(argv[i].replaceFirst("^--", ""), argv[i + 1]);
        }
        ProcessHandle parent = ProcessHandle.current().parent().orElseThrow();
        Thread orphan = new Thread(() -> {  // the stage's driver died: go with it
            while (true) {
                try {
                    Thread.sleep(300);
                } catch (InterruptedException e) {
                    return;
                }
                if (!parent.isAlive()) {
                    Runtime.getRuntime().halt(1);
                }
            }
        });
        orphan.setDaemon(true);
        orphan.start();
        String scenario = arg("scenario", ""), name = arg("name", "");
        Path work = Path.of(arg("work", "."));
        String[] dieArg = arg("die", ":0").split(":");
        String diePoint = dieArg[0];
        int dieBatch = Integer.parseInt(dieArg[1]);
        String[] stallArg = arg("stall", "0:0").split(":");
        int stallBatch = Integer.parseInt(stallArg[0]);
        long stallMs = (long) (Double.parseDouble(stallArg[1]) * 1000);
        long paceMs = (long) (Double.parseDouble(arg("pace", "0")) * 1000);

        Properties p = new Properties();
        p.put("bootstrap.servers", System.getenv("KAFKA_BOOTSTRAP"));
        p.put("group.id", arg("group", ""));
        p.put("client.id", name);
        p.put("enable.auto.commit", "false");
        p.put("auto.offset.reset", "earliest");
        p.put("session.timeout.ms", "2000");
        p.put("heartbeat.interval.ms", "400");
        p.put("max.poll.interval.ms", arg("max-poll-ms", "300000"));
        p.put("max.poll.records", arg("batch", "200"));
        if (!arg("instance-id", "").isEmpty()) {
            p.put("group.instance.id", arg("instance-id", ""));
        }
        DyingConsumer consumer = new DyingConsumer(p,
                () -> diePoint.equals("completed") && batchNew && batchNo == dieBatch);
        AtomicBoolean stop = new AtomicBoolean();
        Thread main = Thread.currentThread();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {  // SIGTERM: leave the group
            stop.set(true);
            consumer.wakeup();
            try {
                main.join(20000);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }));

        IdemdClient client = IdemdClient.builder(System.getenv("IDEMD_URL"))
                .apiKey(System.getenv("IDEMD_API_KEY")).retry(RetryPolicy.DEFAULT).build();
        String header = arg("key-header", "");
        KafkaProcessor<String, String> proc = KafkaProcessor.<String, String>builder(client, arg("operation", ""))
                .key(header.isEmpty() ? RecordKeys.jsonField("event_id") : RecordKeys.header(header))
                .retryDelay(Duration.ofMillis(300)).build();
        String tag = scenario + "." + name;
        try (FileOutputStream ledger = new FileOutputStream(work.resolve("ledger." + tag + ".tsv").toFile(), true);
             FileOutputStream deliveries = new FileOutputStream(
                     work.resolve("deliveries." + tag + ".tsv").toFile(), true)) {
            proc.subscribe(consumer, List.of(arg("topic", "")));
            while (!stop.get()) {
                List<ConsumerRecord<String, String>> records = new ArrayList<>();
                try {
                    consumer.poll(Duration.ofMillis(500)).forEach(records::add);
                } catch (WakeupException e) {
                    break;
                }
                if (records.isEmpty()) {
                    continue;
                }
                StringBuilder sb = new StringBuilder();
                for (ConsumerRecord<String, String> r : records) {
                    sb.append(r.partition()).append('\t').append(r.offset()).append('\n');
                }
                append(deliveries, sb.toString().stripTrailing());
                batchNew = false;
                try {
                    process(proc, consumer, records, ledger, diePoint, dieBatch, stallBatch, stallMs);
                } catch (WakeupException e) {
                    break;  // SIGTERM during the commit: the batch is completed, close() follows
                }
                writeCounts(work, tag, proc);
                if (paceMs > 0) {
                    Thread.sleep(paceMs);
                }
            }
        } finally {
            consumer.close();  // leaves the group: the listener commits what is settled
            writeCounts(work, tag, proc);
        }
    }

    private static void process(KafkaProcessor<String, String> proc, DyingConsumer consumer,
            List<ConsumerRecord<String, String>> records, FileOutputStream ledger, String diePoint, int dieBatch,
            int stallBatch, long stallMs) {
        proc.process(consumer, records, (r, claim) -> {
            if (!batchNew) {
                batchNew = true;
                batchNo++;
                if (diePoint.equals("claimed") && batchNo == dieBatch) {
                    die();
                }
                if (batchNo == stallBatch) {
                    Thread.sleep(stallMs);
                }
            }
            String eid = RecordKeys.<String, String>jsonField("event_id").apply(r);
            append(ledger, eid + "\t" + r.partition() + "\t" + r.offset() + "\t" + claim.attempt()
                    + "\t" + claim.id());
            return Map.of("ok", true);
        });
    }

    /** The consumer, killed before the commit of a chosen batch (its completions stored). */
    private static final class DyingConsumer extends KafkaConsumer<String, String> {
        private final BooleanSupplier dieNow;

        DyingConsumer(Properties p, BooleanSupplier dieNow) {
            super(p, new StringDeserializer(), new StringDeserializer());
            this.dieNow = dieNow;
        }

        @Override
        public void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets) {
            if (dieNow.getAsBoolean()) {
                die();
            }
            super.commitSync(offsets);
        }
    }

    private static void writeCounts(Path work, String tag, KafkaProcessor<String, String> proc) throws IOException {
        KafkaProcessor.Counts c = proc.counts();
        String json = String.format("{\"records\": %d, \"processed\": %d, \"replayed\": %d, \"retried\": %d,"
                + " \"commit_failures\": %d}", c.records(), c.processed(), c.replayed(), c.retried(),
                c.commitFailures());
        Path tmp = work.resolve("counts." + tag + ".json.tmp");
        Files.writeString(tmp, json);
        Files.move(tmp, work.resolve("counts." + tag + ".json"), StandardCopyOption.ATOMIC_MOVE,
                StandardCopyOption.REPLACE_EXISTING);
    }
}
