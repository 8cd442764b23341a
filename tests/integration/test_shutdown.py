"""Integration tests: graceful shutdown on SIGTERM (exit 0, port closed,
in-flight request finished, idle keep-alive connections do not hold it up,
a clean stop under keep-alive load), and SIGHUP, which reloads and never
stops."""

import http.client
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Client, assert_status, port_open, psql  # noqa: E402


class Shutdown(harness.MigratedCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.key = cls.idemd.tenant_create("shut")

    def setUp(self):
        self.srv = self.idemd.start()
        self.c = self.srv.client(self.key)

    def tearDown(self):
        self.srv.kill()

    def wait_exit(self, timeout):
        t0 = time.monotonic()
        try:
            rc = self.srv.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.fail("idemd still running %.0fs after SIGTERM" % timeout)
        return rc, time.monotonic() - t0

    def test_sigterm_exits_0_and_closes_port(self):
        assert_status(self, self.c.get("/v1/operations"), 200)
        self.srv.proc.send_signal(signal.SIGTERM)
        rc, took = self.wait_exit(5)
        print("\n  exited %d after %.3fs" % (rc, took))
        self.assertEqual(rc, 0, self.srv.stderr_text()[-2000:])
        self.assertFalse(port_open(self.srv.port), "port still open after exit")

    def test_sighup_reloads_and_does_not_stop(self):
        assert_status(self, self.c.get("/healthz"), 200)
        self.srv.proc.send_signal(signal.SIGHUP)
        time.sleep(0.3)
        self.assertIsNone(self.srv.proc.poll(), "SIGHUP ended idemd")
        assert_status(self, self.c.get("/healthz"), 200)
        # SIGHUP reloads the config file (test_reload); it never stops idemd
        self.assertIn("serve: reloaded", self.srv.stderr_text())
        # the duration histogram counts every request, answered or not (one
        # series per route and status class)
        text = self.c.get("/metrics").body.decode()
        count = [ln for ln in text.splitlines()
                 if ln.startswith("idemd_http_request_duration_seconds_count{")]
        self.assertTrue(count, text)
        self.assertGreaterEqual(sum(int(ln.rsplit(" ", 1)[1]) for ln in count), 2)
        self.srv.proc.send_signal(signal.SIGTERM)
        rc, _ = self.wait_exit(5)
        self.assertEqual(rc, 0, self.srv.stderr_text()[-2000:])

    def test_reload_line_is_written_at_log_level_warn(self):
        # the operator who sent SIGHUP must see that it took effect, whatever
        # the level (docs/operations.md, "Reloading the configuration")
        self.srv.kill()
        self.idemd.write_config(log_level="warn")
        try:
            self.srv = self.idemd.start()
            self.srv.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 5
            while "serve: reloaded" not in self.srv.stderr_text() \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            self.assertIn("serve: reloaded", self.srv.stderr_text())
            self.assertNotIn('"level":"info","msg":"gateway', self.srv.stderr_text())
        finally:
            self.srv.kill()
            self.idemd.write_config()
            self.srv = self.idemd.start()

    def test_idle_keepalive_connection_does_not_block_shutdown(self):
        conn = http.client.HTTPConnection("127.0.0.1", self.srv.port, timeout=10)
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        r.read()
        self.assertEqual(r.status, 200)
        try:
            self.srv.proc.send_signal(signal.SIGTERM)
            rc, took = self.wait_exit(5)
            print("\n  exited %d after %.3fs with an idle keep-alive connection" % (rc, took))
            self.assertEqual(rc, 0, self.srv.stderr_text()[-2000:])
        finally:
            conn.close()

    def test_stop_under_keepalive_claim_traffic(self):
        # keep-alive clients claim, complete and replay caller keys while
        # SIGTERM arrives, again and again: every stop exits 0, no request
        # hangs (each is answered or its connection closed), no sanitizer
        # report, and the replay counts reached the database
        rounds = int(os.environ.get("IDEMD_STOP_ROUNDS", "4"))
        op = "stop.op"
        r = self.c.put("/v1/operations/" + op, dict(harness.DEFAULT_POLICY, lease_seconds=5))
        self.assertIn(r.status, (200, 201), r.describe())
        answered = closed = 0
        replayed_key = "replayed-" + str(time.time())
        p = "/v1/operations/%s/keys/%s" % (op, replayed_key)
        assert_status(self, self.c.post(p + "/claim", {}), 201)
        assert_status(self, self.c.post(p + "/complete", {"attempt": 1, "status": 200}), 200)
        replays = 0
        for rnd in range(rounds):
            if rnd > 0:
                self.srv = self.idemd.start()
            stop = threading.Event()
            counts = {"answered": 0, "closed": 0, "hung": 0, "replays": 0}
            lock = threading.Lock()

            def worker(n, port=self.srv.port):
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
                i = 0
                hdr = {"Authorization": "Bearer " + self.key,
                       "Content-Type": "application/json"}
                while not stop.is_set():
                    i += 1
                    path = ("/v1/operations/%s/keys/%s/claim" % (op, replayed_key)
                            if i % 3 == 0 else
                            "/v1/operations/%s/keys/k-%d-%d-%d/claim" % (op, rnd, n, i))
                    try:
                        conn.request("POST", path, body="{}", headers=hdr)
                        r = conn.getresponse()
                        r.read()
                        with lock:
                            counts["answered"] += 1
                            counts["replays"] += r.status == 200
                    except socket.timeout:
                        with lock:
                            counts["hung"] += 1
                        return
                    except (OSError, http.client.HTTPException):
                        with lock:
                            counts["closed"] += 1
                        conn.close()
                        if stop.is_set() or self.srv.proc.poll() is not None:
                            return
                        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            ts = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
            for t in ts:
                t.start()
            time.sleep(0.6)
            self.srv.proc.send_signal(signal.SIGTERM)
            rc, took = self.wait_exit(35)
            stop.set()
            for t in ts:
                t.join(15)
            err = self.srv.stderr_text()
            self.assertEqual(rc, 0, err[-3000:])
            for bad in ("Sanitizer", "still suspended", "runtime error"):
                self.assertFalse(bad in err, "round %d: %r in the log:\n%s"
                                 % (rnd, bad, err[max(0, err.find(bad) - 1500):][:3000]))
            self.assertEqual(counts["hung"], 0, "a request got neither an answer nor a close")
            answered += counts["answered"]
            closed += counts["closed"]
            replays += counts["replays"]
        print("\n  %d stops under load: %d answers, %d closed connections, %d replays"
              % (rounds, answered, closed, replays), end="")
        # every replay answered before the stops was counted in the database
        got = int(psql("SELECT replays FROM records WHERE state = 'completed' AND replays > 0 "
                       "ORDER BY replays DESC LIMIT 1", db=self.idemd.db).strip() or 0)
        self.assertEqual(got, replays, "replay counts lost at a stop")

    def test_in_flight_request_completes(self):
        op = "shut.op"
        r = self.c.put("/v1/operations/" + op, harness.DEFAULT_POLICY)
        self.assertIn(r.status, (200, 201), r.describe())
        tok = assert_status(self, self.c.post("/v1/tokens", {"operation": op, "subject": "u"}),
                            201)["token"]
        # Hold a lock on the records table so the claim blocks inside the database.
        locker = subprocess.Popen([harness.PSQL, "-X", "-q", "-v", "ON_ERROR_STOP=1",
                                   "-d", self.idemd.db], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  env=harness.pg_env(), text=True)
        try:
            locker.stdin.write("BEGIN;\nLOCK TABLE records IN ACCESS EXCLUSIVE MODE;\n")
            locker.stdin.flush()
            q = ("SELECT count(*) FROM pg_locks WHERE relation = 'records'::regclass "
                 "AND granted = %s")
            self.assertTrue(self.poll(lambda: psql(q % "true", db=self.idemd.db).strip() != "0"),
                            "could not lock records")
            result = {}

            def do_claim():
                try:
                    result["r"] = Client(self.srv.port, self.key, timeout=30).post(
                        "/v1/tokens/%s/claim" % tok, {})
                except Exception as e:
                    result["e"] = e

            t = threading.Thread(target=do_claim)
            t.start()
            self.assertTrue(self.poll(lambda: psql(q % "false", db=self.idemd.db).strip() != "0"),
                            "the claim never reached the database")
            self.srv.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
            self.assertIsNone(self.srv.proc.poll(),
                              "idemd exited while a request was in flight")
            locker.stdin.write("COMMIT;\n")
            locker.stdin.close()
            t.join(15)
            self.assertNotIn("e", result, "in-flight request failed: %r" % result.get("e"))
            r = result["r"]
            j = assert_status(self, r, 201)
            self.assertEqual(j["attempt"], 1)
            rc, took = self.wait_exit(10)
            self.assertEqual(rc, 0, self.srv.stderr_text()[-2000:])
            self.assertFalse(port_open(self.srv.port))
        finally:
            if locker.poll() is None:
                try:
                    locker.stdin.close()
                except (OSError, ValueError):
                    pass
                locker.kill()
            locker.wait()

    @staticmethod
    def poll(cond, timeout=5.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond():
                return True
            time.sleep(0.05)
        return False


if __name__ == "__main__":
    harness.main()
