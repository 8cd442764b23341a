"""A raw HTTP/1.1 client for the tests that send what no library would: a
request written byte for byte on a new connection, the answers read back
and split by their Content-Length."""
import json
import re
import socket
import time


class RawResponse:
    def __init__(self, status, headers, body, raw_head):
        self.status = status
        self.headers = headers      # lower-cased name -> [values]
        self.body = body
        self.raw_head = raw_head

    def header(self, name):
        v = self.headers.get(name.lower())
        return None if not v else ", ".join(v)

    def __iter__(self):
        """(status, {lower-cased name: its values joined}, body)."""
        return iter((self.status, {k: ", ".join(v) for k, v in self.headers.items()}, self.body))

    def __getitem__(self, i):
        return tuple(self)[i]

    @property
    def json(self):
        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None

    def __repr__(self):
        return "<%d %r %r>" % (self.status, self.raw_head[:400], self.body[:300])


def parse_responses(data):
    """Splits raw bytes into [RawResponse] (Content-Length framing only)."""
    out = []
    while data:
        head, sep, rest = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode("latin-1").split("\r\n")
        m = re.match(r"HTTP/1\.[01] (\d{3})", lines[0])
        if not m:
            break
        hdrs = {}
        for ln in lines[1:]:
            k, _, v = ln.partition(":")
            hdrs.setdefault(k.strip().lower(), []).append(v.strip())
        n = int((hdrs.get("content-length") or ["0"])[0] or 0)
        if len(rest) < n:
            break
        out.append(RawResponse(int(m.group(1)), hdrs, rest[:n], head))
        data = rest[n:]
    return out


def exchange(port, data, wait=2.0, all_of_it=False, timeout=5.0):
    """Sends DATA on a new connection; reads until the server closes, WAIT
    seconds pass, or (unless ALL_OF_IT) one whole response has come.
    Returns (responses, closed, raw, seconds to the first response)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        t0 = time.monotonic()
        try:
            s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        s.settimeout(0.05)
        raw, closed, first = b"", False, None
        while time.monotonic() - t0 < wait:
            try:
                d = s.recv(65536)
            except socket.timeout:
                continue
            except OSError:
                closed = True
                break
            if not d:
                closed = True
                break
            raw += d
            rs = parse_responses(raw)
            if rs and first is None:
                first = time.monotonic() - t0
            if rs and not all_of_it:
                break
    return parse_responses(raw), closed, raw, first
