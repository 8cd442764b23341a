"""Integration tests: starting up (issue 32's start-up items). `serve` waits
for a database that is not there yet (one log line every few seconds, not
one per pooled connection), gives up after database_wait_seconds, and a
master key file that cannot be used is a configuration error (exit 2).

The database "comes up" as a TCP port that starts forwarding to the test
cluster's unix socket a little after idemd started."""

import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import MigratedCase, free_port  # noqa: E402


class LateDatabase:
    """A TCP port that, once opened, forwards every connection to the
    cluster's unix socket."""

    def __init__(self):
        self.port = free_port()
        self.sock = None
        self.stop = threading.Event()

    def open(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", self.port))
        self.sock.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        path = os.path.join(harness.PGHOST, ".s.PGSQL.5432")
        while not self.stop.is_set():
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            u = socket.socket(socket.AF_UNIX)
            u.connect(path)
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.stop.set()
        if self.sock is not None:
            self.sock.close()


class Startup(MigratedCase):
    def late_config(self, late, wait):
        cfg = dict(database_url="host=127.0.0.1 port=%d dbname=%s user=%s"
                   % (late.port, self.idemd.db, harness.PGUSER),
                   database_wait_seconds=wait)
        return self.idemd.write_config(**cfg)

    def test_waits_for_a_database_that_comes_up(self):
        late = LateDatabase()
        try:
            self.late_config(late, 30)
            srv = self.idemd.start(wait=False)
            time.sleep(2.5)
            self.assertIsNone(srv.proc.poll(), "serve gave up at once:\n" + srv.stderr_text())
            late.open()
            srv.wait_ready(15)
            log = srv.stderr_text()
            self.assertIn("waiting for the database", log)
            self.assertIn("the database answered after", log)
            # one line every few seconds, not one per connection and try
            self.assertLessEqual(log.count("waiting for the database"), 2, log)
            self.assertEqual(log.count("cannot connect"), 0, log)
            self.assertEqual(srv.stop(), 0)
        finally:
            late.close()
            self.idemd.write_config()

    def test_gives_up_after_database_wait_seconds(self):
        late = LateDatabase()   # never opened
        try:
            self.late_config(late, 2)
            t0 = time.monotonic()
            srv = self.idemd.start(wait=False)
            rc = srv.proc.wait(20)
            took = time.monotonic() - t0
            log = srv.stderr_text()
            self.assertEqual(rc, 1, log)
            self.assertGreaterEqual(took, 2.0)
            self.assertLess(took, 8.0)
            self.assertIn("could not be reached in 2 s", log)
            self.assertEqual(log.count("cannot connect"), 0, log)
        finally:
            self.idemd.write_config()

    def test_unusable_master_key_is_a_configuration_error(self):
        key = self.idemd.master_key_file
        os.chmod(key, 0o644)
        try:
            p = self.idemd.run("serve", timeout=20)
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("chmod 600", p.stderr)
        finally:
            os.chmod(key, 0o600)


if __name__ == "__main__":
    harness.main()
