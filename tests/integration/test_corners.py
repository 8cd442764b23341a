"""Integration tests: one pointed test per safety mechanism that a mutant of
tests/mutants.sh breaks and no broader test pins on its own (the mutant
table in docs/reliability.md names each):

  complete_ignores_expiry, complete_fn_ignores_expiry
      a complete of the current attempt of a record whose life ended
      (unswept) is 409 lease_lost, alone and as a batch item;
  replay_db_ignores_expiry
      a completed record past its expires_at is not replayed from the
      database (an instance whose replay cache never saw it);
  told_events_lost_on_delete
      a live record deleted (an operator, or an older release's sweeper)
      keeps its told events in the trail;
  checkpoint_unfenced
      a checkpoint from an attempt that was taken over is refused;
  (no mutant of its own: a waiter is answered through the replay cache's
  and the claim's own checks, whose mutants other tests catch)
      a duplicate waiting with Prefer: wait that sends another request is
      refused 422 when the first completes, never given its answer;
  resend_allowed
      a request on a reused upstream connection that closed without an
      answer is not sent again by libcurl;
  batch_twins
      claims of one new key that meet in one batch grant it once;
  lease_from_txn_start
      a lease is counted from the write that grants it: the second claim
      of a batch statement that waited on a row lock for the first gets a
      whole lease;
  forward_on_spent_lease
      a gateway claim acknowledged with less lease left than a forward
      needs (a margin and 100 ms) is released, not forwarded;
  forward_uncut
      a forward on a claim that spent part of its lease inside PostgreSQL
      ends, and tells the upstream it ends, before the lease does;
  takeover_judged_late
      a claim that came while a lease was live and waited past its end (a
      stall inside PostgreSQL) is answered 409, not granted as a takeover,
      and the holder's completion still lands.
"""

import base64
import os
import socket
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Client, IdemdCase, assert_problem, assert_status, parse_time,  # noqa: E402
                     psql, uniq)
import rawupstream  # noqa: E402
from test_gateway import Upstream  # noqa: E402


def key_path(op, key, what=None):
    return "/v1/operations/%s/keys/%s%s" % (op, key, "/" + what if what else "")


