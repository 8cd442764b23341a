"""Fault test (c): a PostgreSQL restart (fast shutdown, then start) under
load from several client threads. While the database is down idemd answers
503 unavailable with Retry-After, quickly; it recovers by itself; and no
2xx was lost: every acknowledged issue, claim, completion and version bump
is readable afterwards.

This test stops the shared PostgreSQL cluster: it must not run in parallel
with the other integration tests (ctest RUN_SERIAL). It restarts the cluster
in all cases."""

import collections
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (PGCTL, PGDATA, Client, IdemdCase, assert_status, pg_ctl,  # noqa: E402
                     psql, uniq)
import faultkit  # noqa: E402

LOAD_BEFORE = 1.0      # seconds of load before the stop
DOWN_FOR = 3.0         # seconds the database stays down
LOAD_AFTER = 1.5       # seconds of load after the first post-restart 2xx
DOWN_DEADLINE = 3.0    # every request answers within this while the database is down
UP_DEADLINE = 10.0     # the service recovers within this after the database is back
CYCLE_THREADS = 6
BUMP_THREADS = 2


class Ex:
    """One exchange of the load: what, when, and the answer."""
    __slots__ = ("kind", "t0", "t1", "status", "code", "retry_after", "ct", "err")

    def __init__(self, kind, t0, t1, r=None, err=None):
        self.kind, self.t0, self.t1, self.err = kind, t0, t1, err
        self.status = r.status if r is not None else None
        j = r.json if r is not None and isinstance(r.json, dict) else {}
        self.code = j.get("code") if r is not None and r.status >= 400 else None
        self.retry_after = r.header("retry-after") if r is not None else None
        self.ct = (r.header("content-type") or "") if r is not None else ""


