package dev.idemd.okhttp;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.AtomicMoveNotSupportedException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * One file per pending submit in a directory (on Android: under
 * {@code context.getFilesDir()}). Each write goes to a temporary file that is
 * synced and then atomically renamed over the old one, so that a process
 * killed at any moment leaves either the old or the new submit, never half of
 * one. The token is never a file name (a file is named by its SHA-256).
 */
public final class FileSubmitStore implements PendingSubmitStore {
    private static final String SUFFIX = ".submit";
    private final Path dir;

    public FileSubmitStore(Path dir) throws IOException {
        this.dir = dir;
        Files.createDirectories(dir);
    }

    public Path getDirectory() {
        return dir;
    }

    private Path fileOf(String token) {
        try {
            byte[] d = MessageDigest.getInstance("SHA-256").digest(token.getBytes(StandardCharsets.UTF_8));
            StringBuilder sb = new StringBuilder();
            for (byte b : d) {
                sb.append(String.format("%02x", b & 0xff));
            }
            return dir.resolve(sb + SUFFIX);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }

    private static String b64(String s) {
        return Base64.getEncoder().encodeToString(s.getBytes(StandardCharsets.UTF_8));
    }

    private static String unb64(String s) {
        return new String(Base64.getDecoder().decode(s), StandardCharsets.UTF_8);
    }

    static String encode(PendingSubmit p) {
        StringBuilder sb = new StringBuilder("idemd-pending-submit 1\n");
        sb.append("token ").append(b64(p.getToken())).append('\n');
        sb.append("method ").append(b64(p.getMethod())).append('\n');
        sb.append("url ").append(b64(p.getUrl())).append('\n');
        sb.append("created ").append(p.getCreatedAtMillis()).append('\n');
        if (p.getContentType() != null) {
            sb.append("content-type ").append(b64(p.getContentType())).append('\n');
        }
        if (p.getBody() != null) {
            sb.append("body ").append(Base64.getEncoder().encodeToString(p.getBody())).append('\n');
        }
        p.getHeaders().forEach((k, v) -> sb.append("header ").append(b64(k)).append(' ').append(b64(v)).append('\n'));
        sb.append("end\n");
        return sb.toString();
    }

    static PendingSubmit decode(String text) throws IOException {
        String[] lines = text.split("\n");
        if (lines.length < 2 || !lines[0].equals("idemd-pending-submit 1") || !lines[lines.length - 1].equals("end")) {
            throw new IOException("not a pending submit file");
        }
        String token = null;
        String method = null;
        String url = null;
        String type = null;
        byte[] body = null;
        long created = 0;
        Map<String, String> headers = new LinkedHashMap<>();
        for (int i = 1; i < lines.length - 1; i++) {
            String[] f = lines[i].split(" ");
            switch (f[0]) {
                case "token":
                    token = unb64(f[1]);
                    break;
                case "method":
                    method = unb64(f[1]);
                    break;
                case "url":
                    url = unb64(f[1]);
                    break;
                case "created":
                    created = Long.parseLong(f[1]);
                    break;
                case "content-type":
                    type = unb64(f[1]);
                    break;
                case "body":
                    body = Base64.getDecoder().decode(f.length > 1 ? f[1] : "");
                    break;
                case "header":
                    headers.put(unb64(f[1]), unb64(f.length > 2 ? f[2] : ""));
                    break;
                default:
                    break; // a field of a newer version
            }
        }
        if (token == null || method == null || url == null) {
            throw new IOException("incomplete pending submit file");
        }
        return new PendingSubmit(token, method, url, headers, body, type, created);
    }

    @Override
    public synchronized void save(PendingSubmit submit) throws IOException {
        Path target = fileOf(submit.getToken());
        Path tmp = dir.resolve(target.getFileName() + ".tmp");
        byte[] bytes = encode(submit).getBytes(StandardCharsets.UTF_8);
        try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                StandardOpenOption.TRUNCATE_EXISTING)) {
            ByteBuffer buf = ByteBuffer.wrap(bytes);
            while (buf.hasRemaining()) {
                ch.write(buf);
            }
            ch.force(true);
        }
        try {
            Files.move(tmp, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (AtomicMoveNotSupportedException e) {
            Files.move(tmp, target, StandardCopyOption.REPLACE_EXISTING);
        }
        syncDirectory();
    }

    private void syncDirectory() {
        try (FileChannel ch = FileChannel.open(dir, StandardOpenOption.READ)) {
            ch.force(true);
        } catch (IOException | UnsupportedOperationException e) {
            // not every platform can open a directory; the rename is still atomic
        }
    }

    @Override
    public synchronized void remove(String token) throws IOException {
        Files.deleteIfExists(fileOf(token));
        syncDirectory();
    }

    @Override
    public synchronized List<PendingSubmit> list() throws IOException {
        List<PendingSubmit> out = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir, "*" + SUFFIX)) {
            for (Path p : ds) {
                try {
                    out.add(decode(new String(Files.readAllBytes(p), StandardCharsets.UTF_8)));
                } catch (IOException | IllegalArgumentException e) {
                    // a file another program left: not ours to read
                }
            }
        }
        out.sort(Comparator.comparingLong(PendingSubmit::getCreatedAtMillis));
        return out;
    }
}
