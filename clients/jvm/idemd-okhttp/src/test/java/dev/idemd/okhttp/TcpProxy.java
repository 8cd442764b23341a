package dev.idemd.okhttp;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A TCP proxy in front of idemd's gateway that can lose answers: it forwards
 * one HTTP request per connection to the target, then, by mode, passes the
 * answer back, drops the connection after the target answered (the order was
 * placed, its answer is lost), holds the answer past the client's read
 * timeout, or swallows the request (network gone).
 */
final class TcpProxy implements AutoCloseable {
    enum Mode {
        PASS,
        /** Forward the request, read the answer, close without sending it. */
        DROP,
        /** Forward the request, hold the answer for holdMillis, then close without sending it. */
        STALL,
        /** Read the request and never answer nor forward it. */
        BLACKHOLE
    }

    private final ServerSocket server;
    private final String targetHost;
    private final int targetPort;
    private volatile Mode mode = Mode.PASS;
    private volatile Mode next = Mode.PASS;
    private volatile int onceLeft = 0;
    volatile long holdMillis = 4000;
    final AtomicInteger requests = new AtomicInteger();
    final AtomicInteger drops = new AtomicInteger();
    final AtomicInteger stalls = new AtomicInteger();
    final AtomicInteger swallowed = new AtomicInteger();
    private volatile boolean closed;

    TcpProxy(String targetHost, int targetPort) throws IOException {
        this.targetHost = targetHost;
        this.targetPort = targetPort;
        server = new ServerSocket();
        server.bind(new InetSocketAddress("127.0.0.1", 0));
        Thread t = new Thread(this::acceptLoop, "proxy-accept");
        t.setDaemon(true);
        t.start();
    }

    int port() {
        return server.getLocalPort();
    }

    /** MODE for the next COUNT requests, then THEN. */
    synchronized void set(Mode mode, int count, Mode then) {
        this.mode = mode;
        this.onceLeft = count;
        this.next = then;
    }

    synchronized void set(Mode mode) {
        set(mode, Integer.MAX_VALUE, mode);
    }

    private synchronized Mode take() {
        Mode m = mode;
        if (onceLeft != Integer.MAX_VALUE && --onceLeft <= 0) {
            mode = next;
            onceLeft = Integer.MAX_VALUE;
        }
        return m;
    }

    private void acceptLoop() {
        while (!closed) {
            try {
                Socket c = server.accept();
                Thread t = new Thread(() -> handle(c), "proxy-conn");
                t.setDaemon(true);
                t.start();
            } catch (IOException e) {
                return;
            }
        }
    }

    /** Reads one HTTP/1.1 request (headers and a Content-Length body), or null at EOF. */
    private static byte[] readRequest(InputStream in) throws IOException {
        ByteArrayOutputStream head = new ByteArrayOutputStream();
        int state = 0;
        while (state < 4) {
            int b = in.read();
            if (b < 0) {
                return null;
            }
            head.write(b);
            state = (b == '\r' && (state == 0 || state == 2)) || (b == '\n' && (state == 1 || state == 3)) ? state + 1
                    : (b == '\r' ? 1 : 0);
        }
        String h = head.toString(StandardCharsets.ISO_8859_1);
        int len = 0;
        for (String line : h.split("\r\n")) {
            int colon = line.indexOf(':');
            if (colon > 0 && line.substring(0, colon).trim().equalsIgnoreCase("Content-Length")) {
                len = Integer.parseInt(line.substring(colon + 1).trim());
            }
        }
        byte[] body = in.readNBytes(len);
        ByteArrayOutputStream all = new ByteArrayOutputStream();
        all.write(head.toByteArray());
        all.write(body);
        return all.toByteArray();
    }

    /** The request with "Connection: close", so that the target closes after its answer. */
    private static byte[] closeAfter(byte[] req) {
        String s = new String(req, StandardCharsets.ISO_8859_1);
        int end = s.indexOf("\r\n\r\n");
        StringBuilder head = new StringBuilder();
        for (String line : s.substring(0, end).split("\r\n")) {
            if (!line.toLowerCase().startsWith("connection:")) {
                head.append(line).append("\r\n");
            }
        }
        head.append("Connection: close\r\n\r\n");
        return (head + s.substring(end + 4)).getBytes(StandardCharsets.ISO_8859_1);
    }

    private void handle(Socket client) {
        try (Socket c = client) {
            InputStream cin = c.getInputStream();
            OutputStream cout = c.getOutputStream();
            while (true) {
                byte[] req = readRequest(cin);
                if (req == null) {
                    return;
                }
                requests.incrementAndGet();
                Mode m = take();
                if (m == Mode.BLACKHOLE) {
                    swallowed.incrementAndGet();
                    while (!closed && cin.read() >= 0) {
                        // hold the connection until the client gives up (or is killed)
                    }
                    return;
                }
                try (Socket up = new Socket(targetHost, targetPort)) {
                    up.getOutputStream().write(closeAfter(req));
                    up.getOutputStream().flush();
                    InputStream uin = up.getInputStream();
                    if (m == Mode.DROP || m == Mode.STALL) {
                        // wait for the first byte of the answer: the order is placed
                        int first = uin.read();
                        if (m == Mode.STALL) {
                            stalls.incrementAndGet();
                            Thread.sleep(holdMillis);
                        } else {
                            drops.incrementAndGet();
                        }
                        if (first >= 0) {
                            c.setSoLinger(true, 0); // a reset, as a dropped mobile connection looks
                        }
                        return;
                    }
                    // PASS: relay the answer until the target closes (Connection: close)
                    uin.transferTo(cout);
                    cout.flush();
                    return;
                }
            }
        } catch (IOException | InterruptedException e) {
            // the client went away
        }
    }

    @Override
    public void close() throws IOException {
        closed = true;
        server.close();
    }
}