class DatabaseRestartUnderLoad(IdemdCase):
    extra_config = {"pool_size": 4, "threads": 8}

    def start_pg(self):
        p = pg_ctl("start", "-w", "-D", PGDATA, "-l", os.path.join(PGDATA, "restart.log"))
        if p.returncode != 0:
            raise AssertionError("pg_ctl start failed (%d): %s %s"
                                 % (p.returncode, p.stdout, p.stderr))

    def test_database_restart_under_load(self):
        self.assertTrue(PGDATA and PGCTL, "IDEMD_TEST_PGDATA and IDEMD_TEST_PGCTL must be set "
                        "(tests/run.sh sets them) to stop and start the cluster")
        op = self.put_operation(lease_seconds=30)
        port = self.server.port
        lock = threading.Lock()
        stop = threading.Event()
        log = []                                 # every Ex
        issued, claimed, completed = {}, {}, {}  # token -> (i, attempt / response)
        bumps = collections.defaultdict(lambda: [0, 0])   # key -> [acknowledged, ambiguous]
        vkeys = {}

        def call(kind, fn):
            t0 = time.monotonic()
            try:
                r = fn()
            except OSError as e:
                ex = Ex(kind, t0, time.monotonic(), err=e)
                r = None
            else:
                ex = Ex(kind, t0, time.monotonic(), r)
            with lock:
                log.append(ex)
            return r

        def cycle(w):
            c = Client(port, self.api_key, timeout=15)
            n = 0
            while not stop.is_set():
                n += 1
                r = call("issue", lambda: c.post("/v1/tokens", {"operation": op,
                                                                "subject": "db-%d" % w}))
                if r is None or r.status != 201:
                    time.sleep(0.02)
                    continue
                tok = r.json["token"]
                with lock:
                    issued[tok] = (w, n)
                r = call("claim", lambda: c.post("/v1/tokens/%s/claim" % tok,
                                                 {"request": {"w": w, "n": n}}))
                if r is None or r.status != 201:
                    time.sleep(0.02)
                    continue
                with lock:
                    claimed[tok] = r.json["attempt"]
                resp = {"status": 201, "headers": {"Location": "/o/%d-%d" % (w, n)},
                        "body": {"w": w, "n": n}}
                r = call("complete", lambda: c.post("/v1/tokens/%s/complete" % tok,
                                                    dict(resp, attempt=claimed[tok])))
                if r is not None and r.status == 200:
                    with lock:
                        completed[tok] = resp

        def bumper(w):
            c = Client(port, self.api_key, timeout=15)
            key = vkeys[w]
            current = None
            while not stop.is_set():
                if current is None:
                    r = call("get version", lambda: c.get("/v1/versions/" + key))
                    if r is None or r.status != 200:
                        time.sleep(0.02)
                        continue
                    current = r.json["version"]
                r = call("bump", lambda: c.post("/v1/versions/" + key,
                                                headers={"If-Match": '"%d"' % current}))
                if r is not None and r.status == 200:
                    with lock:
                        bumps[key][0] += 1
                    current = r.json["version"]
                else:
                    with lock:
                        bumps[key][1] += 1
                    current = None   # ambiguous: read it again

        for w in range(BUMP_THREADS):
            vkeys[w] = uniq("stock") + ":w%d" % w
        threads = ([threading.Thread(target=cycle, args=(w,), daemon=True)
                    for w in range(CYCLE_THREADS)] +
                   [threading.Thread(target=bumper, args=(w,), daemon=True)
                    for w in range(BUMP_THREADS)])
        for t in threads:
            t.start()

        ready_down = []
        stopped = False
        try:
            time.sleep(LOAD_BEFORE)
            t_stop0 = time.monotonic()
            p = pg_ctl("stop", "-m", "fast", "-w", "-D", PGDATA)
            t_stop1 = time.monotonic()
            self.assertEqual(p.returncode, 0, "pg_ctl stop: %s %s" % (p.stdout, p.stderr))
            stopped = True
            while time.monotonic() - t_stop1 < DOWN_FOR:
                r = call("readyz", lambda: Client(port, timeout=10).get("/readyz"))
                ready_down.append(r.status if r is not None else None)
                time.sleep(0.3)
        finally:
            t_start0 = time.monotonic()
            if stopped:
                self.start_pg()
            t_start1 = time.monotonic()
        if not stopped:
            stop.set()
            for t in threads:
                t.join(30)
            return
        # run until the first 2xx write after the restart, then a little more
        t_up = None
        deadline = t_start1 + UP_DEADLINE
        while time.monotonic() < deadline and t_up is None:
            with lock:
                t_up = min((ex.t1 for ex in log if ex.t0 >= t_start1 and ex.status in (200, 201)
                            and ex.kind in ("claim", "complete", "bump")), default=None)
            time.sleep(0.05)
        if t_up is not None:
            time.sleep(LOAD_AFTER)
        stop.set()
        for t in threads:
            t.join(30)
        self.assertFalse(any(t.is_alive() for t in threads), "load threads hung")
        self.assertIsNone(self.server.proc.poll(), "idemd exited during the outage")

        # ---- figures
        def phase(ex):
            if ex.t1 < t_stop0:
                return "before"
            if ex.t0 >= t_stop1 and ex.t1 <= t_start0:
                return "down"
            if ex.t0 >= t_start1:
                return "after"
            return "edges"

        fig = collections.defaultdict(collections.Counter)
        lat = collections.defaultdict(list)
        for ex in log:
            ph = phase(ex)
            label = "error" if ex.err else ("%d %s" % (ex.status, ex.code or "")).strip()
            fig[ph]["%s %s" % (ex.kind, label)] += 1
            lat[ph].append(ex.t1 - ex.t0)
        for ph in ("before", "edges", "down", "after"):
            print("\n  %-6s %s" % (ph, dict(sorted(fig[ph].items()))), end="")
            if lat[ph]:
                print("\n         latency %s" % faultkit.latency_line(lat[ph]), end="")
        recovered = (t_up - t_start1) if t_up is not None else None
        print("\n  pg_ctl stop took %.2fs, database down %.2fs; readyz while down: %s; first 2xx "
              "write %s after pg_ctl start returned"
              % (t_stop1 - t_stop0, t_start0 - t_stop1, collections.Counter(ready_down),
                 "%.2fs" % recovered if recovered is not None else "never"))

        # ---- while down: 503 unavailable, Retry-After, problem+json, quickly
        errors = [ex for ex in log if ex.err]
        self.assertEqual(errors, [], "connection errors: %r" % [(e.kind, e.err) for e in errors[:5]])
        for ex in log:
            self.assertNotIn(ex.status, (500, 502, 504), "%s answered %s" % (ex.kind, ex.status))
            if ex.status == 503 and ex.kind != "readyz":
                self.assertEqual(ex.code, "unavailable", ex.kind)
                self.assertTrue((ex.retry_after or "").strip().isdigit(), ex.kind)
                self.assertEqual(ex.ct.split(";")[0], "application/problem+json", ex.kind)
        down = [ex for ex in log if phase(ex) == "down"]
        self.assertGreater(len(down), 10, "too few requests while the database was down")
        for ex in down:
            self.assertLess(ex.t1 - ex.t0, DOWN_DEADLINE, "%s took %.2fs while down"
                            % (ex.kind, ex.t1 - ex.t0))
            if ex.kind == "issue":
                # issuing signs with keys held in memory and may use the cached policy
                self.assertIn(ex.status, (201, 503), ex.kind)
            else:
                self.assertEqual(ex.status, 503, "%s answered %s while the database was down"
                                 % (ex.kind, ex.status))
        self.assertTrue(ready_down and all(s == 503 for s in ready_down),
                        "readyz while down: %r" % ready_down)

        # ---- recovered by itself
        self.assertIsNotNone(t_up, "no 2xx write within %.0fs after the database came back"
                             % UP_DEADLINE)
        after = [ex for ex in log if ex.t0 >= t_up]
        self.assertTrue(after and all(ex.status in (200, 201) for ex in after),
                        "after recovery: %s" % collections.Counter(
                            (ex.kind, ex.status) for ex in after))
        assert_status(self, self.anon.get("/readyz"), 200)

        # ---- no 2xx lost
        c = Client(port, self.api_key)
        states = collections.Counter()
        for tok in issued:
            r = c.get("/v1/tokens/%s" % tok)
            j = assert_status(self, r, 200)
            if tok in completed:
                self.assertEqual(j["state"], "completed", r.describe())
                self.assertEqual(j["response"], completed[tok], r.describe())
                states["completed (acknowledged)"] += 1
            elif tok in claimed:
                self.assertIn(j["state"], ("in_progress", "completed"), r.describe())
                self.assertGreaterEqual(j["attempt"], claimed[tok], r.describe())
                states["claimed (acknowledged) -> %s" % j["state"]] += 1
            else:
                self.assertIn(j["state"], ("issued", "in_progress"), r.describe())
                states["issued (acknowledged) -> %s" % j["state"]] += 1
        for tok, resp in completed.items():
            r = c.post("/v1/tokens/%s/claim" % tok, {"request": {"w": resp["body"]["w"],
                                                                 "n": resp["body"]["n"]}})
            j = assert_status(self, r, 200)
            self.assertEqual(j["response"], resp, r.describe())
        for w, key in vkeys.items():
            acked, ambiguous = bumps[key]
            v = self.version(key)
            self.assertGreaterEqual(v, acked, "key %s: %d bumps acknowledged, version %d"
                                    % (key, acked, v))
            self.assertLessEqual(v, acked + ambiguous, key)
            states["version bumps acknowledged %d, ambiguous %d, final version %d"
                   % (acked, ambiguous, v)] += 1
        print("  no 2xx lost: %d tokens issued, %d claims and %d completions acknowledged, "
              "all readable; %s" % (len(issued), len(claimed), len(completed),
                                    dict(sorted(states.items()))))


