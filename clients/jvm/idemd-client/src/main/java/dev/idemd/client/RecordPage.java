package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.List;

/**
 * One page of {@code GET /v1/records}.
 *
 * @param records the page's records (unmodifiable)
 * @param nextCursor the cursor of the next page, or null on the last
 * @param raw the JSON object as idemd sent it, for fields a newer idemd adds
 */
public record RecordPage(List<RecordInfo> records, String nextCursor, JsonNode raw) {
}
