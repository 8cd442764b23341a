"""A raw-socket upstream for the gateway hardening tests (python stdlib only).

Unlike upstream.py it runs inside the test process and keeps, for every
connection it accepted, the exact bytes it received. Those bytes are parsed
strictly as HTTP/1.1 requests (RFC 9112): a request line, header lines whose
names are tokens and whose values hold no control character other than tab,
no obs-fold, at most one Content-Length, no Transfer-Encoding, and a body of
exactly Content-Length bytes. Anything else is recorded as a parse error and
the connection is closed: a test then knows that idemd sent something a
strict server would not read as the requests idemd meant.

Each parsed request is answered on the same connection (keep-alive) with the
bytes a mode returns; the mode is chosen by the request's X-Raw-Mode header
("ok" when absent). A mode is a function (request) -> bytes, or None for no
answer at all (the connection then stays open until idemd closes it).
The default "ok" mode answers 201 with a JSON echo of what arrived:
{"seq", "conn", "key", "subject", "cookie", "body"}.

Every wait is bounded; stop() closes everything.
"""

import json
import re
import socket
import threading
import time

TCHAR_RE = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
REQUEST_LINE_RE = re.compile(rb"^([!#$%&'*+\-.^_`|~0-9A-Za-z]+) ([\x21-\x7e]+) HTTP/1\.1$")
MAX_HEAD = 65536


class ParseError(Exception):
    pass


class Request:
    def __init__(self, conn_id, seq, method, target, headers, body, raw):
        self.conn_id = conn_id      # which accepted connection carried it
        self.seq = seq              # order of arrival over all connections
        self.method = method        # str
        self.target = target        # str
        self.headers = headers      # [(name, value)] as sent (str, latin-1)
        self.body = body            # bytes
        self.raw = raw              # the exact bytes of this request

    def values(self, name):
        """All values of header NAME (case-insensitive), in order."""
        n = name.lower()
        return [v for k, v in self.headers if k.lower() == n]

    def header(self, name):
        v = self.values(name)
        return v[0] if v else None

    def __repr__(self):
        return "<Request #%d conn %d %s %s key=%s>" % (
            self.seq, self.conn_id, self.method, self.target, self.header("idempotency-key"))


