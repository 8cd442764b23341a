"""Integration tests: exactly once when the holder stalls.

On the gateway idemd itself holds the key it forwards. A holder that
stalls keeps it; only one that is gone loses it. One test per corner
where time alone was trusted, each failing on the code before
migrations/0020:

  1. a completion that stalls past the lease (a slow statement) keeps the
     key: a retry on another instance waits, never forwards; a holder that
     is killed loses the key at its lease's end;
  2. no instance shortens a lease that a live instance's route needs, and
     a refused change stops nobody from reloading;
  3. an upstream that reads the request late and honours the deadline it
     is told (Idempotency-Deadline) never runs beside a retry;
  4. a batch cut between its two statements leaves nothing claimed that
     nobody holds: the fresh items are the batch's;
  5. a host's clock stepping back never makes the replay cache serve a
     record past its end.

These tests run the default forward_margin_ms (1000).
"""

import base64
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Client, Idemd, IdemdCase, assert_problem, assert_retry_after,  # noqa: E402
                     assert_status, psql, uniq)
from test_gateway import Upstream  # noqa: E402

FAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


class Fence(IdemdCase):
    """Two instances on one database, routes of 1.5 s on leases of 3 s."""

    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(Upstream())
        u = "http://127.0.0.1:%d" % cls.up.port
        route = {"method": "POST", "tenant": "acme", "key": "header:Idempotency-Key",
                 "timeout_ms": 1500}
        cls.extra_config = {"forward_margin_ms": 1000, "routes": [
            dict(route, path="/pay", operation="fence.pay", upstream=u + "/pay"),
            dict(route, path="/late", operation="fence.late", upstream=u + "/late"),
            dict(route, path="/needs", operation="fence.needs", upstream=u + "/needs",
                 timeout_ms=10000),
        ]}
        super().setUpClass()
        for name in ("fence.pay", "fence.late"):
            cls.define_operation(name, lease_seconds=3)
        cls.define_operation("fence.needs", lease_seconds=12)
        cls.b = cls.idemd.start()

    def db(self, sql):
        return psql(sql, db=self.idemd.db).strip()

    def runs(self, marker):
        """The upstream's requests whose body holds MARKER."""
        return [q for q in self.up.requests()
                if marker in base64.b64decode(q["body_b64"]).decode("utf-8", "replace")]

    def submit(self, port, path, key, marker, mode=None, timeout=15.0):
        h = {"Idempotency-Key": key}
        if mode:
            h["X-Upstream-Mode"] = mode
        return Client(port, None, timeout=timeout).post(path, {"marker": marker}, headers=h)

    def in_thread(self, fn):
        out = {}

        def run():
            try:
                out["r"] = fn()
            except OSError as e:  # the instance it went to was killed
                out["error"] = e

        t = threading.Thread(target=run)
        t.start()
        return t, out

    def until_not_409(self, fn, limit):
        deadline = time.monotonic() + limit
        while True:
            r = fn()
            if r.status != 409 or time.monotonic() > deadline:
                return r
            time.sleep(0.2)

    # ---- 1. a stalled holder keeps its key; a dead one loses it

    def test_completion_stalled_past_the_lease_keeps_the_key(self):
        key, marker = str(uuid.uuid4()), uniq("stall")
        # the next completion waits 3 s inside PostgreSQL before it reaches
        # its row (a statement trigger, as behind another record's lock or
        # in a paused backend): the upstream answers at 1.2 s, the lease
        # ends at 3 s, the answer is stored at about 4.2 s
        self.db("CREATE TABLE IF NOT EXISTS stall_once (n int); INSERT INTO stall_once VALUES (1); "
                "CREATE OR REPLACE FUNCTION stall_complete() RETURNS trigger LANGUAGE plpgsql "
                "AS $$ BEGIN IF current_query() LIKE '%state = ''completed''%' THEN "
                "DELETE FROM stall_once; IF FOUND THEN PERFORM pg_sleep(3); END IF; END IF; "
                "RETURN NULL; END $$; DROP TRIGGER IF EXISTS stall_complete ON records; "
                "CREATE TRIGGER stall_complete BEFORE UPDATE ON records FOR EACH STATEMENT "
                "EXECUTE FUNCTION stall_complete()")
        try:
            t0 = time.monotonic()
            t, out = self.in_thread(lambda: self.submit(self.server.port, "/pay", key, marker,
                                                        "slow=1.2"))
            time.sleep(max(0.0, t0 + 3.5 - time.monotonic()))
            # the lease is over, the holder lives and has not stored yet
            retry = self.submit(self.b.port, "/pay", key, marker)
            assert_problem(self, retry, 409, "request_in_progress")
            assert_retry_after(self, retry)
            t.join(20)
        finally:
            self.db("DROP TRIGGER IF EXISTS stall_complete ON records; DELETE FROM stall_once")
        first = out["r"]
        self.assertEqual((first.status, first.header("Idempotent-Replayed")), (201, "false"),
                         first.describe())
        again = self.submit(self.b.port, "/pay", key, marker)
        self.assertEqual((again.status, again.header("Idempotent-Replayed")), (201, "true"),
                         again.describe())
        self.assertEqual(again.json, first.json)
        self.assertEqual(len(self.runs(marker)), 1, "the key was forwarded twice")

    def test_holder_that_is_gone_loses_the_key_at_its_lease_end(self):
        key, marker = str(uuid.uuid4()), uniq("gone")
        c = self.idemd.start()
        t, out = self.in_thread(lambda: self.submit(c.port, "/pay", key, marker, "slow=1.0"))
        deadline = time.monotonic() + 5
        while not self.runs(marker):
            self.assertLess(time.monotonic(), deadline, "the submit never reached the upstream")
            time.sleep(0.02)
        c.kill()
        t0 = time.monotonic()
        t.join(10)
        # its fence went with it: the retry takes over once the lease ends
        r = self.until_not_409(lambda: self.submit(self.b.port, "/pay", key, marker), 8)
        self.assertEqual((r.status, r.header("Idempotent-Replayed")), (201, "false"),
                         r.describe())
        self.assertLess(time.monotonic() - t0, 6, "the dead holder kept its key")
        self.assertEqual(len(self.runs(marker)), 2)

    # ---- 2. a lease no shorter than any live instance's routes need

    def routeless_instance(self):
        """A third instance on the same database, with no routes."""
        other = Idemd({"forward_margin_ms": 1000}, db=self.idemd.db)
        shutil.copy(self.idemd.master_key_file, other.master_key_file)
        self.addCleanup(other.cleanup)
        other.own_db = False
        return other.start()

    def test_lease_shortened_elsewhere_is_refused(self):
        plain = self.routeless_instance()
        c = Client(plain.port, self.api_key)
        r = c.put("/v1/operations/fence.needs", dict(harness.DEFAULT_POLICY, lease_seconds=2))
        assert_problem(self, r, 400, "invalid_request")
        detail = r.json["detail"]
        for part in ("POST /needs", "%d" % self.server.proc.pid, "11000 ms", "lease_seconds (2)",
                     "at least 11"):
            self.assertIn(part, detail)
        got = assert_status(self, c.get("/v1/operations/fence.needs"), 200)
        self.assertEqual(got["lease_seconds"], 12, "the refused change was written")
        # the instance with the route reloads its unchanged config
        gen = self.metric("idemd_config_generation")
        self.server.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while self.metric("idemd_config_generation") == gen:
            self.assertLess(time.monotonic(), deadline, "the reload never happened")
            time.sleep(0.1)
        self.assertEqual(self.metric("idemd_config_last_reload_successful"), 1)
        # a lease that fits is taken
        assert_status(self, c.put("/v1/operations/fence.needs",
                                  dict(harness.DEFAULT_POLICY, lease_seconds=13)), 200)

    def metric(self, name):
        for line in self.anon.get("/metrics").body.decode().splitlines():
            if line.startswith(name + " "):
                return int(line.split()[1])
        return None

    # ---- 3. the deadline the upstream can check

    def test_late_reading_upstream_never_runs_beside_a_retry(self):
        key, marker = str(uuid.uuid4()), uniq("late")
        # idemd waits 1.5 s; the upstream reads at 2 s, works 1.45 s; the
        # lease ends at 3 s, when the retry comes
        first = self.submit(self.server.port, "/late", key, marker, "late=2.0,1.45")
        self.assertIn(first.status, (503, 504), first.describe())
        time.sleep(3.2)
        retry = self.until_not_409(lambda: self.submit(self.b.port, "/late", key, marker,
                                                       "late=0,0.5"), 6)
        assert_status(self, retry, 201)
        time.sleep(1.0)
        runs = self.runs(marker)
        done = [q for q in runs if q.get("executed")]
        self.assertEqual(len(done), 1, runs)
        told = [h for q in runs for h in q["headers"] if h[0].lower() == "idempotency-deadline"]
        self.assertEqual(len(told), len(runs), "a forward went without its deadline")
        for a in runs:
            for b in runs:
                if a is not b and a.get("executed") and b.get("executed"):
                    self.assertFalse(a["start"] < b["end"] and b["start"] < a["end"],
                                     "two executions overlapped: %r" % runs)

    def test_upstream_is_told_the_cut_deadline(self):
        # the claim spends 3 s of its lease (12 s or 13) inside PostgreSQL: the
        # forward is cut from the route's 10 s to what is left less the
        # margin, and the upstream is told that, both ways
        key, marker = str(uuid.uuid4()), uniq("cut")
        self.db("CREATE OR REPLACE FUNCTION slow_needs() RETURNS trigger LANGUAGE plpgsql AS $$ "
                "BEGIN IF NEW.operation_id = (SELECT id FROM operations WHERE name = "
                "'fence.needs') THEN PERFORM pg_sleep(3); END IF; RETURN NEW; END $$; "
                "DROP TRIGGER IF EXISTS slow_needs ON records; CREATE TRIGGER slow_needs BEFORE "
                "INSERT ON records FOR EACH ROW EXECUTE FUNCTION slow_needs()")
        try:
            r = self.submit(self.server.port, "/needs", key, marker)
        finally:
            self.db("DROP TRIGGER IF EXISTS slow_needs ON records")
        assert_status(self, r, 201)
        (q,) = self.runs(marker)
        h = {k.lower(): v for k, v in q["headers"]}
        told, until = int(h["idempotency-timeout-ms"]), int(h["idempotency-deadline"])
        self.assertLess(told, 9600, "told the route's whole timeout: %r" % h)
        self.assertGreater(told, 7000)
        self.assertAlmostEqual(until / 1000.0, q["time"] + told / 1000.0, delta=0.3)

    # ---- 4. a batch cut between its statements

    def test_batch_cut_inside_the_database_keeps_its_fresh_claims(self):
        op = "fence.batch." + uniq("b")
        self.define_operation(op, lease_seconds=30)
        held = uniq("held")
        assert_status(self, self.client.post("/v1/operations/%s/keys/%s/claim" % (op, held), {}),
                      201)
        rid = self.db("SELECT encode(token_id, 'hex') FROM records r JOIN operations o ON "
                      "o.id = r.operation_id WHERE o.name = '%s'" % op)
        # another session holds the row of the claimed key: the batch's
        # second statement (idemd.claim) waits on it, and is cut there
        locker = subprocess.Popen([harness.PSQL, "-X", "-q", "-d", self.idemd.db],
                                  stdin=subprocess.PIPE, env=harness.pg_env(), text=True)
        locker.stdin.write("BEGIN; SELECT 1 FROM records WHERE token_id = '\\x%s' FOR UPDATE;\n"
                           % rid)
        locker.stdin.flush()
        deadline = time.monotonic() + 10
        while self.db("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                      "AND state = 'idle in transaction'") != "1":
            self.assertLess(time.monotonic(), deadline, "the row was never locked")
            time.sleep(0.05)
        fresh = [uniq("f") for _ in range(16)]
        t, out = self.in_thread(lambda: Client(self.server.port, self.api_key, timeout=30).post(
            "/v1/operations/%s/claims" % op,
            {"items": [{"key": k} for k in fresh] + [{"key": held}]}))
        try:
            deadline = time.monotonic() + 10
            cut = ""
            while cut == "":
                self.assertLess(time.monotonic(), deadline, "the second statement never waited: "
                                + repr(out))
                cut = self.db("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                              "WHERE datname = current_database() AND wait_event_type = 'Lock' "
                              "AND query LIKE '%%idemd.claim(%%' LIMIT 1")
                time.sleep(0.05)
            time.sleep(0.5)
        finally:
            locker.stdin.write("COMMIT;\n")
            locker.stdin.close()
            locker.wait(10)
        t.join(30)
        items = {i["key"]: i for i in assert_status(self, out["r"], 200)["items"]}
        for k in fresh:
            self.assertEqual((items[k]["status"], items[k].get("attempt")), (201, 1), items[k])
        self.assertEqual(items[held]["status"], 409, items[held])
        # each fresh record's trail: its one claim, held by the batch's caller
        for k in fresh[:3]:
            again = self.client.post("/v1/operations/%s/keys/%s/claim" % (op, k), {})
            assert_problem(self, again, 409, "request_in_progress")


class ClockStep(IdemdCase):
    """A host whose wall clock steps back while records end."""

    def test_clock_stepping_back_never_serves_an_ended_record(self):
        self.assertTrue(os.path.exists(FAKETIME), "libfaketime is missing (deploy/deps.sh --test)")
        step = os.path.join(self.idemd.tmp, "faketime")
        with open(step, "w") as f:
            f.write("+0\n")
        asan = (os.environ.get("ASAN_OPTIONS", "") + ":verify_asan_link_order=0").lstrip(":")
        srv = self.idemd.start(env={"LD_PRELOAD": FAKETIME, "FAKETIME_TIMESTAMP_FILE": step,
                                    "FAKETIME_DONT_FAKE_MONOTONIC": "1",
                                    "FAKETIME_NO_CACHE": "1", "ASAN_OPTIONS": asan})
        c = Client(srv.port, self.api_key)
        op = self.put_operation(token_ttl_seconds=1, retention_seconds=3, lease_seconds=30)
        # twelve records ending 0.1 s apart, each in the replay cache
        ends = {}
        for _ in range(12):
            path = "/v1/operations/%s/keys/%s" % (op, uniq("evt"))
            assert_status(self, c.post(path + "/claim", {}), 201)
            done = assert_status(self, c.post(path + "/complete",
                                              {"attempt": 1, "status": 200, "body": "x"}), 200)
            ends[path] = harness.parse_time(done["expires_at"])
            assert_status(self, c.post(path + "/claim", {}), 200)
            time.sleep(0.1)
        # from half a second before the first end, the host's clock steps
        # back 10 s more every 0.15 s, each step unseen until idemd next
        # reads the database's clock (every second); each record is asked
        # for until a claim after its end gets something else than a replay
        late, back, next_step, open_ = [], 0, min(ends.values()) - 0.5, set(ends)
        while open_ and time.time() < max(ends.values()) + 2:
            if time.time() >= next_step:
                back += 10
                with open(step, "w") as f:
                    f.write("-%d\n" % back)
                next_step += 0.15
            for path in sorted(open_):
                if time.time() <= ends[path] + 0.05:
                    continue
                r = c.post(path + "/claim", {})
                if r.status == 200:
                    late.append(round(time.time() - ends[path], 3))
                else:
                    open_.discard(path)
            time.sleep(0.01)
        self.assertEqual(late, [], "replayed past the record's end (s after it)")


if __name__ == "__main__":
    harness.main()
