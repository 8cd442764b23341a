"""The failures users of idempotency layers report most, each replayed
against two idemd processes on one database, with an upstream that does
what a real order service does: it dedupes by the Idempotency-Key it is
sent, so a key it has seen makes no second order.

- A lease ends while its holder still works: the takeover gets attempt 2,
  the holder's late complete gets 409 lease_lost and is dropped, every
  duplicate replays attempt 2's answer. On a gateway route the forward is
  cut before its lease ends (504) and the key stays held until the lease
  ends (a retry meanwhile gets 409); the retry after it reaches an upstream
  that ignored its deadline and still works on the first request, with the
  same key, and the upstream makes one order.
- The database goes down after the upstream answered: the client gets 503
  unavailable, nothing half-written is left, and the takeover after the
  lease forwards the same key.
- Revoke against claim, and the janitor's sweep against claims, on two
  instances at once: one winner each time; a swept token is 410, never
  run again.
- A retry after retention ended: 410 token_expired, never a second
  execution (through the API and through a gateway route). A token's
  record is kept until the token itself expires, so the token's expiry is
  what refuses it; a caller key carries no expiry of its own, and once its
  record is swept it is new again (docs/service-calls.md).

Lease ends with a late complete on a single instance, and a completion
write refused by the database (a trigger), are in test_claims.py and
test_gateway.py; here the same failures are met across instances and with
a real outage."""

import collections
import http.server
import json
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Client, Idemd, assert_problem, assert_retry_after,  # noqa: E402
                     assert_status, parse_time, psql, uniq)


