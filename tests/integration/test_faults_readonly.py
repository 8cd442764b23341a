"""Fault test: the database idemd's pooled connections reach turns
read-only, the way a demoted primary or a standby does after a failover.

Every session of the test database is made read-only for new sessions
(ALTER DATABASE ... SET default_transaction_read_only) and idemd's sessions
are terminated (SQLSTATE 57P01, as at a switchover), so that the pool
reconnects onto read-only sessions. Then: claims answer 503 `unavailable`
with Retry-After, /readyz answers 503, and nothing is half-written. Once the
database is writable again, idemd recovers on its own: a statement that
failed with 25006 (read_only_sql_transaction) dropped its connection, so the
pool's next connection is a writable one. Without that drop the pool would
keep its read-only sessions and fail forever."""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (IdemdCase, assert_problem, assert_retry_after, assert_status,  # noqa: E402
                     psql, uniq)

RECOVER_DEADLINE = 8.0


class ReadOnlyDatabase(IdemdCase):
    extra_config = {"pool_size": 3, "threads": 4}

    def terminate_idemd_sessions(self):
        psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
             "WHERE datname = '%s' AND application_name = 'idemd'" % self.idemd.db)

    def set_read_only(self, on):
        if on:
            psql('ALTER DATABASE "%s" SET default_transaction_read_only = on' % self.idemd.db)
        else:
            psql('ALTER DATABASE "%s" RESET default_transaction_read_only' % self.idemd.db)

    def records_of(self, op):
        return int(psql("SELECT count(*) FROM records r JOIN operations o ON o.id = r.operation_id "
                        "WHERE o.name = '%s'" % op, db=self.idemd.db).strip() or 0)

    def test_read_only_then_writable_again(self):
        op = self.put_operation(lease_seconds=30)
        # warm every pooled connection (prepared statements, a session each)
        for _ in range(4):
            t = self.issue(op)
            self.claim_ok(t)
        before = self.records_of(op)
        tokens = [self.issue(op) for _ in range(6)]

        self.set_read_only(True)
        try:
            self.terminate_idemd_sessions()
            # every answer while the sessions are read-only: 503 unavailable
            # with Retry-After, never a 2xx and never a 500
            deadline = time.monotonic() + 3.0
            seen = 0
            while time.monotonic() < deadline:
                for t in tokens:
                    r = self.claim(t)
                    assert_problem(self, r, 503, "unavailable")
                    assert_retry_after(self, r)
                    seen += 1
                r = self.anon.get("/readyz")
                self.assertEqual(r.status, 503, "readyz on a read-only database" + r.describe())
            self.assertGreater(seen, 0)
            # nothing half-written: no record for any refused claim
            self.assertEqual(self.records_of(op), before)
        finally:
            self.set_read_only(False)

        # writable again, without terminating anything: the pool must have
        # dropped the read-only sessions by itself
        deadline = time.monotonic() + RECOVER_DEADLINE
        first_ok = None
        while time.monotonic() < deadline:
            r = self.claim(tokens[0])
            if r.status == 201:
                first_ok = r
                break
            assert_problem(self, r, 503, "unavailable")
            time.sleep(0.1)
        self.assertIsNotNone(first_ok, "idemd did not recover within %.0f s after the database "
                             "became writable again (read-only sessions kept in the pool?)"
                             % RECOVER_DEADLINE)
        # each refused claim left nothing behind: attempt 1, not a takeover
        # and not 409 in progress
        self.assertEqual(first_ok.json.get("attempt"), 1, first_ok.describe())
        for t in tokens[1:]:
            j = self.claim_ok(t)
            self.assertEqual(j["attempt"], 1)
        for t in tokens:
            r = self.complete(t, 1, status=201, body={"ok": True})
            assert_status(self, r, 200)
        r = self.anon.get("/readyz")
        assert_status(self, r, 200)
        logs = self.server.stderr_text()
        self.assertIn("dropping the connection", logs)

    def test_version_bump_refused_on_read_only(self):
        key = "orders:" + uniq("u")
        r = self.client.post("/v1/versions/" + key, headers={"If-Match": '"0"'})
        assert_status(self, r, 200)
        self.set_read_only(True)
        try:
            self.terminate_idemd_sessions()
            for _ in range(5):
                r = self.client.post("/v1/versions/" + key, headers={"If-Match": '"1"'})
                assert_problem(self, r, 503, "unavailable")
                assert_retry_after(self, r)
        finally:
            self.set_read_only(False)
        deadline = time.monotonic() + RECOVER_DEADLINE
        r = None
        while time.monotonic() < deadline:
            r = self.client.post("/v1/versions/" + key, headers={"If-Match": '"1"'})
            if r.status != 503:
                break
            time.sleep(0.1)
        # the refused bumps left the counter where it was
        assert_status(self, r, 200)
        self.assertEqual(r.json.get("version"), 2, r.describe())


if __name__ == "__main__":
    harness.main()
