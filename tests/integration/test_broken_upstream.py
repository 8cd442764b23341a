"""Integration tests: exactly once through a broken upstream
(docs/reliability.md, "What ran is never run again"). One regression test per corner a review broke, each failing on
the code before it was fixed:

  1. an upstream that sends a final status line and then breaks (a body
     shorter than its Content-Length, a chunked body without its last
     chunk, a stall past the route's timeout) is never forwarded again:
     the key's answer is a stored 502 upstream_answer_unstorable;
  2. two forwards of one key never overlap: a route whose timeout (and
     forward_margin_ms) does not fit in its operation's lease is refused
     at start, at reload and by PUT /v1/operations; after a forward whose
     outcome is unknown (a timeout, a connection that broke before a
     status line) the key stays held until the lease ends, and the
     upstream is told its deadline (Idempotency-Timeout-Ms);
  3. every audit event keeps the retention it was given when it happened:
     lowering then raising an operation's audit retention never hides,
     drops or revives an event, told by the record or written as a row.
"""

import base64
import os
import signal
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Client, Idemd, IdemdCase, assert_problem, assert_status,  # noqa: E402
                     uniq)
from test_gateway import Upstream, headers_of  # noqa: E402


def key_path(op, key, what=None):
    return "/v1/operations/%s/keys/%s%s" % (op, key, "/" + what if what else "")


class BrokenAnswers(IdemdCase):
    """Routes on operations with a 3 s lease; the upstream breaks on demand."""

    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(Upstream())
        u = "http://127.0.0.1:%d" % cls.up.port
        route = {"tenant": "acme", "key": "header:Idempotency-Key"}
        cls.extra_config = {"routes": [
            dict(route, method="POST", path="/pay", operation="pay.held", upstream=u + "/pay",
                 timeout_ms=1000),
            dict(route, method="POST", path="/token-pay", operation="pay.token",
                 upstream=u + "/token-pay", timeout_ms=1000, key="token"),
        ]}
        super().setUpClass()
        policy = dict(harness.DEFAULT_POLICY, lease_seconds=3)
        for op in ("pay.held", "pay.token"):
            r = cls.client.put("/v1/operations/" + op, policy)
            if r.status not in (200, 201):
                cls.tearDownClass()
                raise AssertionError(r.describe())

    def executions(self, marker):
        """The requests that reached the upstream with MARKER in their body,
        or (a token's id) as their Idempotency-Key."""
        return [q for q in self.up.requests()
                if marker in base64.b64decode(q["body_b64"]).decode("utf-8", "replace")
                or (q["key"] or "").strip('"') == marker]

    def submit(self, key, mode, body=None):
        return self.anon.post("/pay", body or {"amount": 7, "marker": key},
                              headers={"Idempotency-Key": key, "X-Upstream-Mode": mode})

    # ---- 1. a final status read, then the answer broke

    def assert_never_again(self, mode):
        key = str(uuid.uuid4())
        first = self.submit(key, mode)
        assert_problem(self, first, 502, "upstream_answer_unstorable")
        self.assertIn("answered 200", first.json["detail"], first.describe())
        for _ in range(3):
            again = self.submit(key, mode)
            assert_problem(self, again, 502, "upstream_answer_unstorable")
            self.assertEqual(again.header("Idempotent-Replayed"), "true", again.describe())
        self.assertEqual(len(self.executions(key)), 1,
                         "%s: the upstream ran again after it had answered 200" % mode)

    def test_body_shorter_than_its_length_is_not_run_again(self):
        self.assert_never_again("short")

    def test_chunked_body_without_its_last_chunk_is_not_run_again(self):
        self.assert_never_again("chunked-cut")

    def test_answer_stalled_past_the_timeout_is_not_run_again(self):
        self.assert_never_again("stall=2")

    def test_token_route_answer_cut_is_not_run_again(self):
        tok = assert_status(self, self.client.post(
            "/v1/tokens", {"operation": "pay.token", "subject": "u1"}), 201)
        h = {"Idempotency-Key": tok["token"], "X-Upstream-Mode": "short"}
        assert_problem(self, self.anon.post("/token-pay", {"a": 1}, headers=h), 502,
                       "upstream_answer_unstorable")
        again = self.anon.post("/token-pay", {"a": 1}, headers=h)
        assert_problem(self, again, 502, "upstream_answer_unstorable")
        self.assertEqual(len(self.executions(tok["id"])), 1)

    # ---- 2. an unknown outcome keeps the key held until the lease ends

    def test_timeout_keeps_the_key_until_the_lease_ends(self):
        key = str(uuid.uuid4())
        # works 2.5 s, past the route's 1 s timeout and the deadline it is told
        first = self.submit(key, "slow=2.5")
        assert_problem(self, first, 504, "upstream_timeout")
        retry = int(first.header("Retry-After"))
        self.assertGreaterEqual(retry, 1, first.describe())
        self.assertLessEqual(retry, 3, first.describe())
        seen = self.executions(key)
        self.assertEqual(len(seen), 1)
        deadline = int(headers_of(seen[0])["idempotency-timeout-ms"][0])
        self.assertTrue(0 < deadline <= 1000, deadline)
        # while the first forward may still run, the key is held
        dup = self.submit(key, "ok")
        assert_problem(self, dup, 409, "request_in_progress")
        self.assertEqual(len(self.executions(key)), 1, "forwarded while the first still ran")
        # once the lease ended, a retry takes over and runs after the first
        time.sleep(3.2)
        r = self.submit(key, "ok")
        assert_status(self, r, 201)
        runs = self.executions(key)
        self.assertEqual(len(runs), 2)
        self.assertGreaterEqual(runs[1]["time"], runs[0]["end"], "two forwards overlapped")

    def test_connection_broken_before_an_answer_keeps_the_key(self):
        key = str(uuid.uuid4())
        first = self.submit(key, "close")
        assert_problem(self, first, 502, "upstream_unavailable")
        self.assertIsNotNone(first.header("Retry-After"))
        assert_problem(self, self.submit(key, "ok"), 409, "request_in_progress")
        self.assertEqual(len(self.executions(key)), 1)

    def test_a_client_cannot_send_its_own_deadline(self):
        key = str(uuid.uuid4())
        r = self.anon.post("/pay", {"marker": key}, headers={"Idempotency-Key": key,
                                                       "Idempotency-Timeout-Ms": "999999"})
        assert_status(self, r, 201)
        sent = headers_of(self.executions(key)[0])["idempotency-timeout-ms"]
        self.assertEqual(len(sent), 1, sent)
        self.assertLessEqual(int(sent[0]), 1000)

    def test_put_operation_refuses_a_lease_the_route_outlives(self):
        r = self.client.put("/v1/operations/pay.held",
                            {"token_ttl_seconds": 3600, "retention_seconds": 86400,
                             "lease_seconds": 1})
        assert_problem(self, r, 400, "invalid_request")
        self.assertIn("lease_seconds (1)", r.json["detail"])
        self.assertIn("1500 ms", r.json["detail"])
        got = assert_status(self, self.client.get("/v1/operations/pay.held"), 200)
        self.assertEqual(got["lease_seconds"], 3, "the refused policy was stored")


