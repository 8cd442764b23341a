"""Operating idemd (docs/operations.md): the per-record replay count (every
kind of replay counted, flushed within 10 s, nothing lost on SIGTERM), the
metric families an operator alerts on (duplicates by tenant, operation and
outcome with bounded labels, stuck records, histograms with HELP and TYPE),
and admin_listen, the second listener for /metrics, /healthz and /readyz."""

import os
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from faultkit import Upstream  # noqa: E402
from harness import (Client, Idemd, IdemdCase, assert_problem, assert_status,  # noqa: E402
                     free_port, uniq)

OP = "orders.pay"          # named in metrics_operations and by the gateway route
LONG = "orders.slow"       # named too; its records are left stuck
SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[^"}]|"(?:[^"\\]|\\.)*")*\})? (\S+)$')


def parse_metrics(text):
    """{(name, frozenset(labels)): value}, and {family: type} from TYPE lines."""
    samples, types, helps = {}, {}, set()
    for ln in text.splitlines():
        if ln.startswith("# TYPE "):
            _, _, name, typ = ln.split(" ", 3)
            types[name] = typ
        elif ln.startswith("# HELP "):
            helps.add(ln.split(" ", 3)[2])
        elif ln:
            m = SAMPLE.match(ln)
            assert m, "bad sample line %r" % ln
            labels = frozenset(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
            samples[(m.group(1), labels)] = float(m.group(3))
    return samples, types, helps


def value(samples, name, **labels):
    return samples.get((name, frozenset(labels.items())), 0.0)


class Replays(IdemdCase):
    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(Upstream())
        cls.extra_config = {
            "metrics_operations": ["acme/" + OP, "acme/" + LONG, "acme/not.there"],
            "routes": [{"method": "POST", "path": "/pay", "tenant": "acme", "operation": OP,
                        "upstream": cls.up.url + "/pay"}],
        }
        super().setUpClass()
        for name, lease in ((OP, 30), (LONG, 1)):
            cls.define_operation(name, lease_seconds=lease)
        # a record stuck in progress (lease 1 s, never completed)
        r = cls.client.post("/v1/tokens", {"operation": LONG, "subject": "u1"})
        assert r.status == 201, r.describe()
        r = cls.client.post("/v1/tokens/%s/claim" % r.json["token"], {})
        assert r.status == 201, r.describe()
        time.sleep(1.2)  # its lease ends
        # the pairs' ids are looked up at the janitor's first pass after a start
        cls.restart()

    @classmethod
    def restart(cls):
        rc = cls.server.stop()
        assert rc == 0, cls.server.stderr_text()[-2000:]
        cls.server = cls.idemd.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            s, _, _ = parse_metrics(cls.anon.get("/metrics").body.decode())
            # acme/not.there stays unresolved: that operation does not exist
            if value(s, "idemd_metrics_pairs_unresolved") == 1:
                return
            time.sleep(0.1)
        raise AssertionError("the named pairs were not resolved")

    def metrics(self):
        r = self.anon.get("/metrics")
        assert_status(self, r, 200)
        return parse_metrics(r.body.decode())[0]

    def record(self, rid):
        return assert_status(self, self.client.get("/v1/records/" + rid), 200)

    def completed_token(self, op=OP, body=None):
        r = self.issue_resp(op)
        tok, rid = r.json["token"], r.json["id"]
        self.claim_ok(tok, body or {"request": {"a": 1}})
        assert_status(self, self.complete(tok, 1, 201, body={"ok": 1}), 200)
        return tok, rid

    def replay(self, tok, body=None):
        r = self.claim(tok, body or {"request": {"a": 1}})
        assert_status(self, r, 200)
        self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())

    def test_every_kind_of_replay_counted_and_kept_over_sigterm(self):
        before = self.metrics()
        # direct token replays: the first from PostgreSQL, then the replay cache
        tok, rid_tok = self.completed_token()
        for _ in range(5):
            self.replay(tok)
        # caller-key replays, single and in a batch
        key = uniq("evt")
        kpath = "/v1/operations/%s/keys/%s" % (OP, key)
        j = assert_status(self, self.client.post(kpath + "/claim", {"request": {"k": 1}}), 201)
        rid_key = j["id"]
        assert_status(self, self.client.post(kpath + "/complete",
                                             {"attempt": 1, "status": 201, "body": {}}), 200)
        for _ in range(3):
            assert_status(self, self.client.post(kpath + "/claim", {"request": {"k": 1}}), 200)
        j = assert_status(self, self.client.post("/v1/operations/%s/claims" % OP, {"items": [
            {"key": key, "request": {"k": 1}}]}), 200)
        self.assertEqual([x["status"] for x in j["items"]], [200])
        # gateway replays
        r = self.issue_resp(OP)
        gtok, rid_gw = r.json["token"], r.json["id"]
        gw = Client(self.server.port)
        for i in range(3):
            r = gw.request("POST", "/pay", b"amount=5", headers={"Idempotency-Key": gtok},
                           api_key=None, content_type="application/x-www-form-urlencoded")
            self.assertEqual(r.status, 201, r.describe())
            self.assertEqual(r.header("idempotent-replayed"), "true" if i else "false")
        # a duplicate that waits (Prefer: wait) and is answered with the replay
        r = self.issue_resp(OP)
        wtok, rid_wait = r.json["token"], r.json["id"]
        self.claim_ok(wtok, {"request": {"w": 1}})
        out = {}
        t = threading.Thread(target=lambda: out.setdefault("r", self.claim(
            wtok, {"request": {"w": 1}}, headers={"Prefer": "wait=10"},
            client=Client(self.server.port, self.api_key))))
        t.start()
        time.sleep(0.5)
        assert_status(self, self.complete(wtok, 1, 201, body={"w": 1}), 200)
        t.join(15)
        assert_status(self, out["r"], 200)
        self.assertEqual(out["r"].header("preference-applied"), "wait=10")
        # a mismatch and an in-progress duplicate are stopped, not replayed
        assert_problem(self, self.claim(tok, {"request": {"a": 2}}), 422, "fingerprint_mismatch")
        r = self.issue_resp(OP)
        btok, rid_busy = r.json["token"], r.json["id"]
        self.claim_ok(btok)
        assert_problem(self, self.claim(btok), 409, "request_in_progress")

        after = self.metrics()

        def dup(outcome, s):
            return value(s, "idemd_duplicates_total", tenant="acme", operation=OP,
                         outcome=outcome)
        self.assertEqual(dup("replayed", after) - dup("replayed", before), 5 + 4 + 2)
        self.assertEqual(dup("waited", after) - dup("waited", before), 1)
        self.assertEqual(dup("fingerprint_mismatch", after)
                         - dup("fingerprint_mismatch", before), 1)
        self.assertEqual(dup("in_progress", after) - dup("in_progress", before), 1)
        # SIGTERM right away: what is still in memory is written before exit
        self.restart()
        want = {rid_tok: 5, rid_key: 4, rid_gw: 2, rid_wait: 1, rid_busy: 0}
        got = {rid: self.record(rid)["replays"] for rid in want}
        self.assertEqual(got, want)

    def test_trace_a_submit_from_its_record_id(self):
        r = self.issue_resp(OP)
        tok, rid = r.json["token"], r.json["id"]
        mine = uniq("checkout")
        r = self.claim(tok, {"request": {"t": 1}}, headers={"X-Request-Id": mine})
        assert_status(self, r, 201)
        self.assertEqual(r.header("x-request-id"), mine)
        assert_status(self, self.complete(tok, 1, 201, body={"t": 1}), 200)
        self.replay(tok, {"request": {"t": 1}})
        assert_status(self, self.client.get("/v1/records/" + rid), 200)
        # the audit trail says what happened and when
        ev = assert_status(self, self.client.get("/v1/records/%s/events" % rid), 200)["events"]
        self.assertEqual([e["event"] for e in ev], ["claimed", "completed"])
        # and the access log lines of that record carry its id beside each
        # request id (lines are written at most 40 ms late)
        deadline = time.monotonic() + 5
        while True:
            lines = [x for x in self.server.log_records()
                     if isinstance(x, dict) and x.get("record") == rid]
            if len(lines) >= 5 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        # (in order per worker thread only)
        got = sorted((x["route"], x["status"]) for x in lines)
        self.assertEqual(got, [("/v1/records/{}", 200), ("/v1/records/{}/events", 200),
                               ("/v1/tokens/{}/claim", 200),
                               ("/v1/tokens/{}/claim", 201), ("/v1/tokens/{}/complete", 200)])
        first = [x for x in lines if x["status"] == 201]
        self.assertEqual(first[0]["request_id"], mine)
        self.assertNotIn(tok, self.server.stderr_text())

    def test_flushed_within_ten_seconds_without_sigterm(self):
        tok, rid = self.completed_token()
        self.assertEqual(self.record(rid)["replays"], 0)
        for _ in range(4):
            self.replay(tok)
        t0 = time.monotonic()
        while self.record(rid)["replays"] != 4:
            self.assertLess(time.monotonic() - t0, 10.0, "replays not flushed within 10 s")
            time.sleep(0.25)
        # the flush happened while the server kept running
        self.assertIsNone(self.server.proc.poll())
        s = self.metrics()
        self.assertEqual(value(s, "idemd_replay_counts_dropped_total"), 0)

    def test_unnamed_operations_fold_into_other(self):
        op = self.put_operation()   # not in metrics_operations, no route
        tok, _ = self.completed_token(op)
        before = self.metrics()
        self.replay(tok)
        after = self.metrics()
        self.assertEqual(value(after, "idemd_duplicates_total", tenant="other",
                               operation="other", outcome="replayed")
                         - value(before, "idemd_duplicates_total", tenant="other",
                                 operation="other", outcome="replayed"), 1)
        text = self.anon.get("/metrics").body.decode()
        self.assertNotIn(op, text)
        tenants = set(re.findall(r'tenant="([^"]*)"', text))
        self.assertEqual(tenants, {"acme", "other"})

    def test_stuck_records_gauge(self):
        s = self.metrics()
        self.assertEqual(value(s, "idemd_records_stuck", tenant="acme", operation=LONG), 1)
        self.assertEqual(value(s, "idemd_records_stuck", tenant="acme", operation=OP), 0)
        self.assertEqual(value(s, "idemd_db_up"), 1)

    def test_families_have_help_and_type_and_histograms_are_whole(self):
        self.anon.get("/healthz")
        r = self.anon.get("/metrics")
        samples, types, helps = parse_metrics(r.body.decode())
        families = set()
        for (name, _labels) in samples:
            fam = re.sub(r"_(bucket|sum|count)$", "", name)
            fam = fam if fam in types else name
            self.assertIn(fam, types, name)
            self.assertIn(fam, helps, name)
            families.add(fam)
        for fam in ("idemd_http_request_duration_seconds", "idemd_db_pool_wait_seconds",
                    "idemd_db_batch_size", "idemd_upstream_duration_seconds"):
            self.assertEqual(types.get(fam), "histogram", fam)
        for fam in ("idemd_duplicates_total", "idemd_replay_cache_hits_total",
                    "idemd_replay_cache_misses_total", "idemd_upstream_requests_total"):
            self.assertEqual(types.get(fam), "counter", fam)
        for fam in ("idemd_records_stuck", "idemd_db_pool_in_use", "idemd_db_pool_waiting",
                    "idemd_db_pool_connections"):
            self.assertEqual(types.get(fam), "gauge", fam)
        # every histogram series: cumulative buckets ending in +Inf == _count
        series = {}
        for (name, labels), v in samples.items():
            if name.endswith("_bucket"):
                rest = frozenset(kv for kv in labels if kv[0] != "le")
                le = dict(labels)["le"]
                series.setdefault((name[:-7], rest), []).append(
                    (float("inf") if le == "+Inf" else float(le), v))
        self.assertTrue(series)
        for (fam, rest), buckets in series.items():
            buckets.sort()
            counts = [v for _, v in buckets]
            self.assertEqual(counts, sorted(counts), (fam, rest))
            self.assertEqual(buckets[-1][0], float("inf"))
            self.assertEqual(samples[(fam + "_count", rest)], counts[-1], (fam, rest))
            self.assertIn((fam + "_sum", rest), samples)
        # the healthz request above is in its route's histogram, class 2xx
        hz = value(samples, "idemd_http_request_duration_seconds_count", method="GET",
                   route="/healthz", **{"class": "2xx"})
        self.assertGreaterEqual(hz, 1)
        # the pool is 4 connections; an unmatched path has its own route label
        self.assertEqual(value(samples, "idemd_db_pool_connections"), 4)
        assert_problem(self, self.anon.get("/no/such/" + uniq("p")), 404, "not_found")
        s = self.metrics()
        self.assertGreaterEqual(value(s, "idemd_http_request_duration_seconds_count",
                                      method="other", route="unmatched",
                                      **{"class": "4xx"}), 1)

    def test_replay_cache_hits_and_upstream_calls_counted(self):
        before = self.metrics()
        tok, _ = self.completed_token()
        self.replay(tok)
        self.replay(tok)
        r = self.issue_resp(OP)
        gw = Client(self.server.port)
        r = gw.request("POST", "/pay", b"amount=1", headers={"Idempotency-Key": r.json["token"]},
                       api_key=None, content_type="application/x-www-form-urlencoded")
        self.assertEqual(r.status, 201, r.describe())
        after = self.metrics()
        self.assertGreaterEqual(value(after, "idemd_replay_cache_hits_total")
                                - value(before, "idemd_replay_cache_hits_total"), 1)
        self.assertGreaterEqual(value(after, "idemd_replay_cache_misses_total")
                                - value(before, "idemd_replay_cache_misses_total"), 1)
        lab = {"method": "POST", "route": "/pay"}
        self.assertEqual(value(after, "idemd_upstream_requests_total", outcome="2xx", **lab)
                         - value(before, "idemd_upstream_requests_total", outcome="2xx", **lab),
                         1)
        self.assertEqual(value(after, "idemd_upstream_duration_seconds_count", **lab)
                         - value(before, "idemd_upstream_duration_seconds_count", **lab), 1)
        self.assertGreaterEqual(value(after, "idemd_db_batch_size_count")
                                - value(before, "idemd_db_batch_size_count"), 2)


