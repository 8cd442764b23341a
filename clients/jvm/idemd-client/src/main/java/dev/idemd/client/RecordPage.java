package dev.idemd.client;

import com.fasterxml.jackson.databind.JsonNode;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/** One page of {@code GET /v1/records}. */
public final class RecordPage extends JsonView {
    public RecordPage(JsonNode json) {
        super(json);
    }

    public List<RecordInfo> getRecords() {
        List<RecordInfo> out = new ArrayList<>();
        JsonNode n = node("records");
        if (n != null) {
            n.forEach(r -> out.add(new RecordInfo(r)));
        }
        return Collections.unmodifiableList(out);
    }

    /** The cursor of the next page, or null on the last. */
    public String getNextCursor() {
        return text("next_cursor");
    }
}