class QuietRestart(IdemdCase):
    """PostgreSQL restarts while idemd is idle: every pooled connection it
    closed is replaced when next taken, before anything is sent on it, so
    the first requests afterwards succeed instead of each getting a 503."""
    extra_config = {"pool_size": 4, "threads": 4}

    def test_requests_after_an_idle_restart_all_succeed(self):
        self.assertTrue(PGDATA and PGCTL, "IDEMD_TEST_PGDATA and IDEMD_TEST_PGCTL must be set")
        op = self.put_operation()
        toks = [self.issue(op) for _ in range(8)]
        # use every pooled connection once, concurrently
        threads = [threading.Thread(target=self.client.get, args=("/v1/tokens/%s" % t,))
                   for t in toks]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        p = pg_ctl("restart", "-w", "-m", "fast", "-D", PGDATA,
                   "-l", os.path.join(PGDATA, "restart.log"))
        self.assertEqual(p.returncode, 0, "pg_ctl restart failed: %s %s" % (p.stdout, p.stderr))
        statuses = [self.client.get("/v1/tokens/%s" % t).status for t in toks * 2]
        self.assertEqual(statuses, [200] * len(statuses),
                         "requests after an idle restart: %s" % statuses)


class StalledDatabase(IdemdCase):
    """PostgreSQL stops answering without closing anything (its backends
    frozen with SIGSTOP): a request gets 503 unavailable once
    database_timeout_ms has passed instead of hanging, and idemd recovers
    once PostgreSQL answers again."""
    extra_config = {"pool_size": 2, "threads": 4, "database_timeout_ms": 1000}

    def backends(self):
        out = psql("SELECT pid FROM pg_stat_activity WHERE datname = '%s' "
                   "AND pid <> pg_backend_pid()" % self.idemd.db)
        return [int(x) for x in out.split()]

    def test_stalled_database_gives_503_then_recovers(self):
        op = self.put_operation()
        tok = self.issue(op)
        assert_status(self, self.client.get("/v1/tokens/%s" % tok), 200)
        pids = self.backends()
        self.assertTrue(pids, "no backend of idemd's database found")
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            r = self.client.get("/v1/tokens/%s" % tok)
            took = time.monotonic() - t0
            self.assertEqual(r.status, 503, r.describe())
            self.assertEqual(r.json.get("code"), "unavailable", r.describe())
            self.assertLess(took, 4.0, "a stalled database held the request %.1f s" % took)
        finally:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        while True:
            r = self.client.get("/v1/tokens/%s" % tok)
            if r.status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert_status(self, r, 200)


if __name__ == "__main__":
    harness.main()
