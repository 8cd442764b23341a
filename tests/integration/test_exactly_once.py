"""Integration tests: exactly once in the corners (docs/reliability.md).
One regression test per hole a review found, each failing on the code
before migrations/0011 and passing after:

  1. fencing outlives the record: a holder stalled past its lease and the
     key's life is refused in the key's next life (swept or not), on
     complete, release, extend and checkpoint;
  2. a token claim that believes the token valid, arriving after the sweep
     ended the record, cannot start attempt 1 again;
  3. a claim that waited in PostgreSQL longer than its lease is never
     acknowledged with a spent lease, and the gateway does not forward on it;
  4. an upstream 2xx whose answer cannot be stored is not executed again;
  5. an idemd host whose clock is 4 s behind never replays an answer the
     database considers gone (libfaketime);
  6. expiry is exact: gone for every reader at expires_at, swept or not.

The stall inside PostgreSQL is a BEFORE INSERT trigger on records that
sleeps for one operation only: the claim's lease is counted, then the
statement waits, as it would behind a slow flush or a lock.
"""

import base64
import os
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Client, IdemdCase, assert_problem, assert_status, parse_time,  # noqa: E402
                     psql, uniq)
from test_gateway import Upstream  # noqa: E402

FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def key_path(op, key, what=None):
    return "/v1/operations/%s/keys/%s%s" % (op, key, "/" + what if what else "")