class AdminListen(IdemdCase):
    start_server = False

    def test_admin_listener_serves_only_the_operator_routes(self):
        admin_port = free_port()
        self.idemd.write_config(admin_listen="127.0.0.1:%d" % admin_port)
        srv = self.idemd.start(wait=False)
        admin = Client(admin_port, None)
        deadline = time.monotonic() + 10
        while True:
            try:
                if admin.get("/readyz").status == 200:
                    break
            except OSError:
                pass
            self.assertIsNone(srv.proc.poll(), srv.stderr_text())
            self.assertLess(time.monotonic(), deadline, srv.stderr_text())
            time.sleep(0.05)
        pub = Client(srv.port, self.api_key)
        assert_status(self, admin.get("/healthz"), 200)
        r = admin.get("/metrics")
        assert_status(self, r, 200)
        self.assertIn("# TYPE idemd_duplicates_total counter", r.body.decode())
        for p in ("/metrics", "/healthz", "/readyz"):
            assert_problem(self, pub.get(p), 404, "not_found")
        # the API is on the public listener only
        assert_status(self, pub.get("/v1/operations"), 200)
        assert_problem(self, Client(admin_port, self.api_key).get("/v1/operations"), 404,
                       "not_found")
        self.assertEqual(srv.stop(), 0, srv.stderr_text()[-2000:])

    def test_admin_listen_checked(self):
        same = "127.0.0.1:%d" % self.idemd.port
        for bad in ("nonsense", "127.0.0.1:0", "127.0.0.1:99999", 7, same):
            p = self.idemd.run("check-config", config=self.idemd.write_config(admin_listen=bad))
            self.assertEqual(p.returncode, 2, (bad, p.stdout, p.stderr))
            self.assertIn("admin_listen", p.stderr + p.stdout)
        for bad in (["acme"], ["/op"], ["acme/Bad Op"], ["a/b/c"]):
            p = self.idemd.run("check-config",
                               config=self.idemd.write_config(metrics_operations=bad))
            self.assertEqual(p.returncode, 2, (bad, p.stdout, p.stderr))
            self.assertIn("metrics_operations", p.stderr + p.stdout)
        p = self.idemd.run("check-config", config=self.idemd.write_config(
            admin_listen=None, metrics_operations=["acme/" + OP]))
        self.assertEqual(p.returncode, 0, p.stderr)
        self.idemd.write_config()


if __name__ == "__main__":
    harness.main()
