"""Several idemd processes on one database: a revocation made through one is
enforced by the other, a key rotation reaches running processes without a
restart, and the janitor's sweep removes expired records (one instance at a
time)."""
import base64
import os
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Idemd, assert_problem, assert_status, psql, uniq  # noqa: E402


def token_key_id(token):
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    return struct.unpack_from("<I", raw, 2)[0]


class Instances(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.idemd = Idemd({"sweep_interval_seconds": 1})
        try:
            cls.idemd.migrate()
            cls.key = cls.idemd.tenant_create("multi")
            cls.a = cls.idemd.start()
            cls.b = cls.idemd.start(port=harness.free_port())
            cls.ca = cls.a.client(cls.key)
            cls.cb = cls.b.client(cls.key)
            cls.op = uniq("multi")
            assert_status(unittest.TestCase(), cls.ca.put("/v1/operations/" + cls.op,
                                                         harness.DEFAULT_POLICY), 201)
        except BaseException:
            cls.idemd.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        harness.shut_down(cls.idemd)

    def issue(self, client, **kw):
        body = {"operation": self.op, "subject": "u-1"}
        body.update(kw)
        return assert_status(self, client.post("/v1/tokens", body), 201)["token"]

    def test_revocation_through_one_is_enforced_by_the_other(self):
        tok = self.issue(self.ca)
        assert_status(self, self.ca.delete("/v1/tokens/" + tok), 204)
        r = self.cb.post("/v1/tokens/%s/claim" % tok, {})
        assert_problem(self, r, 410, "token_revoked")
        r = self.cb.get("/v1/tokens/" + tok)
        self.assertEqual(assert_status(self, r, 200)["state"], "revoked")

    def test_claim_through_one_conflicts_and_replays_through_the_other(self):
        tok = self.issue(self.ca)
        assert_status(self, self.ca.post("/v1/tokens/%s/claim" % tok, {"request": {"n": 1}}), 201)
        r = self.cb.post("/v1/tokens/%s/claim" % tok, {"request": {"n": 1}})
        assert_problem(self, r, 409, "request_in_progress")
        assert_status(self, self.ca.post("/v1/tokens/%s/complete" % tok,
                                         {"attempt": 1, "status": 201, "body": {"id": 9}}), 200)
        r = self.cb.post("/v1/tokens/%s/claim" % tok, {"request": {"n": 1}})
        self.assertEqual(assert_status(self, r, 200)["response"]["body"], {"id": 9})
        self.assertEqual(r.header("idempotent-replayed"), "true")

    def test_rotation_reaches_running_instances(self):
        before = self.issue(self.cb)
        new_id = self.idemd.keys_rotate()
        self.assertNotEqual(token_key_id(before), new_id)
        t0 = time.monotonic()
        seen = {}
        while time.monotonic() - t0 < 12 and len(seen) < 2:
            for name, c in (("a", self.ca), ("b", self.cb)):
                if name not in seen and token_key_id(self.issue(c)) == new_id:
                    seen[name] = time.monotonic() - t0
            time.sleep(0.2)
        print("\n  rotation picked up by the running instances after %s s" %
              ", ".join("%s %.1f" % kv for kv in sorted(seen.items())), end="")
        self.assertEqual(set(seen), {"a", "b"}, "a running instance kept signing with the old key")
        self.assertLessEqual(max(seen.values()), 10.0)
        # tokens signed before the rotation still verify everywhere
        assert_status(self, self.ca.post("/v1/tokens/%s/claim" % before, {}), 201)

    def test_sweeper_removes_expired_records(self):
        op = uniq("sweep")
        policy = dict(harness.DEFAULT_POLICY, retention_seconds=1, token_ttl_seconds=60)
        assert_status(self, self.ca.put("/v1/operations/" + op, policy), 201)
        toks = []
        for _ in range(30):
            body = {"operation": op, "subject": "s", "ttl_seconds": 1}
            tok = assert_status(self, self.ca.post("/v1/tokens", body), 201)["token"]
            assert_status(self, self.ca.post("/v1/tokens/%s/claim" % tok, {}), 201)
            assert_status(self, self.ca.post("/v1/tokens/%s/complete" % tok,
                                             {"attempt": 1, "status": 200}), 200)
            toks.append(tok)
        live = self.issue(self.ca)   # a record that must survive the sweep
        assert_status(self, self.ca.post("/v1/tokens/%s/claim" % live, {}), 201)
        count = ("SELECT count(*) FROM records r JOIN operations o ON o.id = r.operation_id "
                 "WHERE o.name = '%s' AND r.state <> 'expired'")   # fences are not records
        # all 30 are there (a slow run may have ended some lives already:
        # their rows stay, as fences)
        everything = count.replace(" AND r.state <> 'expired'", "")
        self.assertEqual(psql(everything % op, db=self.idemd.db).strip(), "30")
        t0 = time.monotonic()
        left = "30"
        while time.monotonic() - t0 < 10 and left != "0":
            time.sleep(0.5)
            left = psql(count % op, db=self.idemd.db).strip()
        print("\n  sweeper removed 30 expired records within %.1f s" % (time.monotonic() - t0), end="")
        self.assertEqual(left, "0", "expired records were not swept")
        r = self.ca.get("/v1/tokens/" + live)
        self.assertEqual(assert_status(self, r, 200)["state"], "in_progress",
                         "a live record was swept")
        swept = [rec for srv in (self.a, self.b) for rec in srv.log_records()
                 if isinstance(rec, dict) and "janitor: ended the life of" in rec.get("msg", "")]
        self.assertTrue(swept, "no instance logged a sweep")


    def test_sweeper_works_through_a_backlog_in_paced_batches(self):
        # 1,234 expired records: several sweep batches with rests between them
        tenant = psql("SELECT id FROM tenants ORDER BY id LIMIT 1", db=self.idemd.db).strip()
        psql("INSERT INTO records (tenant_id, token_id, operation_id, subject, state, attempt, "
             "response_status, token_expires_at, expires_at) "
             "SELECT %s, decode(md5('backlog' || i), 'hex'), 0, 's', 'completed', 1, 200, "
             "now() - interval '1 hour', now() - interval '1 hour' "
             "FROM generate_series(1, 1234) i" % tenant, db=self.idemd.db)
        live = self.issue(self.ca)
        assert_status(self, self.ca.post("/v1/tokens/%s/claim" % live, {}), 201)
        count = ("SELECT count(*) FROM records WHERE subject = 's' AND operation_id = 0 "
                 "AND state <> 'expired'")
        t0 = time.monotonic()
        left = None
        while time.monotonic() - t0 < 30 and left != "0":
            time.sleep(0.5)
            left = psql(count, db=self.idemd.db).strip()
        print("\n  sweeper removed a backlog of 1,234 records within %.1f s"
              % (time.monotonic() - t0), end="")
        self.assertEqual(left, "0", "the backlog was not swept")
        r = self.ca.get("/v1/tokens/" + live)
        self.assertEqual(assert_status(self, r, 200)["state"], "in_progress")


if __name__ == "__main__":
    harness.main()