class Lives(IdemdCase):
    """Sweeps every second: records end their lives and become fences."""

    extra_config = {"sweep_interval_seconds": 1}

    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(Upstream())
        u = "http://127.0.0.1:%d" % cls.up.port
        cls.extra_config = dict(cls.extra_config, routes=[
            {"method": "POST", "path": "/pay", "tenant": "acme", "operation": "pay.slow",
             "upstream": u + "/pay", "key": "header:Idempotency-Key", "timeout_ms": 500},
            {"method": "POST", "path": "/big", "tenant": "acme", "operation": "pay.big",
             "upstream": u + "/big", "key": "header:Idempotency-Key", "timeout_ms": 5000},
        ])
        super().setUpClass()
        for name, lease in (("pay.slow", 1), ("pay.big", 30)):
            cls.define_operation(name, lease_seconds=lease)

    def executions(self, marker):
        """How many requests carrying MARKER in their body reached the upstream
        (it sees the record id as Idempotency-Key on derived-key routes)."""
        return sum(1 for q in self.up.requests()
                   if marker in base64.b64decode(q["body_b64"]).decode("utf-8", "replace"))

    def db(self, sql):
        return psql(sql, db=self.idemd.db).strip()

    def state(self, rid):
        return self.db("SELECT state FROM records WHERE token_id = '\\x%s'" % rid)

    def events(self, rid):
        r = self.client.get("/v1/records/%s/events" % rid)
        return [(e["event"], e.get("attempt")) for e in assert_status(self, r, 200)["events"]]

    # ---- 1. fencing outlives the record

    def stale_holder_is_fenced(self, swept):
        # (the sweeper looks at a record the retention after its claim
        # first: a claim never completed is swept then, migrations/0017)
        op = self.put_operation(token_ttl_seconds=1, lease_seconds=2, retention_seconds=3,
                                audit_retention_seconds=60)
        key = uniq("order")
        first = assert_status(self, self.client.post(key_path(op, key, "claim"), {}), 201)
        self.assertEqual(first["attempt"], 1)
        rid = first["id"]
        # the holder stalls past its lease and the key's life (expires_at is
        # the later of the two: 2 s)
        deadline = time.monotonic() + 8
        time.sleep(2.3)
        if swept:
            while self.state(rid) != "expired":
                self.assertLess(time.monotonic(), deadline, "the sweeper never ended the life")
                time.sleep(0.2)
        else:
            self.assertEqual(self.state(rid), "in_progress", "swept: this case is the unswept one")
        second = assert_status(self, self.client.post(key_path(op, key, "claim"), {}), 201)
        self.assertEqual(second["attempt"], 2, "a new life must not reuse attempt 1")
        self.assertEqual(second["id"], rid)
        # every write of the earlier life's holder is refused; nothing it sends is stored
        for what, body in (("extend", {"attempt": 1}),
                           ("checkpoint", {"attempt": 1, "phase": "charged"}),
                           ("complete", {"attempt": 1, "status": 200, "body": {"by": "stale"}}),
                           ("release", {"attempt": 1})):
            assert_problem(self, self.client.post(key_path(op, key, what), body), 409, "lease_lost")
        # the real holder still holds: a third client gets 409, not a takeover
        assert_problem(self, self.client.post(key_path(op, key, "claim"), {}), 409,
                       "request_in_progress")
        intro = assert_status(self, self.client.get(key_path(op, key)), 200)
        self.assertEqual((intro["state"], intro["attempt"]), ("in_progress", 2))
        self.assertNotIn("checkpoint", intro)
        assert_status(self, self.client.post(key_path(op, key, "complete"),
                                              {"attempt": 2, "status": 200,
                                               "body": {"by": "holder"}}), 200)
        replay = assert_status(self, self.client.post(key_path(op, key, "claim"), {}), 200)
        self.assertEqual(replay["response"]["body"], {"by": "holder"})
        self.assertEqual(self.events(rid), [("claimed", 1), ("expired", 1), ("claimed", 2),
                                            ("completed", 2)])

    def test_stalled_holder_of_a_swept_life_is_fenced(self):
        self.stale_holder_is_fenced(swept=True)

    def test_stalled_holder_of_an_unswept_life_is_fenced(self):
        # the sweep runs every second: stop it for this test's record by
        # holding the sweep's advisory lock in another session
        stop = threading.Event()
        held = threading.Event()

        def hold():
            import subprocess
            p = subprocess.Popen([harness.PSQL, "-X", "-q", "-d", self.idemd.db],
                                 stdin=subprocess.PIPE, env=harness.pg_env(), text=True)
            p.stdin.write("BEGIN; SELECT pg_advisory_xact_lock(7428137);\n")
            p.stdin.flush()
            time.sleep(0.5)
            held.set()
            stop.wait(20)
            p.stdin.write("COMMIT;\n")
            p.stdin.close()
            p.wait(10)

        t = threading.Thread(target=hold)
        t.start()
        try:
            held.wait(10)
            self.stale_holder_is_fenced(swept=False)
        finally:
            stop.set()
            t.join()

    def sweep_at(self, rid):
        """The record's state and how many seconds from now its sweep_at is
        (migrations/0017)."""
        row = self.db("SELECT state || '|' || extract(epoch FROM sweep_at - clock_timestamp()) "
                      "FROM records WHERE token_id = '\\x%s'" % rid)
        state, ahead = row.split("|")
        return state, float(ahead)

    def test_fence_outlives_the_sweeps_until_its_retention(self):
        # the sweeper passes every second: a fence stays through its passes
        # for fence_retention_seconds (7 days here), looked at again then
        op = self.put_operation(token_ttl_seconds=1, lease_seconds=1, retention_seconds=1)
        key = uniq("order")
        rid = assert_status(self, self.client.post(key_path(op, key, "claim"), {}), 201)["id"]
        deadline = time.monotonic() + 8
        while self.state(rid) != "expired":
            self.assertLess(time.monotonic(), deadline, "the sweeper never ended the life")
            time.sleep(0.2)
        time.sleep(2.5)
        state, ahead = self.sweep_at(rid)
        self.assertEqual(state, "expired", "the fence went before its retention")
        self.assertGreater(ahead, 6.9 * 86400, "the fence is looked at again before a week")
        second = assert_status(self, self.client.post(key_path(op, key, "claim"), {}), 201)
        self.assertEqual(second["attempt"], 2, "a new life must not reuse attempt 1")

    def test_record_kept_longer_is_swept_at_its_new_end(self):
        # the claim gives the record its time to be swept: when a completion
        # at the claim would end its life (3 s on). This one comes 2.5 s
        # later and keeps it until 5.5 s without touching that time (a HOT
        # update); the sweeper, looking a sweep interval after it (4 s),
        # finds the record alive and gives it its new time; its life ends
        # when that has come
        op = self.put_operation(token_ttl_seconds=1, lease_seconds=10, retention_seconds=3)
        key = uniq("order")
        t0 = time.monotonic()
        rid = assert_status(self, self.client.post(key_path(op, key, "claim"), {}), 201)["id"]
        first = self.sweep_at(rid)[1]
        time.sleep(2.5)
        assert_status(self, self.client.post(key_path(op, key, "complete"),
                                              {"attempt": 1, "status": 200, "body": {}}), 200)
        self.assertAlmostEqual(self.sweep_at(rid)[1], first - (time.monotonic() - t0), delta=0.5,
                               msg="the completion moved the record's time to be swept")
        # the sweeper's pass comes a sweep interval after the first time
        # (about 4 s on), later on a loaded machine: wait for it, bounded,
        # rather than look at one instant
        until = t0 + first  # the first time, on the monotonic clock
        while True:
            state, ahead = self.sweep_at(rid)
            end = time.monotonic() + ahead
            if state != "completed" or end > until + 0.5 or time.monotonic() > t0 + 10:
                break
            time.sleep(0.1)
        self.assertEqual(state, "completed", "its life ended before the retention it was given")
        self.assertAlmostEqual(end, t0 + 5.5, delta=0.7,
                               msg="the sweeper did not give it its new time, its end")
        while self.state(rid) != "expired":
            self.assertLess(time.monotonic(), t0 + 12, "the sweeper never ended its life")
            time.sleep(0.2)
        self.assertGreater(time.monotonic(), t0 + 5.3, "its life ended before its end")

    def test_rows_without_a_sweep_time_get_one(self):
        # a row written without sweep_at (there before migration 0017, or
        # by a previous release, or the PL/pgSQL claim) has -infinity: the
        # sweeper's next pass gives a live one its expiry and ends the life
        # of one whose expiry passed
        op = self.put_operation()
        live, past = os.urandom(16).hex(), os.urandom(16).hex()
        self.db("INSERT INTO records (tenant_id, token_id, operation_id, subject, state, attempt, "
                "response_status, token_expires_at, expires_at) "
                "SELECT o.tenant_id, decode(x.id, 'hex'), o.id, 'u', 'completed', 1, 200, x.e, x.e "
                "FROM operations o, (VALUES ('%s', now() + interval '1 hour'), "
                "('%s', now() - interval '1 second')) x(id, e) WHERE o.name = '%s'"
                % (live, past, op))
        deadline = time.monotonic() + 8
        while self.state(past) != "expired":
            self.assertLess(time.monotonic(), deadline, "the sweeper never ended the life")
            time.sleep(0.2)
        while True:
            state, ahead = self.sweep_at(live)
            if ahead > 0:
                break
            self.assertLess(time.monotonic(), deadline, "the live row never got its time")
            time.sleep(0.2)
        self.assertEqual(state, "completed")
        self.assertAlmostEqual(ahead, 3600, delta=10)

    # ---- 2. a token claim racing the sweep at expiry

    def test_token_claim_after_the_sweep_cannot_restart_attempt_1(self):
        op = self.put_operation(token_ttl_seconds=1, lease_seconds=1, retention_seconds=2)
        r = self.issue_resp(op)
        tok, rid = r.json["token"], r.json["id"]
        self.claim_ok(tok)
        deadline = time.monotonic() + 8
        while self.state(rid) != "expired":
            self.assertLess(time.monotonic(), deadline, "the sweeper never ended the life")
            time.sleep(0.2)
        # the claim whose transaction began before the token's expiry and
        # reached the record after the sweep: idemd.claim as the batcher
        # calls it, with the token's expiry as that claim saw it (future)
        row = self.db(
            "SELECT c.outcome || ' ' || c.attempt FROM operations o, "
            "idemd.claim(ARRAY[o.tenant_id], ARRAY['\\x%s'::bytea], ARRAY[o.id], "
            "ARRAY['u'], ARRAY[NULL::bytea], "
            "ARRAY[extract(epoch from now())::bigint + 60], ARRAY[5], ARRAY[NULL::text], "
            "ARRAY[NULL::bigint], ARRAY[false], ARRAY[false]) c WHERE o.name = '%s'"
            % (rid, op))
        self.assertEqual(row, "claimed 2", "a claim after the sweep restarted the attempts")
        assert_problem(self, self.complete(tok, 1, 200), 409, "lease_lost")
        assert_problem(self, self.release(tok, 1), 409, "lease_lost")
        # attempt 2 holds its lease: the API says so (in progress wins over expiry)
        assert_problem(self, self.claim(tok), 409, "request_in_progress")

    # ---- 3. a lease spent inside PostgreSQL

    def slow_inserts(self, op, seconds):
        self.db("CREATE OR REPLACE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN IF NEW.operation_id = (SELECT id FROM operations WHERE name = '%s') "
                "THEN PERFORM pg_sleep(%s); END IF; RETURN NEW; END $$; "
                "DROP TRIGGER IF EXISTS slow_insert ON records; "
                "CREATE TRIGGER slow_insert BEFORE INSERT ON records FOR EACH ROW "
                "EXECUTE FUNCTION slow_insert()" % (op, seconds))

    def fast_inserts(self):
        self.db("DROP TRIGGER IF EXISTS slow_insert ON records")

    def test_claim_is_never_acknowledged_with_a_spent_lease(self):
        op = self.put_operation(token_ttl_seconds=60, lease_seconds=1)
        key = uniq("order")
        self.slow_inserts(op, 1.6)
        try:
            r = self.client.post(key_path(op, key, "claim"), {})
            got = time.time()
        finally:
            self.fast_inserts()
        if r.status == 201:
            self.assertGreater(parse_time(r.json["lease_expires_at"]), got,
                               "acknowledged with a lease that had ended: " + r.describe())
            assert_problem(self, self.client.post(key_path(op, key, "claim"), {}), 409,
                           "request_in_progress")
        else:
            assert_problem(self, r, 503, "unavailable")
            self.assertEqual(r.header("Retry-After"), "1")
            time.sleep(1.0)
            again = assert_status(self, self.client.post(key_path(op, key, "claim"), {}), 201)
            self.assertEqual(again["attempt"], 2)
            self.assertGreater(parse_time(again["lease_expires_at"]), time.time())

    def test_gateway_does_not_forward_on_a_spent_lease(self):
        key = str(uuid.uuid4())
        body = {"amount": 1, "marker": key}
        self.slow_inserts("pay.slow", 1.6)
        try:
            r = self.anon.post("/pay", body, headers={"Idempotency-Key": key})
        finally:
            self.fast_inserts()
        self.assertEqual(self.executions(key), 0,
                         "forwarded on a lease that had ended: " + r.describe())
        assert_problem(self, r, 503, "unavailable")
        time.sleep(1.0)
        r = self.anon.post("/pay", body, headers={"Idempotency-Key": key})
        assert_status(self, r, 201)
        self.assertEqual(r.header("Idempotent-Replayed"), "false")
        r = self.anon.post("/pay", body, headers={"Idempotency-Key": key})
        self.assertEqual((r.status, r.header("Idempotent-Replayed")), (201, "true"))
        self.assertEqual(self.executions(key), 1)

    # ---- 4. what ran is never run again

    def test_unstorable_success_is_not_executed_again(self):
        key = str(uuid.uuid4())
        big = {"X-Upstream-Mode": "big=2000000", "Idempotency-Key": key}
        first = self.anon.post("/big", {"amount": 5, "marker": key}, headers=big)
        assert_problem(self, first, 502, "upstream_answer_unstorable")
        for _ in range(3):
            again = self.anon.post("/big", {"amount": 5, "marker": key}, headers=big)
            assert_problem(self, again, 502, "upstream_answer_unstorable")
            self.assertEqual(again.header("Idempotent-Replayed"), "true")
        self.assertEqual(self.executions(key), 1, "the upstream ran again")


