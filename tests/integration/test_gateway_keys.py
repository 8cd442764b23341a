"""Derived keys on gateway routes (docs/gateway.md): a route's "key" is
a header (the IETF Idempotency-Key draft, webhook delivery ids), a member
of the JSON body, or the request's own hash; "scope_headers" keep two
callers' equal keys apart; "fingerprint" is bytes, canonical JSON or none;
"release_on" names the answers after which the claim is released. Against
the test upstream (upstream.py), which records every request it gets."""

import json
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Client, IdemdCase, assert_problem, uniq  # noqa: E402
from test_gateway import Upstream, headers_of  # noqa: E402


class DerivedKeys(IdemdCase):

    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(Upstream())
        u = "http://127.0.0.1:%d" % cls.up.port

        def route(path, **kw):
            return dict({"method": "POST", "path": path, "tenant": "acme",
                         "operation": "webhook.receive", "upstream": u + path}, **kw)

        cls.extra_config = {"routes": [
            route("/ietf", key="header:Idempotency-Key"),
            route("/hook", key="header:X-GitHub-Delivery", scope_headers=[]),
            route("/events", key="json:/id", scope_headers=[], fingerprint="none"),
            route("/events/deep", key="json:/data/object/id", scope_headers=[],
                  fingerprint="json"),
            route("/forms", key="body"),
            route("/retry429", key="header:Idempotency-Key", release_on=["5xx", 429]),
        ]}
        super().setUpClass()
        cls.define_operation("webhook.receive")

    def post(self, path, body=b"{}", headers=None, client=None):
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        return (client or self.anon).request("POST", path, body=body, headers=h)

    def upstream_calls(self, rid):
        # one form on every route: the bare 32-hex record id
        return [q for q in self.up.requests() if q["key"] == rid]

    def test_ietf_header_route(self):
        key = uniq("ietf")
        assert_problem(self, self.post("/ietf"), 400, "idempotency_key_missing")
        r1 = self.post("/ietf", b'{"a":1}', {"Idempotency-Key": key})
        self.assertEqual(r1.status, 201, r1.describe())
        self.assertEqual(r1.header("idempotent-replayed"), "false")
        # the same key as an sf-string is the same key
        r2 = self.post("/ietf", b'{"a":1}', {"Idempotency-Key": '"%s"' % key})
        self.assertEqual(r2.status, 201, r2.describe())
        self.assertEqual(r2.header("idempotent-replayed"), "true")
        self.assertEqual(r2.body, r1.body)
        assert_problem(self, self.post("/ietf", b'{"a":2}', {"Idempotency-Key": key}), 422,
                       "fingerprint_mismatch")
        calls = [q for q in self.up.requests() if json.loads(r1.body)["key"] == q["key"]]
        self.assertEqual(len(calls), 1)
        fwd = json.loads(r1.body)["key"]
        self.assertRegex(fwd, r'^[0-9a-f]{32}$')  # bare, as on every route
        h = headers_of(calls[0])
        self.assertNotIn("idempotency-subject", h)
        self.assertEqual(h["idempotency-key"], [fwd])

    def test_invalid_keys(self):
        for bad in ["x" * 256, "a b", '"unterminated', '"a"b', "caf\u00e9"]:
            r = self.post("/ietf", b"{}", {"Idempotency-Key": bad})
            assert_problem(self, r, 400, "idempotency_key_invalid")
        _, data = harness.raw_http(self.server.port, (
            b"POST /ietf HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
            b"Idempotency-Key: a\r\nIdempotency-Key: b\r\n\r\n{}"))
        self.assertTrue(data.startswith(b"HTTP/1.1 400 "), data[:200])
        self.assertIn(b'"code":"invalid_request"', data)

    def test_callers_with_the_same_key_never_meet(self):
        key = uniq("shared")
        ra = self.post("/ietf", b"{}", {"Idempotency-Key": key, "Authorization": "Bearer alice"})
        rb = self.post("/ietf", b"{}", {"Idempotency-Key": key, "Authorization": "Bearer bob"})
        self.assertEqual((ra.status, rb.status), (201, 201))
        self.assertEqual(rb.header("idempotent-replayed"), "false")
        self.assertNotEqual(json.loads(ra.body)["key"], json.loads(rb.body)["key"])
        again = self.post("/ietf", b"{}", {"Idempotency-Key": key,
                                           "Authorization": "Bearer alice"})
        self.assertEqual(again.header("idempotent-replayed"), "true")
        self.assertEqual(again.body, ra.body)

    def test_cookie_callers_with_the_same_key_never_meet(self):
        # the default scope_headers hold the Cookie header too: a caller
        # signed in by a session cookie never gets another's answer
        key, body = uniq("shared"), b'{"sku":"A-1"}'
        ra = self.post("/ietf", body, {"Idempotency-Key": key, "Cookie": "session=alice"})
        rb = self.post("/ietf", body, {"Idempotency-Key": key, "Cookie": "session=bob"})
        self.assertEqual((ra.status, rb.status), (201, 201), rb.describe())
        self.assertEqual(rb.header("idempotent-replayed"), "false",
                         "bob got the answer stored for alice's request")
        again = self.post("/ietf", body, {"Idempotency-Key": key, "Cookie": "session=alice"})
        self.assertEqual((again.header("idempotent-replayed"), again.body), ("true", ra.body))

    def test_webhook_delivered_three_times_runs_once(self):
        delivery = "72d3162e-cc78-11e3-81ab-" + uniq("d")
        answers = [self.post("/hook", b'{"action":"opened"}', {"X-GitHub-Delivery": delivery})
                   for _ in range(3)]
        self.assertEqual([a.status for a in answers], [201, 201, 201])
        self.assertEqual([a.header("idempotent-replayed") for a in answers],
                         ["false", "true", "true"])
        fwd = json.loads(answers[0].body)["key"]
        self.assertEqual(len([q for q in self.up.requests() if q["key"] == fwd]), 1)

    def test_json_pointer_key(self):
        evt = uniq("evt")
        r1 = self.post("/events", json.dumps({"id": evt, "n": 1}).encode())
        self.assertEqual(r1.status, 201, r1.describe())
        # fingerprint "none": another payload with the same id is a duplicate
        r2 = self.post("/events", json.dumps({"n": 2, "id": evt}).encode())
        self.assertEqual(r2.header("idempotent-replayed"), "true", r2.describe())
        # an integer id works; a missing or unusable one is 400
        self.assertEqual(self.post("/events", b'{"id": 12345678901}').status, 201)
        for body in [b'{"n":1}', b'{"id":{"x":1}}', b'not json', b'{"id":null}']:
            assert_problem(self, self.post("/events", body), 400, "idempotency_key_missing")
        assert_problem(self, self.post("/events", json.dumps({"id": "x" * 300}).encode()),
                       400, "idempotency_key_invalid")

    def test_json_fingerprint_ignores_key_order(self):
        obj = uniq("obj")
        a = {"data": {"object": {"id": obj, "amount": 5}}, "type": "charge"}
        r1 = self.post("/events/deep", json.dumps(a).encode())
        self.assertEqual(r1.status, 201, r1.describe())
        b = '{ "type" : "charge", "data": {"object": {"amount": 5, "id": "%s"}}}' % obj
        r2 = self.post("/events/deep", b.encode())
        self.assertEqual(r2.header("idempotent-replayed"), "true", r2.describe())
        c = {"data": {"object": {"id": obj, "amount": 6}}, "type": "charge"}
        assert_problem(self, self.post("/events/deep", json.dumps(c).encode()), 422,
                       "fingerprint_mismatch")

    def test_body_key_identical_submits_are_one(self):
        body = json.dumps({"form": uniq("f")}).encode()
        r1 = self.post("/forms", body)
        r2 = self.post("/forms", body)
        self.assertEqual((r1.status, r2.status), (201, 201))
        self.assertEqual(r2.header("idempotent-replayed"), "true")
        r3 = self.post("/forms", body + b" ")
        self.assertEqual(r3.header("idempotent-replayed"), "false")

    def test_release_on_429(self):
        key = uniq("r")
        r = self.post("/retry429", b"{}", {"Idempotency-Key": key, "X-Upstream-Mode": "status=429"})
        self.assertEqual(r.status, 429, r.describe())
        self.assertEqual(r.header("idempotent-replayed"), "false")
        r = self.post("/retry429", b"{}", {"Idempotency-Key": key})
        self.assertEqual((r.status, r.header("idempotent-replayed")), (201, "false"))
        # on a route with the default release_on a 429 is final and replayed
        key = uniq("s")
        r = self.post("/ietf", b"{}", {"Idempotency-Key": key, "X-Upstream-Mode": "status=429"})
        self.assertEqual(r.status, 429)
        r = self.post("/ietf", b"{}", {"Idempotency-Key": key})
        self.assertEqual((r.status, r.header("idempotent-replayed")), (429, "true"))

    def test_concurrent_duplicates_one_upstream_call(self):
        key = uniq("c")
        results = []
        lock = threading.Lock()

        def go():
            r = self.post("/ietf", b'{"x":1}', {"Idempotency-Key": key})
            with lock:
                results.append(r)

        threads = [threading.Thread(target=go) for _ in range(30)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        firsts = [r for r in results if r.status == 201 and
                  r.header("idempotent-replayed") == "false"]
        self.assertEqual(len(firsts), 1)
        for r in results:
            self.assertIn(r.status, (201, 409), r.describe())
        fwd = json.loads(firsts[0].body)["key"]
        self.assertEqual(len([q for q in self.up.requests() if q["key"] == fwd]), 1)


    def test_duplicate_waits_for_the_forward(self):
        key = uniq("wait")
        first = {}

        def go():
            first["r"] = self.post("/ietf", b'{"w":1}', {"Idempotency-Key": key,
                                                          "X-Upstream-Mode": "slow=1"})

        t = threading.Thread(target=go)
        t.start()
        time.sleep(0.3)
        r = self.post("/ietf", b'{"w":1}', {"Idempotency-Key": key, "X-Upstream-Mode": "slow=1",
                                            "Prefer": "wait=5"})
        t.join()
        self.assertEqual(first["r"].status, 201, first["r"].describe())
        self.assertEqual(r.status, 201, r.describe())
        self.assertEqual(r.header("idempotent-replayed"), "true")
        self.assertEqual(r.header("preference-applied"), "wait=5")
        self.assertEqual(r.body, first["r"].body)
        fwd = json.loads(r.body)["key"]
        self.assertEqual(len([q for q in self.up.requests() if q["key"] == fwd]), 1)


class GuardedOperation(IdemdCase):
    """A derived-key route cannot fill a version counter's subject: refused
    at start, at reload and by PUT /v1/operations, naming the fix."""

    start_server = False

    def route(self, key):
        return {"method": "POST", "path": "/hook", "tenant": "acme", "operation": "order.guarded",
                "upstream": "http://127.0.0.1:9/hook", "key": key, "timeout_ms": 1000}

    def test_refused_at_start_reload_and_put(self):
        plain = self.idemd.start()
        c = Client(plain.port, self.api_key)
        r = c.put("/v1/operations/order.guarded",
                  dict(harness.DEFAULT_POLICY, version_key="orders:{subject}"))
        self.assertIn(r.status, (200, 201), r.describe())
        self.assertEqual(plain.stop(), 0)
        self.idemd.write_config(routes=[self.route("header:Idempotency-Key")])
        srv = self.idemd.start(wait=False)
        rc = srv.wait_exit(15)
        self.assertNotEqual(rc, 0, "a derived-key route on a guarded operation started")
        self.assertIn('give the route \\"key\\": \\"token\\"', srv.stderr_text())
        # a token route serves it; a reload to a derived key is refused
        self.idemd.write_config(routes=[self.route("token")])
        srv = self.idemd.start()
        self.idemd.write_config(routes=[self.route("json:/id")])
        srv.proc.send_signal(signal.SIGHUP)
        deadline = time.time() + 10
        while time.time() < deadline and "guards the version counter" not in srv.stderr_text():
            time.sleep(0.1)
        self.assertIn("guards the version counter", srv.stderr_text())
        self.assertEqual(srv.stop(), 0)
        # and an operation a running derived-key route uses cannot start guarding
        self.idemd.write_config(routes=[dict(self.route("header:Idempotency-Key"),
                                             operation="order.plain")])
        srv = self.idemd.start()
        c = Client(srv.port, self.api_key)
        r = c.put("/v1/operations/order.plain",
                  dict(harness.DEFAULT_POLICY, version_key="orders:{subject}"))
        assert_problem(self, r, 400, "invalid_request")
        self.assertIn("POST /hook", r.json["detail"])
        self.assertEqual(srv.stop(), 0)


if __name__ == "__main__":
    harness.main()
