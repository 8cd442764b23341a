"""Fault test (b): kill -9 of an idemd in the middle of in-flight claims and
of in-flight gateway forwards, then a restart.

- Every acknowledged completion is still there (introspection and replay
  give the same response).
- Every token left in progress becomes claimable after its lease (1-2 s
  here) with attempt + 1, and the dead attempt is fenced off (lease_lost).
- A forward cut by the crash is retried after the lease with the same
  Idempotency-Key (the token id), so the upstream can dedupe: the order is
  executed once, and the client gets that one outcome."""

import collections
import os
import random
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Client, IdemdCase, assert_problem, assert_status, psql  # noqa: E402
import faultkit  # noqa: E402

LEASE = 2          # seconds, the operations' lease
FORWARDS = 12      # gateway forwards in flight at the kill
DONE_FORWARDS = 5  # gateway forwards acknowledged before the kill


class CrashRestart(IdemdCase):
    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(faultkit.Upstream(status=201))
        cls.extra_config = {
            "pool_size": 8, "threads": 8,
            "routes": [{"method": "POST", "path": "/orders", "tenant": "acme",
                        "operation": "gw.order", "upstream": cls.up.url + "/orders",
                        "store_headers": ["Location"],
                        "connect_timeout_ms": 500, "timeout_ms": 1500}],
        }
        super().setUpClass()
        cls.define_operation("gw.order", lease_seconds=LEASE)

    def restart(self, victim):
        """kill -9 VICTIM, start a new idemd on its port; returns it."""
        t0 = time.monotonic()
        victim.proc.kill()
        victim.proc.wait(10)
        victim._close()
        srv = self.idemd.start(port=victim.port)
        print("  idemd killed (SIGKILL, exit %d) and restarted in %.2fs"
              % (victim.proc.returncode, time.monotonic() - t0))
        return srv

    # ------------------------------------------------------------ API claims

    def test_kill9_during_claims(self):
        op = self.put_operation(lease_seconds=LEASE)
        toks = []
        for _ in range(6):
            toks += [t["token"] for t in
                     assert_status(self, self.issue_resp(op, "crash-user", count=100), 201)["tokens"]]
        victim = self.server
        port = victim.port
        jobs = faultkit.JobQueue(range(len(toks)))
        lock = threading.Lock()
        stop = threading.Event()
        claim_ack = {}       # index -> attempt
        claim_sent = set()   # claim sent, no answer (connection cut)
        done_ack = {}        # index -> response stored (acknowledged)
        done_sent = {}       # index -> response sent, no answer
        inflight = collections.Counter()
        unexpected = []

        def response_for(i):
            return {"status": 201, "headers": {"Location": "/orders/%d" % i},
                    "body": {"order_id": i, "amount": 100 + i}}

        def worker(w):
            c = Client(port, self.api_key, timeout=10)
            rng = random.Random(w)
            while not stop.is_set():
                i = jobs.next()
                if i is None:
                    return
                with lock:
                    inflight["claim"] += 1
                try:
                    r = c.post("/v1/tokens/%s/claim" % toks[i], {"request": {"i": i}})
                except OSError:
                    with lock:
                        claim_sent.add(i)
                    return
                finally:
                    with lock:
                        inflight["claim"] -= 1
                if r.status != 201:
                    with lock:
                        unexpected.append(r.describe())
                    continue
                with lock:
                    claim_ack[i] = r.json["attempt"]
                if rng.random() < 0.25:
                    continue            # this backend "dies" before completing
                time.sleep(rng.uniform(0, 0.02))
                exp = response_for(i)
                with lock:
                    inflight["complete"] += 1
                try:
                    cr = c.post("/v1/tokens/%s/complete" % toks[i],
                                dict(exp, attempt=r.json["attempt"]))
                except OSError:
                    with lock:
                        done_sent[i] = exp
                    return
                finally:
                    with lock:
                        inflight["complete"] -= 1
                with lock:
                    if cr.status == 200:
                        done_ack[i] = exp
                    else:
                        unexpected.append(cr.describe())

        ts = [threading.Thread(target=worker, args=(w,), daemon=True) for w in range(16)]
        for t in ts:
            t.start()
        deadline = time.monotonic() + 20
        while len(done_ack) < 150 and time.monotonic() < deadline:
            time.sleep(0.005)
        with lock:
            at_kill = dict(inflight)
        t_kill = time.monotonic()
        victim.proc.kill()
        stop.set()
        for t in ts:
            t.join(20)
        self.assertFalse(any(t.is_alive() for t in ts), "workers hung after the kill")
        self.assertEqual(unexpected, [], "unexpected answers before the kill:\n%s"
                         % "\n".join(unexpected[:3]))
        self.assertGreater(len(done_ack), 0, "nothing was completed before the kill")
        server = self.restart(victim)
        c = server.client(self.api_key)

        print("  at the kill: in flight %s; acknowledged: %d claims, %d completions; "
              "cut: %d claims, %d completions"
              % (at_kill, len(claim_ack), len(done_ack), len(claim_sent), len(done_sent)))

        # 1. every acknowledged completion survived, and replays
        for i, exp in done_ack.items():
            j = assert_status(self, c.get("/v1/tokens/%s" % toks[i]), 200)
            self.assertEqual(j["state"], "completed", "token %d lost its completion" % i)
            self.assertEqual(j["response"], exp, "token %d" % i)
            r = c.post("/v1/tokens/%s/claim" % toks[i], {"request": {"i": i}})
            j = assert_status(self, r, 200)
            self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
            self.assertEqual(j["response"], exp, r.describe())

        # 2. the state of every other token is one the requests allow
        states = collections.Counter()
        in_progress = {}
        for i in range(len(toks)):
            if i in done_ack:
                states["completed (acknowledged)"] += 1
                continue
            j = assert_status(self, c.get("/v1/tokens/%s" % toks[i]), 200)
            st = j["state"]
            # a claim whose lease has run out shows as issued again, with
            # the attempt that held it
            if st == "issued" and j["attempt"] > 0:
                st = "issued (lease ran out)"
            if i in claim_ack:
                allowed = ["in_progress", "issued (lease ran out)"]
                what = "claimed"
                if i in done_sent:
                    allowed.append("completed")
                    what += ", completion cut"
            elif i in claim_sent:
                allowed, what = ("issued", "in_progress", "issued (lease ran out)"), "claim cut"
            else:
                allowed, what = ("issued",), "never claimed"
            states["%s -> %s" % (what, st)] += 1
            self.assertIn(st, allowed, "token %d (%s) is %s: %r" % (i, what, st, j))
            if i in claim_ack and st != "completed":
                self.assertEqual(j["attempt"], claim_ack[i], "token %d: %r" % (i, j))
            if st == "completed":
                self.assertEqual(j["response"], done_sent[i], "token %d" % i)
            if st in ("in_progress", "issued (lease ran out)"):
                in_progress[i] = j["attempt"]
        print("  after the restart: %s" % dict(sorted(states.items())))
        self.assertGreater(len(in_progress), 0, "no token was left in progress")

        # 3. tokens left in progress: 409 while the lease runs, then taken
        #    over with attempt + 1; the dead attempt is fenced off
        wait = t_kill + LEASE + 0.3 - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        takeovers = collections.Counter()
        for i, attempt in in_progress.items():
            r = c.post("/v1/tokens/%s/claim" % toks[i], {"request": {"i": i}})
            j = assert_status(self, r, 201)
            self.assertEqual(j["attempt"], attempt + 1, r.describe())
            takeovers[j["attempt"]] += 1
            assert_problem(self, c.post("/v1/tokens/%s/complete" % toks[i],
                                        dict(response_for(i), attempt=attempt)),
                           409, "lease_lost")
            assert_status(self, c.post("/v1/tokens/%s/complete" % toks[i],
                                       dict(response_for(i), attempt=attempt + 1)), 200)
        print("  %d tokens left in progress were taken over after the %ds lease "
              "(new attempt: count %s); each dead attempt got 409 lease_lost"
              % (len(in_progress), LEASE, dict(takeovers)))
        rows = psql("SELECT state, count(*) FROM records r JOIN operations o "
                    "ON o.id = r.operation_id WHERE o.name = '%s' GROUP BY 1 ORDER BY 1" % op,
                    db=self.idemd.db).split()
        print("  records now: %s" % rows)

    # ------------------------------------------------------------ gateway forwards

    def test_kill9_during_gateway_forwards(self):
        server = self.server if self.server.proc.poll() is None else self.idemd.servers[-1]
        self.assertIsNone(server.proc.poll())

        def issue():
            j = assert_status(self, self.issue_resp("gw.order", "gw-user"), 201)
            return j["token"], j["id"]

        def submit(port, tok, i, timeout=10):
            return Client(port, timeout=timeout).request(
                "POST", "/orders", {"sku": "sku-%d" % i, "qty": 1},
                headers={"Idempotency-Key": tok}, api_key=None)

        self.up.release()
        n_before = len(self.up.requests)
        # forwards acknowledged before the crash
        done = []
        for i in range(DONE_FORWARDS):
            tok, tid = issue()
            r = submit(server.port, tok, i)
            self.assertEqual(r.status, 201, r.describe())
            self.assertEqual(r.header("idempotent-replayed"), "false", r.describe())
            done.append((tok, tid, i, r.body))

        # forwards in flight at the crash: the upstream holds them
        self.up.hold()
        cut = [issue() + (DONE_FORWARDS + k,) for k in range(FORWARDS)]
        results = {}

        def run(tok, i):
            try:
                results[tok] = submit(server.port, tok, i)
            except OSError as e:
                results[tok] = e

        t_claims = time.monotonic()
        ts = [threading.Thread(target=run, args=(tok, i), daemon=True) for tok, _, i in cut]
        for t in ts:
            t.start()
        if not self.up.wait_requests(n_before + DONE_FORWARDS + FORWARDS, 10):
            for t in ts:
                t.join(5)
            self.fail("the upstream received %d of %d forwards; the clients got: %s"
                      % (len(self.up.requests) - n_before - DONE_FORWARDS, FORWARDS,
                         faultkit.status_figures(list(results.values()))))
        server = self.restart(server)
        for t in ts:
            t.join(10)
        self.up.release()      # the upstream "executes" the orders; its answers go nowhere
        cut_errors = sum(1 for v in results.values() if isinstance(v, BaseException))
        print("  %d forwards in flight at the kill: %d clients saw the connection cut"
              % (FORWARDS, cut_errors))
        self.assertEqual(cut_errors, FORWARDS, {k[:12]: v for k, v in results.items()})

        # while the dead attempt's lease runs, a retry is told to wait
        # (only while the lease surely runs: a later retry would take over)
        early = time.monotonic() - t_claims
        if early < LEASE - 0.5:
            r = submit(server.port, cut[0][0], cut[0][2])
            assert_problem(self, r, 409, "request_in_progress")
            print("  retry %.2fs after the claim (lease %ds): 409 request_in_progress"
                  % (early, LEASE))
        # after the lease: the retry forwards again with the same key
        time.sleep(max(0, t_claims + LEASE + 0.3 - time.monotonic()))
        second = {}
        for tok, tid, i in cut:
            r = submit(server.port, tok, i)
            self.assertEqual(r.status, 201, r.describe())
            self.assertEqual(r.header("idempotent-replayed"), "false", r.describe())
            second[tok] = r

        by_key = self.up.by_key()
        executions = 0
        for tok, tid, i in cut:
            recs = by_key.get(tid, [])
            self.assertEqual(len(recs), 2, "token id %s: upstream saw %d requests"
                             % (tid, len(recs)))
            self.assertEqual([rec["headers"].get("idempotency-key") for rec in recs], [tid, tid])
            self.assertEqual(len({rec["headers"].get("idempotency-subject") for rec in recs}), 1)
            self.assertEqual(recs[0]["body"], recs[1]["body"])
            self.assertEqual([rec["deduped"] for rec in recs], [False, True],
                             "the upstream could not dedupe the retry")
            executions += 1
            # the client got the outcome of the one execution
            self.assertEqual(second[tok].json["key"], tid, second[tok].describe())
            j = assert_status(self, self.introspect(tok, Client(server.port, self.api_key)), 200)
            self.assertEqual((j["state"], j["attempt"]), ("completed", 2), j)
        print("  after the %ds lease: %d retries forwarded again with the same "
              "Idempotency-Key (attempt 2); the upstream deduped all %d (orders executed "
              "once each)" % (LEASE, len(cut), executions))

        # nothing more reaches the upstream: everything now replays
        n = len(self.up.requests)
        for tok, tid, i, body in done:
            r = submit(server.port, tok, i)
            self.assertEqual(r.status, 201, r.describe())
            self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
            self.assertEqual(r.body, body, r.describe())
        for tok, tid, i in cut:
            r = submit(server.port, tok, i)
            self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
            self.assertEqual(r.body, second[tok].body, r.describe())
        self.assertEqual(len(self.up.requests), n, "a replay reached the upstream")
        print("  %d forwards acknowledged before the kill and %d retried ones replay "
              "without reaching the upstream" % (len(done), len(cut)))


if __name__ == "__main__":
    harness.main()