class Exact(IdemdCase):
    """No sweeps at all: what is past its expiry must be gone anyway."""

    extra_config = {"sweep_interval_seconds": 86400}

    def test_expired_record_is_gone_for_every_reader(self):
        op = self.put_operation(token_ttl_seconds=1, retention_seconds=1, lease_seconds=30)
        key = uniq("evt")
        rid = assert_status(self, self.client.post(key_path(op, key, "claim"), {}), 201)["id"]
        assert_status(self, self.client.post(key_path(op, key, "complete"),
                                              {"attempt": 1, "status": 200, "body": 1}), 200)
        # replayed, and so in the replay cache
        assert_status(self, self.client.post(key_path(op, key, "claim"), {}), 200)
        # expires_at: the later of retention's end and the key's life (its
        # first claim + 1 s, rounded up to a whole second)
        time.sleep(2.4)
        self.assertEqual(psql("SELECT state FROM records WHERE token_id = '\\x%s'" % rid,
                              db=self.idemd.db).strip(), "completed", "swept after all")
        assert_problem(self, self.client.get(key_path(op, key)), 404, "record_not_found")
        assert_problem(self, self.client.get("/v1/records/" + rid), 404, "record_not_found")
        listed = assert_status(self, self.client.get("/v1/records?operation=" + op), 200)
        self.assertEqual(listed["records"], [])
        claim = assert_status(self, self.client.post(key_path(op, key, "claim"), {}), 201)
        self.assertEqual(claim["attempt"], 2)