def parse_request(buf):
    """Parses one request from the start of BUF (bytes).

    Returns (method, target, headers, body, consumed) or None when BUF holds
    only a prefix of a request. Raises ParseError on anything a strict
    HTTP/1.1 server must refuse."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > MAX_HEAD:
            raise ParseError("no end of the header section within %d bytes" % MAX_HEAD)
        return None
    head = buf[:end]
    lines = head.split(b"\r\n")
    m = REQUEST_LINE_RE.match(lines[0])
    if not m:
        raise ParseError("bad request line %r" % lines[0][:200])
    headers = []
    for ln in lines[1:]:
        if ln[:1] in (b" ", b"\t"):
            raise ParseError("obs-fold line %r" % ln[:200])
        name, sep, value = ln.partition(b":")
        if not sep or not TCHAR_RE.match(name):
            raise ParseError("bad header name in %r" % ln[:200])
        value = value.strip(b" \t")
        for c in value:
            if (c < 0x20 and c != 0x09) or c == 0x7f:
                raise ParseError("control character 0x%02x in the value of %r"
                                 % (c, name[:100]))
        if b"\r" in value or b"\n" in value:
            raise ParseError("CR or LF inside the value of %r" % name[:100])
        headers.append((name.decode("latin-1"), value.decode("latin-1")))
    cls = [v for k, v in headers if k.lower() == "content-length"]
    if any(k.lower() == "transfer-encoding" for k, _ in headers):
        raise ParseError("Transfer-Encoding in a forwarded request")
    if len(cls) > 1:
        raise ParseError("%d Content-Length headers: %r" % (len(cls), cls))
    n = 0
    if cls:
        if not re.match(r"^[0-9]{1,12}$", cls[0]):
            raise ParseError("bad Content-Length %r" % cls[0])
        n = int(cls[0])
    if len(buf) < end + 4 + n:
        return None
    body = bytes(buf[end + 4:end + 4 + n])
    return (m.group(1).decode("latin-1"), m.group(2).decode("latin-1"), headers, body,
            end + 4 + n)


def response(status, body=b"", headers=(), reason=None):
    """The bytes of an HTTP/1.1 response with a correct Content-Length."""
    if isinstance(body, str):
        body = body.encode()
    reason = reason or {200: "OK", 201: "Created", 400: "Bad Request",
                        500: "Internal Server Error", 502: "Bad Gateway",
                        503: "Service Unavailable"}.get(status, "Status")
    out = b"HTTP/1.1 %d %s\r\n" % (status, reason.encode())
    for k, v in headers:
        out += k.encode("latin-1") + b": " + v.encode("latin-1") + b"\r\n"
    out += b"Content-Length: %d\r\n\r\n" % len(body)
    return out + body


class Conn:
    def __init__(self, cid, sock, peer):
        self.id = cid
        self.sock = sock
        self.peer = peer
        self.data = bytearray()     # every byte received, in order
        self.parsed = 0             # how many of them make up whole requests
        self.requests = []
        self.error = None           # the parse error, if any
        self.error_at = None        # when it was found (time.monotonic())
        self.last_data_at = None    # when the last bytes came
        self.eof = False            # idemd closed (or reset) the connection
        self.opened = time.monotonic()
        self.closed_at = None

    def leftover(self):
        return bytes(self.data[self.parsed:])


class RawUpstream:
    def __init__(self):
        self.lock = threading.Lock()
        self.conns = []
        self.seq = 0
        self.modes = {"ok": self._ok}
        self._stop = threading.Event()
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(128)
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self._threads = []
        t = threading.Thread(target=self._accept, daemon=True)
        t.start()
        self._threads.append(t)

    # ---- answers

    def _ok(self, req):
        doc = {"seq": req.seq, "conn": req.conn_id, "key": req.header("idempotency-key"),
               "subject": req.header("idempotency-subject"), "cookie": req.header("cookie"),
               "body": req.body.decode("latin-1")}
        return response(201, json.dumps(doc), [("Content-Type", "application/json")])

    # ---- serving

    def _accept(self):
        while not self._stop.is_set():
            try:
                s, peer = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self.lock:
                c = Conn(len(self.conns) + 1, s, peer)
                self.conns.append(c)
            t = threading.Thread(target=self._serve, args=(c,), daemon=True)
            t.start()
            self._threads.append(t)

    def _serve(self, c):
        s = c.sock
        s.settimeout(0.2)
        try:
            while not self._stop.is_set():
                try:
                    d = s.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    d = b""
                if not d:
                    with self.lock:
                        c.eof = True
                        c.closed_at = time.monotonic()
                    return
                answers = []
                with self.lock:
                    c.data += d
                    c.last_data_at = time.monotonic()
                    while c.error is None:
                        try:
                            got = parse_request(bytes(c.data[c.parsed:]))
                        except ParseError as e:
                            c.error = str(e)
                            c.error_at = time.monotonic()
                            break
                        if got is None:
                            break
                        method, target, headers, body, used = got
                        self.seq += 1
                        req = Request(c.id, self.seq, method, target, headers, body,
                                      bytes(c.data[c.parsed:c.parsed + used]))
                        c.parsed += used
                        c.requests.append(req)
                        answers.append(req)
                    broken = c.error is not None
                for req in answers:
                    mode = self.modes.get(req.header("x-raw-mode") or "ok", self._ok)
                    out = mode(req)
                    if out:
                        try:
                            s.sendall(out)
                        except OSError:
                            pass
                if broken:
                    try:
                        s.sendall(response(400, b"strict upstream: bad request",
                                           [("Connection", "close")]))
                    except OSError:
                        pass
                    return
        finally:
            try:
                s.close()
            except OSError:
                pass

    # ---- what arrived

    def mark(self):
        """A point in time (request count, clock) for since(), errors() and
        leftovers()."""
        with self.lock:
            return (self.seq, time.monotonic())

    def requests(self, key=None):
        with self.lock:
            out = [r for c in self.conns for r in c.requests]
        out.sort(key=lambda r: r.seq)
        return [r for r in out if key is None or r.header("idempotency-key") == key]

    def since(self, mark):
        return [r for r in self.requests() if r.seq > mark[0]]

    def conn(self, cid):
        with self.lock:
            return self.conns[cid - 1]

    def errors(self, mark=None):
        """[(conn id, parse error)] over every connection (since MARK)."""
        with self.lock:
            return [(c.id, c.error) for c in self.conns if c.error is not None and
                    (mark is None or c.error_at > mark[1])]

    def leftovers(self, mark=None):
        """{conn id: bytes received that do not (yet) make a whole request},
        over connections that received bytes (since MARK)."""
        with self.lock:
            return {c.id: c.leftover() for c in self.conns if c.parsed < len(c.data) and
                    (mark is None or c.last_data_at > mark[1])}

    def all_bytes(self):
        with self.lock:
            return b"".join(bytes(c.data) for c in self.conns)

    def wait_eof(self, cid, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.conn(cid).eof:
                return True
            time.sleep(0.02)
        return self.conn(cid).eof

    def stop(self):
        self._stop.set()
        try:
            self.listener.close()
        except OSError:
            pass
        with self.lock:
            conns = list(self.conns)
        for c in conns:
            try:
                c.sock.close()
            except OSError:
                pass
        for t in self._threads:
            t.join(2)