class DedupingUpstream:
    """An order service on 127.0.0.1 that keeps one order per
    Idempotency-Key: a key it has seen gets the same order back. Each
    request is recorded (key, subject, arrival and answer times). The
    X-Work-Seconds header makes it work that long before answering."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.orders = {}     # key -> order number
        self.made = 0
        up = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                key = self.headers.get("Idempotency-Key")
                rec = {"key": key, "subject": self.headers.get("Idempotency-Subject"),
                       "body": body.decode("utf-8", "replace"), "t0": time.time()}
                with up.lock:
                    up.requests.append(rec)
                    if key not in up.orders:
                        up.made += 1
                        up.orders[key] = up.made
                    order = up.orders[key]
                time.sleep(float(self.headers.get("X-Work-Seconds") or 0))
                out = json.dumps({"order": order, "key": key}).encode()
                rec["t1"] = time.time()
                try:
                    self.send_response(201)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Location", "/orders/%d" % order)
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except OSError:
                    pass   # the gateway gave up on this request

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.1,),
                                       daemon=True)
        self.thread.start()

    def seen(self, key):
        with self.lock:
            return [dict(r) for r in self.requests if r["key"] == key]

    def orders_for(self, key):
        with self.lock:
            return 1 if key in self.orders else 0

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def run_all(fns):
    """Runs each callable on its own thread, started together; returns their
    results (or the exception each raised) in order."""
    out = [None] * len(fns)
    barrier = threading.Barrier(len(fns))

    def go(i):
        barrier.wait()
        try:
            out[i] = fns[i]()
        except Exception as e:  # noqa: BLE001 - reported by the caller
            out[i] = e
    ts = [threading.Thread(target=go, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return out


def code(r):
    j = r.json
    return j.get("code") if isinstance(j, dict) else None


class Scenarios(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.up = DedupingUpstream()
        u = "http://127.0.0.1:%d" % cls.up.port
        cls.ops = {
            "held": uniq("scn.held"),        # lease 1 s: the holder outlives it
            "gw": uniq("scn.gw"),            # gateway, lease 2 s: forwards end at 1.5 s
            "retain": uniq("scn.retain"),    # short TTL and retention
            "race": uniq("scn.race"),        # long lease and TTL
        }
        routes = [
            {"method": "POST", "path": "/orders", "tenant": "shop", "operation": cls.ops["gw"],
             "upstream": u + "/orders", "store_headers": ["Location"], "timeout_ms": 1500},
            {"method": "POST", "path": "/orders/short", "tenant": "shop",
             "operation": cls.ops["retain"], "upstream": u + "/orders", "timeout_ms": 1500},
        ]
        cls.idemd = Idemd({"sweep_interval_seconds": 1, "pool_size": 4, "threads": 4,
                           "routes": routes})
        try:
            cls.idemd.migrate()
            cls.key = cls.idemd.tenant_create("shop")
            cls.a = cls.idemd.start()
            cls.b = cls.idemd.start(port=harness.free_port())
            cls.ca, cls.cb = cls.a.client(cls.key), cls.b.client(cls.key)
            policies = {
                "held": {"token_ttl_seconds": 3600, "retention_seconds": 3600,
                         "lease_seconds": 1},
                "gw": {"token_ttl_seconds": 3600, "retention_seconds": 3600,
                       "lease_seconds": 2},
                "retain": {"token_ttl_seconds": 2, "retention_seconds": 4, "lease_seconds": 2},
                "race": {"token_ttl_seconds": 3600, "retention_seconds": 3600,
                         "lease_seconds": 30},
            }
            for k, p in policies.items():
                r = cls.ca.put("/v1/operations/" + cls.ops[k], p)
                assert r.status == 201, r.describe()
        except BaseException:
            cls.idemd.cleanup()
            cls.up.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            harness.shut_down(cls.idemd)
        finally:
            cls.up.stop()

    # ---- helpers

    def issue(self, op, client=None, **kw):
        body = {"operation": self.ops[op], "subject": "user-42"}
        body.update(kw)
        r = (client or self.ca).post("/v1/tokens", body)
        return assert_status(self, r, 201)

    def submit(self, server, token, path="/orders", work=0.0, timeout=20.0):
        h = {"Idempotency-Key": token}
        if work:
            h["X-Work-Seconds"] = str(work)
        return Client(server.port, timeout=timeout).request(
            "POST", path, b'{"cart": 9, "total": 500}', headers=h, api_key=None)

    def events(self, rid):
        r = self.ca.get("/v1/records/%s/events" % rid)
        return [(e["event"], e.get("attempt")) for e in assert_status(self, r, 200)["events"]]

    # ---- a lease ends while its holder still works

    def check_lease_ends_while_holder_works(self, base, rid):
        req = {"request": {"cart": 9, "total": 500}}
        j = assert_status(self, self.ca.post(base + "/claim", req), 201)
        self.assertEqual(j["attempt"], 1)
        # the holder (worker 1, through A) is slow; its 1 s lease runs out
        time.sleep(1.3)
        j = assert_status(self, self.cb.post(base + "/claim", req), 201)
        self.assertEqual(j["attempt"], 2, "a duplicate after the lease ended takes over")
        late = {"attempt": 1, "status": 201, "body": {"order": "from attempt 1"}}
        assert_problem(self, self.ca.post(base + "/complete", late), 409, "lease_lost")
        assert_problem(self, self.ca.post(base + "/checkpoint",
                                          {"attempt": 1, "phase": "late"}), 409, "lease_lost")
        answer = {"status": 201, "headers": {"Location": "/orders/2"},
                  "body": {"order": "from attempt 2"}}
        assert_status(self, self.cb.post(base + "/complete", dict(answer, attempt=2)), 200)
        # the holder tries again after attempt 2 completed: still fenced off
        assert_problem(self, self.ca.post(base + "/complete", late), 409, "lease_lost")
        # every duplicate, on either instance, at once, replays attempt 2's answer
        dups = run_all([lambda c=c: c.post(base + "/claim", req)
                        for c in (self.ca, self.cb) * 5])
        for r in dups:
            self.assertIsInstance(r, harness.Response, r)
            j = assert_status(self, r, 200)
            self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
            self.assertEqual(j["response"], answer, r.describe())
        j = assert_status(self, self.cb.get(base), 200)
        self.assertEqual((j["state"], j["attempt"], j["response"]), ("completed", 2, answer))
        self.assertEqual(self.events(rid), [("claimed", 1), ("taken_over", 2), ("completed", 2)],
                         "one completion, by attempt 2; attempt 1's writes left no trace")

    def test_lease_ends_while_holder_works_token(self):
        j = self.issue("held")
        self.check_lease_ends_while_holder_works("/v1/tokens/" + j["token"], j["id"])

    def test_lease_ends_while_holder_works_caller_key(self):
        key = uniq("order")
        base = "/v1/operations/%s/keys/%s" % (self.ops["held"], key)
        r = self.ca.get(base)
        assert_problem(self, r, 404, "record_not_found")
        # attempt 1 is claimed and released: the id comes with its 201
        req = {"request": {"cart": 9, "total": 500}}
        j = assert_status(self, self.cb.post(base + "/claim", req), 201)
        rid = j["id"]
        assert_status(self, self.cb.post(base + "/release", {"attempt": 1}), 200)
        # attempt 2 now plays the slow holder, attempt 3 the takeover
        j = assert_status(self, self.ca.post(base + "/claim", req), 201)
        self.assertEqual(j["attempt"], 2)
        time.sleep(1.3)
        j = assert_status(self, self.cb.post(base + "/claim", req), 201)
        self.assertEqual(j["attempt"], 3)
        late = {"attempt": 2, "status": 201, "body": {"order": "from attempt 2"}}
        assert_problem(self, self.ca.post(base + "/complete", late), 409, "lease_lost")
        answer = {"status": 201, "headers": {}, "body": {"order": "from attempt 3"}}
        assert_status(self, self.cb.post(base + "/complete", dict(answer, attempt=3)), 200)
        assert_problem(self, self.ca.post(base + "/complete", late), 409, "lease_lost")
        for r in run_all([lambda c=c: c.post(base + "/claim", req)
                          for c in (self.ca, self.cb) * 5]):
            self.assertIsInstance(r, harness.Response, r)
            self.assertEqual(assert_status(self, r, 200)["response"], answer, r.describe())
        self.assertEqual(self.events(rid), [("claimed", 1), ("released", 1), ("taken_over", 2),
                                            ("taken_over", 3), ("completed", 3)])

    def test_lease_ends_while_upstream_works_gateway(self):
        j = self.issue("gw")
        tok, tid = j["token"], j["id"]
        # the upstream works 3 s on the first request; the gateway gives up
        # before the 2 s lease ends, and keeps the key held until it ends
        t0 = time.time()
        first = self.submit(self.a, tok, work=3.0)
        assert_problem(self, first, 504, "upstream_timeout")
        self.assertLess(time.time() - t0, 2.0, "the forward outlived its lease")
        assert_problem(self, self.submit(self.b, tok), 409, "request_in_progress")
        # the client retries through the other instance once the lease ended;
        # the upstream, which ignored its deadline, still works on the first
        second = self.submit(self.b, tok)
        while second.status == 409 and time.time() - t0 < 5.0:
            time.sleep(0.1)
            second = self.submit(self.b, tok)
        self.assertEqual(second.status, 201, second.describe())
        self.assertEqual(second.header("idempotent-replayed"), "false", second.describe())
        seen = self.up.seen(tid)
        self.assertEqual(len(seen), 2, "the upstream saw the key twice")
        self.assertEqual([s["key"] for s in seen], [tid, tid],
                         "both forwards carried the same Idempotency-Key")
        self.assertLess(seen[1]["t0"], seen[0]["t0"] + 3.0,
                        "the retry arrived while the first request was being worked on")
        self.assertEqual(self.up.orders_for(tid), 1, "the upstream made one order")
        stored = second.json
        self.assertEqual(stored["key"], tid)
        # every duplicate replays attempt 2's answer, also after the first
        # request finished upstream
        time.sleep(max(0.0, seen[0]["t0"] + 3.2 - time.time()))
        for srv in (self.a, self.b, self.a, self.b):
            r = self.submit(srv, tok)
            self.assertEqual(r.status, 201, r.describe())
            self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
            self.assertEqual(r.json, stored, r.describe())
            self.assertEqual(r.header("location"), second.header("location"))
        self.assertEqual(len(self.up.seen(tid)), 2)
        self.assertEqual(self.events(tid), [("claimed", 1), ("taken_over", 2), ("completed", 2)])
        print("\n  lease ran out on a gateway route: the first forward was cut after %.2f s "
              "(504), the key held until the lease ended, the retry reached the upstream "
              "%.2f s after the first request, while it still worked; same key twice, "
              "1 order; 4 duplicates replayed it"
              % (first.elapsed, seen[1]["t0"] - seen[0]["t0"]), file=sys.stderr, end="")

    # ---- the database goes down after the upstream answered

    def database_down(self):
        db = self.idemd.db
        psql('ALTER DATABASE "%s" ALLOW_CONNECTIONS false' % db)
        # a connection being set up as this ran may show up a moment later
        for _ in range(50):
            out = psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE datname = '%s' AND pid <> pg_backend_pid()" % db)
            if out.strip() == "0":
                return
            time.sleep(0.02)
        raise AssertionError("idemd's connections to its database would not go away")

    def database_up(self):
        psql('ALTER DATABASE "%s" ALLOW_CONNECTIONS true' % self.idemd.db)

    def until_ok(self, fn, ok, deadline=10.0):
        """Calls FN until OK(response) or DEADLINE seconds pass; returns the last answer."""
        t0 = time.monotonic()
        while True:
            r = fn()
            if ok(r) or time.monotonic() - t0 > deadline:
                return r
            time.sleep(0.2)

    def test_database_down_after_the_upstream_answered(self):
        j = self.issue("gw")
        tok, tid = j["token"], j["id"]
        out = {}
        t = threading.Thread(target=lambda: out.update(r=self.submit(self.a, tok, work=1.0)))
        t.start()
        try:
            t0 = time.monotonic()
            while not self.up.seen(tid) and time.monotonic() - t0 < 5:
                time.sleep(0.02)
            self.assertTrue(self.up.seen(tid), "the submit never reached the upstream")
            # the upstream has the request and works on it: the database goes away
            self.database_down()
            t.join(20)
            r = out["r"]
            assert_problem(self, r, 503, "unavailable")
            assert_retry_after(self, r)
            assert_status(self, Client(self.b.port).get("/readyz"), 503)
        finally:
            t.join(20)
            self.database_up()
        self.assertEqual(self.up.orders_for(tid), 1)
        # nothing half-written: attempt 1, in progress until instance a,
        # which still holds the key, has stored the answer it read
        r = self.until_ok(lambda: self.cb.get("/v1/tokens/" + tok), lambda r: r.status == 200)
        j = assert_status(self, r, 200)
        self.assertEqual(j["attempt"], 1, r.describe())
        self.assertIn(j["state"], ("in_progress", "completed"), r.describe())
        # a retry on the other instance meanwhile is refused, never forwarded:
        # it gets the answer the upstream gave once it is stored
        retry = self.until_ok(lambda: self.submit(self.b, tok),
                              lambda r: r.status not in (409, 503))
        self.assertEqual((retry.status, retry.header("idempotent-replayed")), (201, "true"),
                         retry.describe())
        seen = self.up.seen(tid)
        self.assertEqual([s["key"] for s in seen], [tid], "the key was forwarded again")
        self.assertEqual(self.up.orders_for(tid), 1, "one order")
        self.assertEqual(retry.json["order"], self.up.orders[tid])
        r = self.submit(self.a, tok)
        self.assertEqual((r.status, r.header("idempotent-replayed"), r.json),
                         (201, "true", retry.json), r.describe())
        ev = self.events(tid)
        self.assertEqual([e for e in ev if e[0] == "completed"], [("completed", 1)], ev)
        print("\n  database down after the upstream answered: 503 unavailable; the holder "
              "stored the answer once the database was back (%d request upstream, 1 order); "
              "events %s" % (len(seen), ev), file=sys.stderr, end="")

    # ---- revoke against claim, two instances

    def test_revoke_races_claim_across_instances(self):
        outcomes = collections.Counter()
        n = 24
        for i in range(n):
            tok = self.issue("race")["token"]
            released = i % 2 == 1
            if released:
                # a record already exists: claimed once, released (state issued)
                assert_status(self, self.ca.post("/v1/tokens/%s/claim" % tok, {}), 201)
                assert_status(self, self.ca.post("/v1/tokens/%s/release" % tok,
                                                 {"attempt": 1}), 200)
            rv, cl = run_all([lambda: self.ca.delete("/v1/tokens/" + tok),
                              lambda: self.cb.post("/v1/tokens/%s/claim" % tok, {})])
            for r in (rv, cl):
                self.assertIsInstance(r, harness.Response, r)
            want_attempt = 2 if released else 1
            if rv.status == 204:
                assert_problem(self, cl, 410, "token_revoked")
                assert_problem(self, self.cb.post("/v1/tokens/%s/claim" % tok, {}), 410,
                               "token_revoked")
                state = "revoked"
                outcomes["revoke won"] += 1
            else:
                assert_problem(self, rv, 409, "token_in_use")
                j = assert_status(self, cl, 201)
                self.assertEqual(j["attempt"], want_attempt, cl.describe())
                assert_problem(self, self.ca.post("/v1/tokens/%s/claim" % tok, {}), 409,
                               "request_in_progress")
                state = "in_progress"
                outcomes["claim won"] += 1
            j = assert_status(self, self.ca.get("/v1/tokens/" + tok), 200)
            self.assertEqual(j["state"], state)
        print("\n  revoke vs claim on two instances, %d races: %s; never both"
              % (n, dict(outcomes)), file=sys.stderr, end="")
        self.assertEqual(sum(outcomes.values()), n)

    # ---- the janitor's sweep against claims, two instances

    def test_sweep_races_claims_across_instances(self):
        toks = {}      # token -> ("completed", response) | ("in_progress", None) | ...
        exp = 0.0
        for i in range(12):
            # a TTL counts from the issue time rounded up to a whole
            # second: 2 s leave at least 2 s for the claim and its completion
            j = self.issue("retain", ttl_seconds=2)
            tok = j["token"]
            exp = max(exp, parse_time(j["expires_at"]))
            u = "/v1/tokens/%s" % tok
            assert_status(self, self.ca.post(u + "/claim", {"request": {"i": i}}), 201)
            if i % 3 == 0:
                resp = {"status": 201, "headers": {}, "body": {"order": i}}
                assert_status(self, self.cb.post(u + "/complete", dict(resp, attempt=1)), 200)
                toks[tok] = ("completed", resp, i)
            elif i % 3 == 1:
                assert_status(self, self.cb.post(u + "/release", {"attempt": 1}), 200)
                toks[tok] = ("released", None, i)
            else:
                toks[tok] = ("in_progress", None, i)
        ids = [self.ca.get("/v1/tokens/" + t).json["id"] for t in toks]
        # from the moment every token has expired, claims hammer both
        # instances while their janitors sweep (every second)
        time.sleep(max(0.0, exp + 0.05 - time.time()))
        count_sql = ("SELECT count(*) FROM records WHERE state <> 'expired' AND token_id IN (%s)"
                     % ",".join("decode('%s', 'hex')" % i for i in ids))
        stop = threading.Event()
        answers = collections.defaultdict(list)   # token -> [(t, status, code, json)]
        lock = threading.Lock()

        def hammer(c):
            while not stop.is_set():
                for tok, (_, _, i) in toks.items():
                    r = c.post("/v1/tokens/%s/claim" % tok, {"request": {"i": i}})
                    with lock:
                        answers[tok].append((time.time(), r.status, code(r), r.json))
        ts = [threading.Thread(target=hammer, args=(c,)) for c in (self.ca, self.cb)]
        for t in ts:
            t.start()
        t0 = time.monotonic()
        left = None
        try:
            while time.monotonic() - t0 < 15:
                left = int(psql(count_sql, db=self.idemd.db).strip())
                if left == 0:
                    break
                time.sleep(0.2)
            t_swept = time.time()
            time.sleep(0.5)    # claims after the sweep too
        finally:
            stop.set()
            for t in ts:
                t.join(30)
        self.assertEqual(left, 0, "the janitors did not sweep the expired records")
        tally = collections.Counter()
        for tok, (kind, resp, i) in toks.items():
            for (t, status, c, j) in answers[tok]:
                tally["%s %d %s" % (kind, status, c or "")] += 1
                self.assertNotEqual(status, 201, "%s token %d: executed again (a 201 after "
                                    "its token expired)" % (kind, i))
                if status == 200:
                    self.assertEqual(kind, "completed")
                    self.assertEqual(j["response"], resp, "replay differs")
                elif status == 409:
                    self.assertEqual((kind, c), ("in_progress", "request_in_progress"))
                else:
                    self.assertEqual((status, c), (410, "token_expired"))
            last = [a for a in answers[tok] if a[0] > t_swept + 0.1]
            self.assertTrue(last, "no claim of %s token %d after the sweep" % (kind, i))
            self.assertEqual({(a[1], a[2]) for a in last}, {(410, "token_expired")},
                             "after the sweep, a claim of a swept token is 410")
        swept = [rec for srv in (self.a, self.b) for rec in srv.log_records()
                 if isinstance(rec, dict) and "janitor: swept" in rec.get("msg", "")]
        self.assertTrue(swept, "no janitor logged a sweep")
        print("\n  sweep vs claims on two instances: %d claims, %s; never a 201"
              % (sum(tally.values()), dict(sorted(tally.items()))), file=sys.stderr, end="")

    # ---- a retry after retention ended

    def test_retry_after_retention_ended_api_and_gateway(self):
        direct = self.issue("retain", ttl_seconds=2)
        u = "/v1/tokens/%s" % direct["token"]
        assert_status(self, self.ca.post(u + "/claim", {}), 201)
        resp = {"status": 201, "headers": {}, "body": {"order": "o-1"}}
        assert_status(self, self.ca.post(u + "/complete", dict(resp, attempt=1)), 200)
        gw = self.issue("retain", ttl_seconds=2)
        first = self.submit(self.a, gw["token"], path="/orders/short")
        self.assertEqual((first.status, first.header("idempotent-replayed")), (201, "false"),
                         first.describe())
        # past the TTL, within retention (4 s from the completion; the token
        # lives less than 3 s, so the record outlives it by at least a
        # second and the janitor cannot have swept it yet): the duplicate
        # learns its order went through
        time.sleep(max(0.0, parse_time(gw["expires_at"]) + 0.1 - time.time()))
        r = self.submit(self.b, gw["token"], path="/orders/short")
        self.assertEqual((r.status, r.header("idempotent-replayed"), r.json),
                         (201, "true", first.json), r.describe())
        # retention over and swept: 410, and nothing runs again
        count_sql = ("SELECT count(*) FROM records WHERE state <> 'expired' AND token_id IN "
                     "(decode('%s', 'hex'), decode('%s', 'hex'))" % (direct["id"], gw["id"]))
        t0 = time.monotonic()
        while psql(count_sql, db=self.idemd.db).strip() != "0" and time.monotonic() - t0 < 10:
            time.sleep(0.2)
        self.assertEqual(psql(count_sql, db=self.idemd.db).strip(), "0", "not swept")
        for c in (self.ca, self.cb):
            assert_problem(self, c.post(u + "/claim", {}), 410, "token_expired")
        for srv in (self.a, self.b):
            assert_problem(self, self.submit(srv, gw["token"], path="/orders/short"), 410,
                           "token_expired")
        self.assertEqual(len(self.up.seen(gw["id"])), 1, "the upstream saw the key once")
        j = assert_status(self, self.ca.get(u), 200)
        self.assertEqual(j["state"], "expired")


if __name__ == "__main__":
    harness.main()