class Records(IdemdCase):
    """No sweeps: a record past its expiry stays in the table."""

    extra_config = {"sweep_interval_seconds": 86400, "threads": 4, "pool_size": 8}

    def test_complete_after_the_life_ended_is_lease_lost(self):
        op = self.put_operation(token_ttl_seconds=2, retention_seconds=60, lease_seconds=1)
        one, two = uniq("k"), uniq("k")
        for k in (one, two):
            assert_status(self, self.client.post(key_path(op, k, "claim"), {}), 201)
        time.sleep(3.2)
        # the lives ended (2 s after the first claims, rounded up to a whole
        # second) though nobody swept them
        r = self.client.post(key_path(op, one, "complete"),
                             {"attempt": 1, "status": 200, "body": "late"})
        assert_problem(self, r, 409, "lease_lost")
        # the plain-SQL complete leaves it to idemd.complete, which explains
        # it: both must refuse a record whose life ended
        r = self.client.post("/v1/operations/%s/completions" % op, {"items": [
            {"key": two, "attempt": 1, "status": 200, "body": "late"}]})
        items = assert_status(self, r, 200)["items"]
        self.assertEqual([(i["status"], i.get("code")) for i in items], [(409, "lease_lost")])
        for k in (one, two):
            r = self.client.post(key_path(op, k, "claim"), {})
            self.assertEqual(assert_status(self, r, 201)["attempt"], 2, r.describe())

    def test_ended_answer_is_not_replayed_from_the_database(self):
        op = self.put_operation(token_ttl_seconds=1, retention_seconds=1, lease_seconds=30)
        key = uniq("k")
        assert_status(self, self.client.post(key_path(op, key, "claim"), {}), 201)
        assert_status(self, self.client.post(key_path(op, key, "complete"),
                                              {"attempt": 1, "status": 200, "body": 1}), 200)
        time.sleep(2.4)
        # another instance: its replay cache never held the answer
        other = self.idemd.start(port=harness.free_port())
        r = Client(other.port, self.api_key).post(key_path(op, key, "claim"), {})
        self.assertEqual(assert_status(self, r, 201)["attempt"], 2,
                         "an ended answer was replayed: " + r.describe())
        self.assertEqual(other.stop(), 0)

    def test_a_deleted_live_record_keeps_its_told_events(self):
        op = self.put_operation(lease_seconds=30)
        key = uniq("k")
        rid = assert_status(self, self.client.post(key_path(op, key, "claim"), {}), 201)["id"]
        assert_status(self, self.client.post(key_path(op, key, "complete"),
                                              {"attempt": 1, "status": 200, "body": 1}), 200)
        psql("DELETE FROM records WHERE token_id = '\\x%s'" % rid, db=self.idemd.db)
        trail = assert_status(self, self.client.get("/v1/records/%s/events" % rid), 200)
        self.assertEqual([e["event"] for e in trail["events"]],
                         ["claimed", "completed", "expired"], trail)

    def test_checkpoint_of_a_taken_over_attempt_is_refused(self):
        op = self.put_operation(lease_seconds=1)
        key = uniq("k")
        assert_status(self, self.client.post(key_path(op, key, "claim"), {}), 201)
        time.sleep(1.3)
        r = self.client.post(key_path(op, key, "claim"), {})
        self.assertEqual(assert_status(self, r, 201)["attempt"], 2)
        r = self.client.post(key_path(op, key, "checkpoint"),
                             {"attempt": 1, "phase": "charged", "data": {"stale": True}})
        assert_problem(self, r, 409, "lease_lost")
        got = assert_status(self, self.client.get(key_path(op, key)), 200)
        self.assertNotIn("checkpoint", got, "a stale holder's checkpoint was stored")

    def test_batch_completion_of_a_taken_over_attempt_is_refused(self):
        # several completions in one statement fence on the attempt each, as
        # one alone does (complete_current, not complete_one)
        op = self.put_operation(lease_seconds=1)
        keys = [uniq("k") for _ in range(4)]
        for k in keys:
            assert_status(self, self.client.post(key_path(op, k, "claim"), {}), 201)
        time.sleep(1.3)
        for k in keys[1:3]:
            r = self.client.post(key_path(op, k, "claim"), {})
            self.assertEqual(assert_status(self, r, 201)["attempt"], 2)
        r = self.client.post("/v1/operations/%s/completions" % op, {"items": [
            {"key": k, "attempt": 1, "status": 200, "body": {"by": "first"}} for k in keys]})
        items = {i["key"]: i for i in assert_status(self, r, 200)["items"]}
        self.assertEqual([items[k]["status"] for k in keys], [200, 409, 409, 200], items)
        for k in keys[1:3]:
            self.assertEqual(items[k]["code"], "lease_lost", items[k])
            got = assert_status(self, self.client.get(key_path(op, k)), 200)
            self.assertEqual((got["state"], got["attempt"]), ("in_progress", 2), got)

    def test_waiter_with_another_request_is_refused(self):
        op = self.put_operation(lease_seconds=30)
        key = uniq("k")
        first = self.client.post(key_path(op, key, "claim"), {"request": {"amount": 1}})
        assert_status(self, first, 201)
        out = {}

        def wait():
            out["r"] = Client(self.server.port, self.api_key, timeout=20).post(
                key_path(op, key, "claim"), {"request": {"amount": 2}},
                headers={"Prefer": "wait=10"})
        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.5)
        assert_status(self, self.client.post(key_path(op, key, "complete"),
                                              {"attempt": 1, "status": 200, "body": "one"}),
                      200)
        t.join(20)
        assert_problem(self, out["r"], 422, "fingerprint_mismatch")

    def test_claims_of_one_new_key_in_one_batch_grant_it_once(self):
        op = self.put_operation(lease_seconds=30)
        for _ in range(3):
            key = uniq("k")
            got = []
            # records locked for a while: claims of four other keys (more
            # than the batcher's threads, two: src/cli/serve.c) hold every
            # batcher thread inside PostgreSQL, and the claims of KEY queue
            # behind them, so they meet in one batch when the lock goes
            locker = threading.Thread(target=psql, args=(
                "BEGIN; LOCK TABLE records IN EXCLUSIVE MODE; SELECT pg_sleep(1.2); COMMIT;",),
                kwargs={"db": self.idemd.db})
            locker.start()
            time.sleep(0.3)

            def claim(k):
                status = Client(self.server.port, self.api_key).post(
                    key_path(op, k, "claim"), {}).status
                if k == key:
                    got.append(status)
            threads = [threading.Thread(target=claim, args=(uniq("k"),)) for _ in range(4)]
            for t in threads:
                t.start()
            time.sleep(0.2)
            threads += [threading.Thread(target=claim, args=(key,)) for _ in range(16)]
            for t in threads[4:]:
                t.start()
            for t in threads:
                t.join(30)
            locker.join(10)
            self.assertEqual(got.count(201), 1, "one key granted %d times: %s"
                             % (got.count(201), sorted(got)))


