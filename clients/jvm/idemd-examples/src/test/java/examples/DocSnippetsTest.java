package examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * Every fenced block of docs/clients/jvm.md that follows a
 * {@code <!-- file: PATH -->} comment is byte for byte the file PATH (from
 * the repository root); every java block has such a comment.
 */
class DocSnippetsTest {
    static Path root() {
        String v = System.getenv("IDEMD_SOURCE_DIR");
        if (v != null && !v.isEmpty()) {
            return Paths.get(v);
        }
        Path p = Paths.get("").toAbsolutePath();
        while (p != null && !Files.exists(p.resolve("docs/clients/jvm.md"))) {
            p = p.getParent();
        }
        if (p == null) {
            fail("docs/clients/jvm.md not found");
        }
        return p;
    }

    @Test
    void blocksAreTheFilesTheyName() throws Exception {
        Path root = root();
        List<String> lines = Files.readAllLines(root.resolve("docs/clients/jvm.md"), StandardCharsets.UTF_8);
        int checked = 0;
        String file = null;
        for (int i = 0; i < lines.size(); i++) {
            String line = lines.get(i);
            if (line.startsWith("<!-- file: ") && line.endsWith(" -->")) {
                file = line.substring("<!-- file: ".length(), line.length() - " -->".length()).trim();
                continue;
            }
            if (line.startsWith("```") && line.length() > 3) {
                String lang = line.substring(3).trim();
                List<String> block = new ArrayList<>();
                int j = i + 1;
                while (j < lines.size() && !lines.get(j).equals("```")) {
                    block.add(lines.get(j));
                    j++;
                }
                if (file != null) {
                    String want = new String(Files.readAllBytes(root.resolve(file)), StandardCharsets.UTF_8);
                    assertEquals(want, String.join("\n", block) + "\n", "docs/clients/jvm.md line " + (i + 1)
                            + " differs from " + file);
                    checked++;
                } else if (lang.equals("java") || lang.equals("kotlin")) {
                    fail("docs/clients/jvm.md line " + (i + 1) + ": a " + lang + " block without <!-- file: -->");
                }
                file = null;
                i = j;
            } else if (!line.isBlank()) {
                file = null;
            }
        }
        assertTrue(checked >= 4, "only " + checked + " blocks checked");
    }
}
