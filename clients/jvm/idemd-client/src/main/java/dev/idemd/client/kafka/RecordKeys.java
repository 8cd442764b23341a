package dev.idemd.client.kafka;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import dev.idemd.client.internal.Json;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.function.Function;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.Header;

/** The ways to key a record: by the event's own id (a header, a JSON member) or by its place in the log. */
public final class RecordKeys {
    private RecordKeys() {
    }

    /** @return the record's {@code topic/partition/offset} */
    public static String coordinates(ConsumerRecord<?, ?> r) {
        return r.topic() + "/" + r.partition() + "/" + r.offset();
    }

    /**
     * {@code topic/partition/offset}: holds for redeliveries, not for an event
     * its producer sent twice (the copies sit at other offsets).
     *
     * @param <K> the key type
     * @param <V> the value type
     * @return the key function
     */
    public static <K, V> Function<ConsumerRecord<K, V>, String> offsets() {
        return RecordKeys::coordinates;
    }

    /**
     * The last header NAME's value, as UTF-8; a record without it (or with an
     * empty one) throws {@link RecordKeyException}.
     *
     * @param <K> the key type
     * @param <V> the value type
     * @param name the header's name
     * @return the key function
     */
    public static <K, V> Function<ConsumerRecord<K, V>, String> header(String name) {
        return r -> {
            Header h = r.headers().lastHeader(name);
            if (h == null) {
                throw new RecordKeyException(r, "no header '" + name + "'");
            }
            if (h.value() == null || h.value().length == 0) {
                throw new RecordKeyException(r, "header '" + name + "' is empty");
            }
            try {
                return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                        .decode(ByteBuffer.wrap(h.value())).toString();
            } catch (CharacterCodingException e) {
                throw new RecordKeyException(r, "header '" + name + "' is not UTF-8");
            }
        };
    }

    /**
     * Member NAME of the JSON object in the record's value (a String or a
     * byte[]), a text or an integer; a value that is not JSON, not an
     * object, or has no such member throws {@link RecordKeyException}.
     *
     * @param <K> the key type
     * @param <V> the value type (String or byte[])
     * @param name the member's name
     * @return the key function
     */
    public static <K, V> Function<ConsumerRecord<K, V>, String> jsonField(String name) {
        return r -> {
            Object v = r.value();
            if (v == null) {
                throw new RecordKeyException(r, "no value (a tombstone?), so no member '" + name + "'");
            }
            JsonNode doc;
            try {
                if (v instanceof byte[] b) {
                    doc = Json.MAPPER.readTree(b);
                } else if (v instanceof String s) {
                    doc = Json.MAPPER.readTree(s);
                } else {
                    throw new RecordKeyException(r, "the value is a " + v.getClass().getName()
                            + ", not a String or a byte[] of JSON");
                }
            } catch (JsonProcessingException e) {
                throw new RecordKeyException(r, "the value is not JSON (" + e.getOriginalMessage() + ")");
            } catch (IOException e) {
                throw new RecordKeyException(r, "the value is not JSON (" + e.getMessage() + ")");
            }
            if (doc == null || doc.isMissingNode()) {
                throw new RecordKeyException(r, "the value is not JSON (empty)");
            }
            if (!doc.isObject()) {
                throw new RecordKeyException(r, "the value is JSON but not an object");
            }
            JsonNode m = doc.get(name);
            if (m == null) {
                throw new RecordKeyException(r, "the value has no member '" + name + "'");
            }
            if (m.isTextual() && !m.asText().isEmpty()) {
                return m.asText();
            }
            if (m.isIntegralNumber()) {
                return m.bigIntegerValue().toString();
            }
            throw new RecordKeyException(r, "member '" + name + "' is " + m + ", not a text or an integer");
        };
    }
}