class Leases(IdemdCase):
    """Leases spent inside PostgreSQL, on the API and on a gateway route."""

    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(Upstream())
        u = "http://127.0.0.1:%d" % cls.up.port
        route = {"method": "POST", "tenant": "acme", "key": "header:Idempotency-Key"}
        cls.extra_config = {"routes": [
            dict(route, path="/pay", operation="pay.tight", upstream=u + "/pay",
                 timeout_ms=500),
            dict(route, path="/cut", operation="pay.cut", upstream=u + "/cut",
                 timeout_ms=1500)]}
        super().setUpClass()
        for op, lease in (("pay.tight", 1), ("pay.cut", 2)):
            cls.define_operation(op, lease_seconds=lease)

    def test_second_claim_after_a_lock_wait_gets_a_whole_lease(self):
        op = self.put_operation(lease_seconds=1)
        ids = {}
        for _ in range(2):
            k = uniq("k")
            ids[k] = assert_status(self, self.client.post(key_path(op, k, "claim"), {}),
                                   201)["id"]
        # the batch statement meets the records in record order: the first
        # waits on a row lock, the second is decided after that wait
        first, second = sorted(ids, key=lambda k: ids[k])
        time.sleep(1.2)  # both leases ended: the batch takes both over
        self.put_operation(op, lease_seconds=3)
        locker = threading.Thread(target=psql, args=(
            "BEGIN; SELECT 1 FROM records WHERE token_id = '\\x%s' FOR UPDATE; "
            "SELECT pg_sleep(1.5); COMMIT;" % ids[first],), kwargs={"db": self.idemd.db})
        locker.start()
        time.sleep(0.3)
        r = self.client.post("/v1/operations/%s/claims" % op,
                             {"items": [{"key": first}, {"key": second}]})
        got = time.time()
        locker.join(10)
        items = {i["key"]: i for i in assert_status(self, r, 200)["items"]}
        self.assertEqual(items[second]["status"], 201, items)
        left = parse_time(items[second]["lease_expires_at"]) - got
        self.assertGreater(left, 2.5, "the lease was counted from before the lock wait: "
                           "%.2f s of 3 left when answered" % left)

    def test_claim_that_waited_past_the_lease_does_not_take_over(self):
        op = self.put_operation(lease_seconds=2)
        k = uniq("k")
        assert_status(self, self.client.post(key_path(op, k, "claim"), {}), 201)
        t0 = time.time()
        # a stall inside PostgreSQL that outlasts the lease: the duplicate
        # comes while the lease is live and is decided after it ended
        locker = threading.Thread(target=psql, args=(
            "BEGIN; LOCK TABLE records IN EXCLUSIVE MODE; SELECT pg_sleep(2.6); COMMIT;",),
            kwargs={"db": self.idemd.db})
        locker.start()
        time.sleep(0.4)
        r = self.client.post(key_path(op, k, "claim"), {})
        waited = time.time() - t0
        locker.join(10)
        self.assertGreater(waited, 2.2, "the claim did not wait out the lease: " + r.describe())
        assert_problem(self, r, 409, "request_in_progress")
        # the holder, whose completion waited as long, still stores its answer
        assert_status(self, self.client.post(key_path(op, k, "complete"),
                                              {"attempt": 1, "status": 200, "body": {"ok": 1}}),
                      200)

    def slow_inserts(self, op, seconds):
        psql("CREATE OR REPLACE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$ "
             "BEGIN IF NEW.operation_id = (SELECT id FROM operations WHERE name = '%s') "
             "THEN PERFORM pg_sleep(%s); END IF; RETURN NEW; END $$; "
             "DROP TRIGGER IF EXISTS slow_insert ON records; "
             "CREATE TRIGGER slow_insert BEFORE INSERT ON records FOR EACH ROW "
             "EXECUTE FUNCTION slow_insert()" % (op, seconds), db=self.idemd.db)

    def test_gateway_does_not_forward_on_a_lease_left_too_short(self):
        key = uuid.uuid4().hex
        # about 0.4 s of the 1 s lease left: enough to acknowledge a claim
        # (250 ms), too little for a forward (500 ms of margin, 100 ms more)
        self.slow_inserts("pay.tight", 0.55)
        try:
            r = self.anon.post("/pay", {"m": key}, headers={"Idempotency-Key": key})
        finally:
            psql("DROP TRIGGER IF EXISTS slow_insert ON records", db=self.idemd.db)
        ran = [q for q in self.up.requests() if key in base64.b64decode(q["body_b64"]).decode()]
        self.assertEqual(ran, [], "forwarded on a lease too short: " + r.describe())
        assert_problem(self, r, 503, "unavailable")

    def test_forward_is_cut_to_what_the_lease_has_left(self):
        key = uuid.uuid4().hex
        # 0.6 s of the 2 s lease spent inside PostgreSQL: the route's 1.5 s
        # would end after the lease, so the forward gets 0.9 s at most
        self.slow_inserts("pay.cut", 0.6)
        try:
            t0 = time.time()
            r = self.anon.post("/cut", {"m": key}, headers={"Idempotency-Key": key,
                                                             "X-Upstream-Mode": "slow=1.2"})
            took = time.time() - t0
        finally:
            psql("DROP TRIGGER IF EXISTS slow_insert ON records", db=self.idemd.db)
        ran = [q for q in self.up.requests() if key in base64.b64decode(q["body_b64"]).decode()]
        self.assertEqual(len(ran), 1, r.describe())
        told = [int(v) for k, v in ran[0]["headers"] if k.lower() == "idempotency-timeout-ms"]
        self.assertTrue(told and told[0] <= 1000, "the upstream was told %s ms" % told)
        assert_problem(self, r, 504, "upstream_timeout")
        self.assertLess(took, 1.9, "the forward outlived the lease")


