"""Integration test: a PostgreSQL restart under a running idemd (503
unavailable while down, readiness, recovery without restarting idemd,
nothing half-written, nothing acknowledged lost).

This test stops the shared PostgreSQL cluster: it must not run in parallel
with the other integration tests. It restores the cluster in all cases."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (PGCTL, PGDATA, IdemdCase, assert_problem, assert_retry_after,  # noqa: E402
                     assert_status, pg_ctl, uniq)

DOWN_DEADLINE = 2.0   # each request answers within this while the database is down
UP_DEADLINE = 10.0    # service recovers within this after the database is back


class DatabaseRestart(IdemdCase):
    def start_pg(self):
        p = pg_ctl("start", "-w", "-D", PGDATA, "-l", os.path.join(PGDATA, "restart.log"))
        if p.returncode != 0:
            raise AssertionError("pg_ctl start failed (%d): %s %s"
                                 % (p.returncode, p.stdout, p.stderr))

    def test_database_restart(self):
        if not PGDATA or not PGCTL:
            self.skipTest("IDEMD_TEST_PGDATA / IDEMD_TEST_PGCTL not set")
        op = self.put_operation()
        vkey = uniq("orders") + ":u1"
        t_outage = self.issue(op)
        t_done = self.issue(op)
        self.claim_ok(t_done, {"fingerprint": "d"})
        r = self.complete(t_done, 1, 201, {"Location": "/o/1"}, {"id": 1})
        assert_status(self, r, 200)
        done_response = r.json["response"]

        stopped = False
        try:
            p = pg_ctl("stop", "-m", "fast", "-D", PGDATA)
            self.assertEqual(p.returncode, 0, "pg_ctl stop: %s %s" % (p.stdout, p.stderr))
            stopped = True

            down = [
                ("claim", lambda: self.claim(t_outage, {"fingerprint": "o"})),
                ("get version", lambda: self.client.get("/v1/versions/" + vkey)),
                ("bump version", lambda: self.client.post("/v1/versions/" + vkey,
                                                          headers={"If-Match": '"0"'})),
                ("introspect", lambda: self.introspect(t_done)),
                ("replay", lambda: self.claim(t_done, {"fingerprint": "d"})),
                ("put operation", lambda: self.client.put("/v1/operations/" + uniq("down"),
                                                          harness.DEFAULT_POLICY)),
                ("claim again", lambda: self.claim(t_outage, {"fingerprint": "o"})),
            ]
            for what, fn in down:
                with self.subTest(request=what):
                    t0 = time.monotonic()
                    r = fn()
                    took = time.monotonic() - t0
                    print("\n  db down: %s -> %d in %.3fs" % (what, r.status, took), end="")
                    self.assertLess(took, DOWN_DEADLINE, "%s took %.2fs" % (what, took) + r.describe())
                    if what == "replay":
                        # a completed response never changes: the instance
                        # that stored it answers its duplicates from memory
                        assert_status(self, r, 200)
                        self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
                        self.assertEqual(r.json["response"], done_response, r.describe())
                        continue
                    assert_problem(self, r, 503, "unavailable")
                    assert_retry_after(self, r)

            t0 = time.monotonic()
            r = self.anon.get("/readyz")
            self.assertLess(time.monotonic() - t0, DOWN_DEADLINE, r.describe())
            self.assertEqual(r.status, 503, r.describe())
            assert_status(self, self.anon.get("/healthz"), 200)
        finally:
            if stopped:
                self.start_pg()

        t0 = time.monotonic()
        last = None
        while time.monotonic() - t0 < UP_DEADLINE:
            last = self.client.get("/v1/versions/" + vkey)
            if last.status == 200:
                break
            time.sleep(0.2)
        print("\n  recovered after %.2fs" % (time.monotonic() - t0))
        self.assertEqual(last.status, 200, "not recovered within %.0fs" % UP_DEADLINE
                         + last.describe())
        self.assertEqual(last.json["version"], 0, "a bump answered 503 was applied")
        r = self.anon.get("/readyz")
        assert_status(self, r, 200)
        # nothing half-written: the claim that got 503 never happened
        j = assert_status(self, self.introspect(t_outage), 200)
        self.assertEqual(j["state"], "issued", "503'd claim left a record")
        self.claim_ok(t_outage, {"fingerprint": "o"}, attempt=1)
        # nothing acknowledged lost
        r = self.claim(t_done, {"fingerprint": "d"})
        j = assert_status(self, r, 200)
        self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
        self.assertEqual(j["response"]["body"], {"id": 1}, r.describe())
        # every pooled connection works again (more requests than the pool size)
        for _ in range(12):
            assert_status(self, self.client.get("/v1/versions/" + vkey), 200)


if __name__ == "__main__":
    harness.main()