class RouteOutlivesLease(IdemdCase):
    """A route whose timeout does not fit in its operation's lease."""

    start_server = False

    def route(self, timeout_ms):
        return {"method": "POST", "path": "/slow", "tenant": "acme", "operation": "pay.short",
                "upstream": "http://127.0.0.1:9/slow", "key": "header:Idempotency-Key",
                "timeout_ms": timeout_ms}

    def test_refused_at_start_and_at_reload(self):
        plain = self.idemd.start()
        c = Client(plain.port, self.api_key)
        self.put_operation("pay.short", client=c, lease_seconds=2)
        self.assertEqual(plain.stop(), 0)
        # refused at start, naming both values
        self.idemd.write_config(routes=[self.route(10000)])
        srv = self.idemd.start(wait=False)
        rc = srv.wait_exit(15)
        self.assertNotEqual(rc, 0, "idemd started with a route that outlives its lease")
        text = srv.stderr_text()
        self.assertIn("timeout_ms 10000", text)
        self.assertIn("lease_seconds 2", text)
        # a route that fits starts; a reload to one that does not is refused
        self.idemd.write_config(routes=[self.route(1500)])
        srv = self.idemd.start()
        self.idemd.write_config(routes=[self.route(10000)])
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while time.time() < deadline and "timeout_ms 10000" not in srv.stderr_text():
            time.sleep(0.1)
        self.assertIn("timeout_ms 10000", srv.stderr_text(), "the reload was not refused")
        # the old route keeps serving: its upstream is unreachable, so 502
        r = Client(srv.port).post("/slow", {"a": 1}, headers={"Idempotency-Key": uniq("k")})
        assert_problem(self, r, 502, "upstream_unavailable")
        self.assertEqual(srv.stop(), 0)


class RetentionKept(IdemdCase):
    """Sweeps every second; retention changes while records live and end."""

    extra_config = {"sweep_interval_seconds": 1}

    def trail(self, rid):
        r = self.client.get("/v1/records/%s/events" % rid)
        if r.status == 404:
            return []
        return [e["event"] for e in assert_status(self, r, 200)["events"]]

    def policy(self, op, audit):
        self.put_operation(op, token_ttl_seconds=2, retention_seconds=2, lease_seconds=30,
                           audit_retention_seconds=audit)

    def test_changing_the_audit_retention_never_hides_drops_or_revives(self):
        op = uniq("pay")
        self.policy(op, 3600)
        done = uniq("k")
        rid = assert_status(self, self.client.post(key_path(op, done, "claim"), {}), 201)["id"]
        assert_status(self, self.client.post(key_path(op, done, "complete"),
                                              {"attempt": 1, "status": 200, "body": 1}), 200)
        live = uniq("k")
        lid = assert_status(self, self.client.post(key_path(op, live, "claim"), {}), 201)["id"]
        self.assertEqual(self.trail(rid), ["claimed", "completed"])
        # lowered: what was written under an hour keeps its hour
        self.policy(op, 1)
        short = uniq("k")
        sid = assert_status(self, self.client.post(key_path(op, short, "claim"), {}), 201)["id"]
        time.sleep(1.5)
        self.assertEqual(self.trail(rid), ["claimed", "completed"], "a lowered retention hid them")
        self.assertEqual(self.trail(lid), ["claimed"], "a live record's trail was hidden")
        self.assertEqual(self.trail(sid), [], "an event outlived the retention it was given")
        # the lives end (2 s, swept every second) while the retention is short
        time.sleep(3.0)
        self.assertEqual(self.trail(rid)[:2], ["claimed", "completed"],
                         "the end of the life dropped its told events")
        self.assertEqual(self.trail(lid)[:1], ["claimed"])
        # raised again: nothing comes back that was gone
        self.policy(op, 3600)
        self.assertEqual(self.trail(rid)[:2], ["claimed", "completed"])
        self.assertNotIn("claimed", self.trail(sid), "a raised retention revived an event")


if __name__ == "__main__":
    harness.main()