class Resend(IdemdCase):
    """A raw upstream that drops the first copy of each request unanswered
    on a connection idemd reused."""

    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(rawupstream.RawUpstream())
        cls.seen = set()
        cls.up.modes["drop-once"] = cls.drop_once
        cls.extra_config = {"routes": [
            {"method": "POST", "path": "/pay", "tenant": "acme", "operation": "pay.once",
             "upstream": cls.up.url + "/pay", "key": "header:Idempotency-Key",
             "timeout_ms": 2000}]}
        super().setUpClass()
        cls.define_operation("pay.once", lease_seconds=3)

    @classmethod
    def drop_once(cls, req):
        marker = req.body.decode("latin-1")
        if marker in cls.seen:
            return cls.up._ok(req)
        cls.seen.add(marker)
        conn = [c for c in cls.up.conns if c.id == req.conn_id][0]
        conn.sock.shutdown(socket.SHUT_RDWR)
        return None

    def test_a_dropped_request_is_not_resent(self):
        # the first submit opens a connection that stays alive for the next
        warm = uuid.uuid4().hex
        r = self.anon.post("/pay", {"m": warm}, headers={"Idempotency-Key": warm})
        assert_status(self, r, 201)
        key = uuid.uuid4().hex
        mark = self.up.mark()
        r = self.anon.post("/pay", {"m": key}, headers={"Idempotency-Key": key,
                                                         "X-Raw-Mode": "drop-once"})
        sent = [q for q in self.up.since(mark) if key.encode() in q.body]
        self.assertEqual(len(sent), 1, "libcurl sent the request again: " + r.describe())
        assert_problem(self, r, 502, "upstream_unavailable")


if __name__ == "__main__":
    harness.main()