class OneClock(IdemdCase):
    """Two instances on one database, one of them on a host clock 4 s behind."""

    extra_config = {"sweep_interval_seconds": 86400}

    def test_host_clock_behind_never_replays_what_the_database_ended(self):
        self.assertTrue(os.path.exists(FAKETIME), "libfaketime is missing (deploy/deps.sh --test)")
        # under AddressSanitizer (the sanitizer suite) libfaketime is
        # preloaded ahead of ASan's runtime, which ASan must be told to allow
        asan = (os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
        behind = self.idemd.start(env={"LD_PRELOAD": FAKETIME, "FAKETIME": "-4",
                                       "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                                       "FAKETIME_NO_CACHE": "1", "ASAN_OPTIONS": asan})
        c = Client(behind.port, self.api_key)
        op = self.put_operation(token_ttl_seconds=1, retention_seconds=2, lease_seconds=30)
        key = uniq("evt")
        assert_status(self, c.post(key_path(op, key, "claim"), {}), 201)
        assert_status(self, c.post(key_path(op, key, "complete"),
                                   {"attempt": 1, "status": 200, "body": "first"}), 200)
        replay = assert_status(self, c.post(key_path(op, key, "claim"), {}), 200)
        self.assertEqual(replay["response"]["body"], "first")
        time.sleep(2.6)
        # the database ended the record; the host 4 s behind must agree
        for _ in range(3):
            r = c.post(key_path(op, key, "claim"), {})
            if r.status == 201:
                break
            self.assertNotEqual(r.status, 200, "replayed an ended record: " + r.describe()
                                + psql("SELECT expires_at, token_expires_at, clock_timestamp() "
                                       "FROM records", db=self.idemd.db))
        self.assertEqual(assert_status(self, r, 201)["attempt"], 2)


if __name__ == "__main__":
    harness.main()
