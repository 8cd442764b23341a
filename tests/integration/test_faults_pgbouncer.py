"""Fault test (d): two idemd processes behind pgbouncer in transaction
pooling mode ("prepared_statements": false), with fewer server connections
than idemd holds, so that consecutive transactions of one idemd connection
land on different PostgreSQL sessions. The duplicate storm and the
concurrency guarantees still hold.

`idemd migrate` connects to PostgreSQL directly (it holds a session advisory
lock); serving goes through pgbouncer. Needs Debian's pgbouncer: without it
this test FAILS (it is not skipped)."""

import base64
import os
import threading
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Client, IdemdCase, assert_status, free_port, psql  # noqa: E402
import faultkit  # noqa: E402
from faultkit import status_figures as figures, storm  # noqa: E402

SERVER_POOL = 4        # pgbouncer's server connections for the database
IDEMD_POOL = 8         # each idemd's connections to pgbouncer


class BehindPgBouncer(IdemdCase):
    start_server = False

    @classmethod
    def setUpClass(cls):
        cls.bouncer = cls.stop_after_class(faultkit.PgBouncer(pool_size=SERVER_POOL))  # or fails
        cls.bouncer.start()
        super().setUpClass()   # migrate and tenants: directly to PostgreSQL
        try:
            cls.idemd.write_config(database_url=cls.bouncer.conninfo(cls.idemd.db),
                                   prepared_statements=False, pool_size=IDEMD_POOL, threads=8,
                                   sweep_interval_seconds=1)
            cls.server = cls.idemd.start()
            cls.server2 = cls.idemd.start(port=free_port())
            cls.client = Client(cls.server.port, cls.api_key)
            cls.anon = Client(cls.server.port)
            cls.clients = [Client(s.port, cls.api_key, timeout=60)
                           for s in (cls.server, cls.server2)]
        except BaseException:
            cls.idemd.cleanup()
            raise

    def pools(self):
        rows = self.bouncer.show("POOLS")
        return [r for r in rows if len(r) > 1 and r[0] == self.idemd.db]

    def test_1_served_through_pgbouncer(self):
        # idemd's connections are pgbouncer clients; the server side is shared
        assert_status(self, self.anon.get("/readyz"), 200)
        clients = [r for r in self.bouncer.show("CLIENTS") if len(r) > 3 and r[2] == self.idemd.db]
        print("\n  pgbouncer: %d client connections from 2 idemd (pool_size %d each), server "
              "pool %d, pool_mode transaction" % (len(clients), IDEMD_POOL, SERVER_POOL))
        self.assertGreaterEqual(len(clients), 2 * IDEMD_POOL)
        apps = psql("SELECT count(*) FROM pg_stat_activity WHERE datname = '%s'"
                    % self.idemd.db).strip()
        self.assertLessEqual(int(apps), SERVER_POOL, "more server connections than the pool")

    def test_2_duplicate_storm(self):
        op = self.put_operation()
        faultkit.duplicate_storm(self, [self.server.port, self.server2.port], self.api_key, op,
                                 n_tokens=100, n_submits=2000, n_workers=64,
                                 label="storm (pgbouncer)")
        rows = psql("SELECT state, attempt, count(*) FROM records r JOIN operations o "
                    "ON o.id = r.operation_id WHERE o.name = '%s' GROUP BY 1, 2" % op,
                    db=self.idemd.db).split()
        self.assertEqual(rows, ["completed|1|100"])
        print("  pgbouncer pools after the storm: %s" % self.pools())

    def test_3_concurrent_claims_one_winner(self):
        op = self.put_operation()
        tok = self.issue(op)
        path = "/v1/tokens/%s/claim" % tok
        results, elapsed = storm(200, lambda i: self.clients[i % 2].post(path, {"request": 1}))
        fig = figures(results)
        print("\n  pgbouncer: 200 concurrent claims of one token: %s in %.3fs" % (fig, elapsed))
        self.assertEqual(fig.get("201", 0), 1, fig)
        self.assertEqual(fig.get("409 request_in_progress", 0), 199, fig)

    def test_4_concurrent_takeover_one_winner(self):
        op = self.put_operation(lease_seconds=1)
        tok = self.issue(op)
        self.claim_ok(tok)
        time.sleep(1.2)
        path = "/v1/tokens/%s/claim" % tok
        results, elapsed = storm(100, lambda i: self.clients[i % 2].post(path, {}))
        fig = figures(results)
        print("\n  pgbouncer: 100 concurrent takeovers of an expired lease: %s in %.3fs"
              % (fig, elapsed))
        winners = [r for r in results if not isinstance(r, Exception) and r.status == 201]
        self.assertEqual(len(winners), 1, fig)
        self.assertEqual(winners[0].json["attempt"], 2)
        self.assertEqual(fig.get("409 request_in_progress", 0), 99, fig)
        # the dead attempt is fenced off
        r = self.complete(tok, 1, 200, body={"late": True})
        self.assertEqual((r.status, (r.json or {}).get("code")), (409, "lease_lost"), r.describe())

    def test_5_concurrent_version_guards(self):
        prefix = harness.uniq("seat")
        op = self.put_operation(version_key=prefix + ":{subject}")
        subj = harness.uniq("u")
        toks = assert_status(self, self.issue_resp(op, subj, count=40), 201)["tokens"]
        results, elapsed = storm(len(toks), lambda i: self.clients[i % 2].post(
            "/v1/tokens/%s/claim" % toks[i]["token"], {}))
        fig = figures(results)
        print("\n  pgbouncer: 40 tokens at one version, concurrent claims: %s in %.3fs"
              % (fig, elapsed))
        self.assertEqual(fig.get("201", 0), 1, fig)
        self.assertEqual(fig.get("412 version_mismatch", 0), 39, fig)
        self.assertEqual(self.version("%s:%s" % (prefix, subj)), 1)
        key = harness.uniq("stock") + ":sku"
        results, elapsed = storm(50, lambda i: self.clients[i % 2].post(
            "/v1/versions/" + key, headers={"If-Match": '"0"'}))
        fig = figures(results)
        print("  pgbouncer: 50 concurrent bumps with If-Match \"0\": %s in %.3fs" % (fig, elapsed))
        self.assertEqual(fig.get("200", 0), 1, fig)
        self.assertEqual(fig.get("412 version_mismatch", 0), 49, fig)

    def test_6_key_rotation_and_sweep_through_pgbouncer(self):
        """The janitor's work (picking up a rotated key, sweeping expired
        records under a transaction-scoped advisory lock) runs through
        transaction pooling too."""
        op = self.put_operation(token_ttl_seconds=1, retention_seconds=1)
        tok = self.issue(op)
        self.claim_ok(tok)
        assert_status(self, self.complete(tok, 1, 200, body={"x": 1}), 200)
        kid = self.idemd.keys_rotate()
        deadline = time.monotonic() + 10
        seen = swept = False
        while time.monotonic() < deadline and not (seen and swept):
            seen = all(key_id(self.issue(op, client=c)) == kid for c in self.clients)
            swept = psql("SELECT count(*) FROM records WHERE state <> 'expired' AND operation_id = "
                         "(SELECT id FROM operations WHERE name = '%s')" % op,
                         db=self.idemd.db).strip() == "0"
            time.sleep(0.25)
        print("\n  pgbouncer: rotated key %d in use by both instances: %s; expired record "
              "swept: %s" % (kid, seen, swept))
        self.assertTrue(seen, "a rotated key was not picked up within 10 s")
        self.assertTrue(swept, "an expired record was not swept within 10 s")
        log = self.server.stderr_text() + self.server2.stderr_text()
        for bad in ("prepared statement", "does not exist", "current transaction is aborted",
                    '"level":"error"'):
            self.assertNotIn(bad, log, "an error in the logs")

    def test_7_waiting_duplicates_behind_pgbouncer(self):
        """LISTEN through transaction pooling is accepted but never delivers:
        with prepared_statements false and no listen_database_url, idemd
        re-checks waiters instead, so a waiting duplicate still gets the
        replay soon after the completion, not after its deadline."""
        op = self.put_operation(lease_seconds=30)
        key = harness.uniq("w")
        url = "/v1/operations/%s/keys/%s/" % (op, key)
        assert_status(self, self.clients[0].post(url + "claim", {}), 201)
        box = {}

        def wait():
            box["r"] = self.clients[1].post(url + "claim", {}, headers={"Prefer": "wait=10"})

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(1.5)
        t0 = time.monotonic()
        assert_status(self, self.clients[0].post(url + "complete",
                                                 {"attempt": 1, "status": 200}), 200)
        t.join(15)
        took = time.monotonic() - t0
        self.assertEqual(box["r"].status, 200, box["r"].describe())
        self.assertLess(took, 2.0, "the waiter was answered %.1f s after the completion" % took)
        self.assertIn("no listen_database_url is set", self.server2.stderr_text())


    def test_8_cli_through_pgbouncer(self):
        # the CLI uses the config's database_url (pgbouncer) and must not
        # prepare statements there either
        for _ in range(3):
            self.assertTrue(self.idemd.tenant_create(harness.uniq("cli")))

def key_id(token):
    """The signing key id a token was made with (bytes 2..5, little-endian)."""
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    return int.from_bytes(raw[2:6], "little")


class PgBouncerPresent(unittest.TestCase):
    def test_pgbouncer_installed(self):
        self.assertTrue(os.access(faultkit.PGBOUNCER, os.X_OK), faultkit.PGBOUNCER_MISSING)


if __name__ == "__main__":
    harness.main()
