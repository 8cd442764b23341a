"""Integration tests: gateway routes against a real upstream process
(upstream.py): forward once with the added and dropped headers, replay,
409 while in flight, 502 / 504 / 5xx releasing the claim, token and scope
errors, CORS, slow upstreams not stalling other requests, 50 concurrent
identical submits reaching the upstream once, a failed completion write,
and shutdown finishing an in-flight forward."""

import base64
import collections
import json
import os
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Client, Idemd, IdemdCase, assert_problem, assert_retry_after,  # noqa: E402
                     free_port)
from faultkit import storm  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ORIGIN = "http://shop.example"
MAX_BODY = 4096


class Upstream:
    """upstream.py in its own process."""

    def __init__(self, port=0):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "upstream.py"),
                                     "--port", str(port)],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("PORT "):
            self.proc.kill()
            raise AssertionError("upstream.py did not start: %r" % line)
        self.port = int(line.split()[1])
        self.client = Client(self.port)

    def requests(self, key=None):
        r = self.client.get("/_requests")
        reqs = json.loads(r.body)
        return [q for q in reqs if key is None or q["key"] == key]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


def headers_of(upreq):
    """Header names lower-cased -> list of values, as the upstream saw them."""
    h = collections.defaultdict(list)
    for k, v in upreq["headers"]:
        h[k.lower()].append(v)
    return h


def raw_request(port, data, timeout=10.0):
    """Sends DATA (bytes) as is; returns (status, headers dict, body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            head, sep, rest = buf.partition(b"\r\n\r\n")
            if sep:
                lines = head.decode("latin-1").split("\r\n")
                hdrs = {}
                for ln in lines[1:]:
                    k, _, v = ln.partition(":")
                    hdrs[k.strip().lower()] = v.strip()
                n = int(hdrs.get("content-length", "0"))
                if len(rest) >= n:
                    return int(lines[0].split()[1]), hdrs, rest[:n]
    raise AssertionError("no complete response")


class Gateway(IdemdCase):
    tenant_names = ("acme", "globex")

    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(Upstream())
        cls.late_port = free_port()
        u = "http://127.0.0.1:%d" % cls.up.port
        route = lambda method, path, upstream, **kw: dict(  # noqa: E731
            {"method": method, "path": path, "tenant": "acme", "operation": "order.create",
             "upstream": upstream}, **kw)
        cls.extra_config = {
            "threads": 2,
            "pool_size": 8,
            "max_body_bytes": MAX_BODY,
            "cors_origins": [ORIGIN],
            "routes": [
                route("POST", "/orders", u + "/ok", store_headers=["Location", "x-order-id"],
                      timeout_ms=5000),
                route("PUT", "/orders", u + "/ok-put", timeout_ms=5000),
                route("POST", "/orders/quick", u + "/quick", timeout_ms=800,
                      operation="order.quick"),
                route("POST", "/late", "http://127.0.0.1:%d" % cls.late_port,
                      connect_timeout_ms=500),
                route("POST", "/append/x", u),
                route("POST", "/pay", u + "/pay", operation="payment.capture"),
                route("POST", "/g/orders", u + "/g", tenant="globex"),
                route("POST", "/fragile", u + "/fragile", operation="order.fragile",
                      timeout_ms=1000),
            ],
        }
        super().setUpClass()
        for name, lease in (("order.create", 30), ("payment.capture", 30), ("order.fragile", 2),
                            ("order.quick", 2)):
            cls.define_operation(name, lease_seconds=lease)
        cls.define_operation("order.create", client=cls.other)

    # ---- helpers

    def token(self, op="order.create", client=None, subject=None):
        r = self.issue_resp(op, subject, client)
        self.assertEqual(r.status, 201, r.describe())
        return r.json["token"], r.json["id"], r.json["subject"]

    def submit(self, token, path="/orders", body=b"item=42&qty=1", method="POST",
               headers=None, content_type="application/x-www-form-urlencoded", port=None,
               timeout=15.0):
        h = dict(headers or {})
        if token is not None:
            h["Idempotency-Key"] = token
        c = Client(port or self.server.port, timeout=timeout)
        return c.request(method, path, body, headers=h, api_key=None, content_type=content_type)

    def assert_forwarded(self, r, replayed):
        self.assertEqual(r.status, 201, r.describe())
        self.assertEqual(r.header("idempotent-replayed"), replayed, r.describe())

    def in_thread(self, fn):
        out = {}

        def run():
            try:
                out["r"] = fn()
            except Exception as e:  # reported by the caller
                out["r"] = e
        t = threading.Thread(target=run)
        t.start()
        return t, out

    # ---- forward once, replay

    def test_first_submit_forwarded_with_headers(self):
        tok, tid, subject = self.token()
        body = b"item=42&qty=1&note=caf\xc3\xa9"
        r = self.submit(tok, body=body, headers={
            "Connection": "keep-alive, X-Drop-Me",
            "X-Drop-Me": "1",
            "Keep-Alive": "timeout=5",
            "Proxy-Authorization": "Basic Zm9vOmJhcg==",
            "TE": "trailers",
            "Authorization": "Bearer shop-session-7",
            "X-Forwarded-For": "203.0.113.9",
            "Idempotency-Subject": "spoofed",
            "X-Custom": "kept",
            "X-Request-Id": "gw-test-1",
        })
        self.assert_forwarded(r, "false")
        self.assertEqual(r.header("location"), "/orders/%d" % r.json["order"], r.describe())
        self.assertEqual(r.header("x-order-id"), str(r.json["order"]), r.describe())
        self.assertEqual(r.header("content-type"), "application/json", r.describe())
        self.assertIsNone(r.header("x-not-stored"), "a header outside store_headers came back")
        self.assertEqual(r.json["key"], tid)
        self.assertEqual(r.json["subject"], subject)

        reqs = self.up.requests(tid)
        self.assertEqual(len(reqs), 1, reqs)
        q = reqs[0]
        h = headers_of(q)
        self.assertEqual(q["method"], "POST")
        self.assertEqual(q["path"], "/ok")
        self.assertEqual(h["idempotency-key"], [tid])
        self.assertEqual(h["idempotency-subject"], [subject])
        # not a trusted route: the client's X-Forwarded-For is dropped
        self.assertEqual(h["x-forwarded-for"], ["127.0.0.1"])
        self.assertEqual(h["authorization"], ["Bearer shop-session-7"])
        self.assertEqual(h["x-custom"], ["kept"])
        self.assertEqual(h["x-request-id"], ["gw-test-1"])
        self.assertEqual(h["content-type"], ["application/x-www-form-urlencoded"])
        self.assertEqual(h["host"], ["127.0.0.1:%d" % self.up.port])
        self.assertEqual(h["content-length"], [str(len(body))])
        for gone in ("x-drop-me", "keep-alive", "proxy-authorization", "te", "expect",
                     "transfer-encoding"):
            self.assertNotIn(gone, h, "%s was forwarded" % gone)
        self.assertNotIn("keep-alive, X-Drop-Me", h.get("connection", []))
        self.assertEqual(base64.b64decode(q["body_b64"]), body)

    def test_duplicate_replayed_identically(self):
        tok, tid, _ = self.token()
        first = self.submit(tok)
        self.assert_forwarded(first, "false")
        for _ in range(3):
            r = self.submit(tok)
            self.assert_forwarded(r, "true")
            self.assertEqual(r.body, first.body)
            for h in ("location", "x-order-id", "content-type"):
                self.assertEqual(r.header(h), first.header(h), h)
        self.assertEqual(len(self.up.requests(tid)), 1)

    def test_body_without_content_type_and_query_string(self):
        tok, tid, _ = self.token()
        r = self.submit(tok, path="/orders?ref=a+b&x=%41&flag", body=b"\x00\x01raw",
                        content_type=None)
        self.assert_forwarded(r, "false")
        q = self.up.requests(tid)[0]
        self.assertEqual(q["path"], "/ok?ref=a+b&x=%41&flag")
        self.assertNotIn("content-type", headers_of(q))
        # the query is part of the request: another one is another request
        r = self.submit(tok, path="/orders?ref=other", body=b"\x00\x01raw", content_type=None)
        assert_problem(self, r, 422, "fingerprint_mismatch")
        r = self.submit(tok, path="/orders?ref=a+b&x=%41&flag", body=b"\x00\x01raw",
                        content_type=None)
        self.assert_forwarded(r, "true")

    def test_upstream_without_path_gets_the_route_path(self):
        tok, tid, _ = self.token()
        self.assert_forwarded(self.submit(tok, path="/append/x"), "false")
        self.assertEqual(self.up.requests(tid)[0]["path"], "/append/x")

    def test_put_route_and_empty_body(self):
        tok, tid, _ = self.token()
        r = self.submit(tok, method="PUT", body=None, content_type=None)
        self.assert_forwarded(r, "false")
        q = self.up.requests(tid)[0]
        self.assertEqual((q["method"], q["path"]), ("PUT", "/ok-put"))
        self.assertEqual(headers_of(q)["content-length"], ["0"])

    def test_upstream_connections_reused(self):
        ids = []
        for _ in range(5):
            tok, tid, _ = self.token()
            self.assert_forwarded(self.submit(tok), "false")
            ids.append(tid)
        peers = [self.up.requests(tid)[0]["peer"] for tid in ids]
        print("\n  5 sequential forwards used %d upstream connection(s)" % len(set(peers)),
              file=sys.stderr)
        self.assertLess(len(set(peers)), 5, peers)

    def test_fingerprint_mismatch(self):
        tok, tid, _ = self.token()
        self.assert_forwarded(self.submit(tok, body=b"a=1"), "false")
        assert_problem(self, self.submit(tok, body=b"a=2"), 422, "fingerprint_mismatch")
        self.assertEqual(len(self.up.requests(tid)), 1)

    def test_default_fingerprint_is_json_meaning(self):
        # "auto", the default: a JSON body by its canonical JSON (the rule of
        # the API and every client), any other body byte for byte (above)
        tok, tid, _ = self.token()
        self.assert_forwarded(self.submit(tok, body=b'{"amount":4200,"cart":"c-1"}'), "false")
        spaced = b'{ "cart": "c-1",\n "amount": 4200 }'
        self.assert_forwarded(self.submit(tok, body=spaced), "true")
        assert_problem(self, self.submit(tok, body=b'{"amount":4201,"cart":"c-1"}'), 422,
                       "fingerprint_mismatch")
        # the query is part of the request: another one is another request
        assert_problem(self, self.submit(tok, path="/orders?coupon=1",
                                         body=b'{"amount":4200,"cart":"c-1"}'), 422,
                       "fingerprint_mismatch")
        # bytes replayed before are answered by their bytes alone (no parse):
        # still the same answer, and still nothing else's
        for body in (spaced, spaced, b'{"amount":4200,"cart":"c-1"}', spaced):
            self.assert_forwarded(self.submit(tok, body=body), "true")
        assert_problem(self, self.submit(tok, path="/orders?coupon=1", body=spaced), 422,
                       "fingerprint_mismatch")
        self.assertEqual(len(self.up.requests(tid)), 1)

    # ---- in flight, upstream failures

    def test_duplicate_while_in_flight_409(self):
        tok, tid, _ = self.token()
        t, out = self.in_thread(lambda: self.submit(tok, headers={"X-Upstream-Mode": "slow=1.5"}))
        time.sleep(0.4)
        r = self.submit(tok, headers={"X-Upstream-Mode": "slow=1.5"})
        assert_problem(self, r, 409, "request_in_progress")
        assert_retry_after(self, r)
        t.join()
        self.assert_forwarded(out["r"], "false")
        self.assert_forwarded(self.submit(tok), "true")
        self.assertEqual(len(self.up.requests(tid)), 1)

    def test_upstream_4xx_is_final(self):
        tok, tid, _ = self.token()
        r = self.submit(tok, headers={"X-Upstream-Mode": "status=400"})
        self.assertEqual(r.status, 400, r.describe())
        self.assertEqual(r.header("idempotent-replayed"), "false")
        self.assertEqual(r.json, {"error": "upstream said 400"})
        r2 = self.submit(tok)
        self.assertEqual(r2.status, 400, r2.describe())
        self.assertEqual(r2.header("idempotent-replayed"), "true")
        self.assertEqual(r2.body, r.body)
        self.assertEqual(r2.header("x-order-id"), "none")
        self.assertEqual(len(self.up.requests(tid)), 1)

    def test_upstream_5xx_passed_through_and_released(self):
        tok, tid, _ = self.token()
        r = self.submit(tok, headers={"X-Upstream-Mode": "status=503"})
        self.assertEqual(r.status, 503, r.describe())
        self.assertEqual(r.json, {"error": "upstream said 503"}, r.describe())
        self.assertEqual(r.header("content-type"), "application/json")
        # not stored, but the upstream's own answer to this submit
        self.assertEqual(r.header("idempotent-replayed"), "false", r.describe())
        self.assert_forwarded(self.submit(tok), "false")
        self.assert_forwarded(self.submit(tok), "true")
        self.assertEqual(len(self.up.requests(tid)), 2)

    def test_unreachable_502_then_same_token_succeeds(self):
        tok, tid, _ = self.token()
        r = self.submit(tok, path="/late")
        assert_problem(self, r, 502, "upstream_unavailable")
        late = Upstream(self.late_port)
        try:
            self.assert_forwarded(self.submit(tok, path="/late"), "false")
            self.assert_forwarded(self.submit(tok, path="/late"), "true")
            self.assertEqual(len(late.requests(tid)), 1)
        finally:
            late.stop()

    def test_connection_closed_without_answer_502_held_until_the_lease_ends(self):
        # the upstream may have acted on what it read: the key stays held
        tok, tid, _ = self.token("order.quick")
        r = self.submit(tok, path="/orders/quick", headers={"X-Upstream-Mode": "close"})
        assert_problem(self, r, 502, "upstream_unavailable")
        assert_problem(self, self.submit(tok, path="/orders/quick"), 409, "request_in_progress")
        time.sleep(2.2)
        self.assert_forwarded(self.submit(tok, path="/orders/quick"), "false")
        self.assertEqual(len(self.up.requests(tid)), 2)

    def test_timeout_504_then_same_token_succeeds_after_the_lease(self):
        tok, tid, _ = self.token("order.quick")
        r = self.submit(tok, path="/orders/quick", headers={"X-Upstream-Mode": "slow=2"})
        assert_problem(self, r, 504, "upstream_timeout")
        self.assertLess(r.elapsed, 1.8, "the 800 ms route timeout was not applied")
        assert_problem(self, self.submit(tok, path="/orders/quick"), 409, "request_in_progress")
        time.sleep(2.2)
        self.assert_forwarded(self.submit(tok, path="/orders/quick"), "false")
        self.assert_forwarded(self.submit(tok, path="/orders/quick"), "true")
        # the upstream saw the request twice with the same key: it must dedupe
        self.assertEqual([q["key"] for q in self.up.requests(tid)], [tid, tid])

    def test_oversized_success_502_stored_never_run_again(self):
        # the upstream acted: what cannot be stored is recorded as executed
        tok, tid, _ = self.token()
        r = self.submit(tok, headers={"X-Upstream-Mode": "big=%d" % (MAX_BODY + 1)})
        assert_problem(self, r, 502, "upstream_answer_unstorable")
        self.assertEqual(r.header("idempotent-replayed"), "false")
        r = self.submit(tok)
        assert_problem(self, r, 502, "upstream_answer_unstorable")
        self.assertEqual(r.header("idempotent-replayed"), "true")
        self.assertEqual(len(self.up.requests(tid)), 1)

    # ---- token and route errors

    def test_missing_key_400(self):
        assert_problem(self, self.submit(None), 400, "idempotency_key_missing")

    def test_two_keys_400(self):
        tok, _, _ = self.token()
        status, _, body = raw_request(self.server.port, (
            "POST /orders HTTP/1.1\r\nHost: x\r\nIdempotency-Key: %s\r\n"
            "Idempotency-Key: %s\r\nContent-Length: 3\r\nConnection: close\r\n\r\na=1"
            % (tok, tok)).encode())
        self.assertEqual(status, 400)
        self.assertEqual(json.loads(body)["code"], "invalid_request")

    def test_malformed_and_invalid_tokens(self):
        tok, _, _ = self.token()
        assert_problem(self, self.submit("not a token!"), 400, "token_malformed")
        assert_problem(self, self.submit(harness.tamper(tok, 40)), 403, "token_invalid")
        # an sf-string is accepted as well as the bare token
        self.assert_forwarded(self.submit('"%s"' % tok), "false")

    def test_token_of_another_operation_403(self):
        tok, tid, _ = self.token("payment.capture")
        assert_problem(self, self.submit(tok, path="/orders"), 403, "token_scope_mismatch")
        self.assertEqual(self.up.requests(tid), [])
        self.assert_forwarded(self.submit(tok, path="/pay"), "false")

    def test_token_of_another_tenant_403(self):
        tok, tid, _ = self.token()
        assert_problem(self, self.submit(tok, path="/g/orders"), 403, "token_scope_mismatch")
        gtok, gid, _ = self.token(client=self.other)
        assert_problem(self, self.submit(gtok, path="/orders"), 403, "token_scope_mismatch")
        self.assert_forwarded(self.submit(gtok, path="/g/orders"), "false")

    def test_method_not_configured_405(self):
        r = self.submit(None, method="GET", body=None, content_type=None)
        assert_problem(self, r, 405, "method_not_allowed")
        self.assertEqual(r.header("allow"), "POST, PUT")

    def test_api_still_checks_json(self):
        r = self.client.post("/v1/tokens", b"x=1", content_type="text/plain")
        assert_problem(self, r, 415, "unsupported_media_type")

    # ---- CORS

    def test_cors_preflight_gateway_route(self):
        r = self.anon.request("OPTIONS", "/orders", headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "content-type, idempotency-key"})
        self.assertEqual(r.status, 204, r.describe())
        self.assertEqual(r.header("access-control-allow-origin"), ORIGIN)
        self.assertEqual(r.header("access-control-allow-credentials"), "true")
        self.assertEqual(r.header("access-control-allow-methods"), "POST, PUT")
        allowed = [h.strip().lower() for h in r.header("access-control-allow-headers").split(",")]
        for h in ("content-type", "idempotency-key", "if-match", "prefer", "authorization",
                  "x-request-id"):
            self.assertIn(h, allowed)
        self.assertEqual(r.header("access-control-max-age"), "600")
        self.assertIn("Origin", r.header("vary"))

    def test_cors_preflight_api_route(self):
        r = self.anon.request("OPTIONS", "/v1/tokens", headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": "POST"})
        self.assertEqual(r.status, 204, r.describe())
        self.assertEqual(r.header("access-control-allow-methods"), "POST")
        r = self.anon.request("OPTIONS", "/nowhere", headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": "POST"})
        self.assertEqual(r.status, 404, r.describe())

    def test_cors_unknown_origin(self):
        r = self.anon.request("OPTIONS", "/orders", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
        assert_problem(self, r, 403, "cors_origin_denied")
        self.assertIsNone(r.header("access-control-allow-origin"))
        tok, _, _ = self.token()
        r = self.submit(tok, headers={"Origin": "http://evil.example"})
        self.assert_forwarded(r, "false")
        self.assertIsNone(r.header("access-control-allow-origin"))
        self.assertIsNone(r.header("access-control-allow-credentials"))

    def test_cors_actual_responses_expose_headers(self):
        tok, _, _ = self.token()
        for expect in ("false", "true"):
            r = self.submit(tok, headers={"Origin": ORIGIN})
            self.assert_forwarded(r, expect)
            self.assertEqual(r.header("access-control-allow-origin"), ORIGIN)
            self.assertEqual(r.header("access-control-allow-credentials"), "true")
            exposed = [h.strip().lower() for h in
                       r.header("access-control-expose-headers").split(",")]
            for h in ("idempotent-replayed", "etag", "retry-after", "preference-applied",
                      "x-request-id"):
                self.assertIn(h, exposed)
            self.assertIn("Origin", r.header("vary"))
        # errors are readable by the page too
        r = self.submit(None, headers={"Origin": ORIGIN})
        assert_problem(self, r, 400, "idempotency_key_missing")
        self.assertEqual(r.header("access-control-allow-origin"), ORIGIN)

    # ---- concurrency

    def test_slow_upstream_does_not_stall_other_requests(self):
        # 4 forwards of 2 s each, on a server with 2 HTTP threads
        toks = [self.token()[0] for _ in range(4)]
        slow = [self.in_thread(lambda t=t: self.submit(t, headers={"X-Upstream-Mode": "slow=2"}))
                for t in toks]
        time.sleep(0.4)
        t0 = time.monotonic()
        h = self.anon.get("/healthz")
        healthz = time.monotonic() - t0
        self.assertEqual(h.status, 200)
        tok, _, _ = self.token()
        fast = self.submit(tok)
        self.assert_forwarded(fast, "false")
        for t, _ in slow:
            t.join()
        slow_times = [out["r"].elapsed for _, out in slow]
        for _, out in slow:
            self.assert_forwarded(out["r"], "false")
        print("\n  slow upstream: 4 forwards of 2 s on 2 HTTP threads took %s s; meanwhile "
              "/healthz answered in %.1f ms and another submit in %.1f ms"
              % (", ".join("%.2f" % e for e in slow_times), healthz * 1e3, fast.elapsed * 1e3),
              file=sys.stderr)
        self.assertLess(healthz, 0.5)
        self.assertLess(fast.elapsed, 0.5)

    def test_50_concurrent_identical_submits_reach_upstream_once(self):
        tok, tid, _ = self.token()
        n = 50
        results, elapsed = storm(n, lambda i: self.submit(
            tok, headers={"X-Upstream-Mode": "slow=1"}, timeout=30))
        counts = collections.Counter()
        for r in results:
            if isinstance(r, Exception):
                counts["error " + type(r).__name__] += 1
            elif r.status == 201:
                counts["201 replayed=" + r.header("idempotent-replayed", "?")] += 1
            else:
                counts["%d %s" % (r.status, (r.json or {}).get("code"))] += 1
        upstream = len(self.up.requests(tid))
        print("\n  50 concurrent identical submits in %.2f s: %s; the upstream received %d "
              "request(s) with that Idempotency-Key" % (elapsed, dict(counts), upstream),
              file=sys.stderr)
        self.assertEqual(upstream, 1)
        self.assertEqual(counts["201 replayed=false"], 1, counts)
        self.assertEqual(sum(v for k, v in counts.items()
                             if k in ("201 replayed=true", "409 request_in_progress")), n - 1,
                         counts)
        self.assert_forwarded(self.submit(tok), "true")

    # ---- completion write fails after the upstream answered

    def test_completion_write_failure_503_then_stored(self):
        # the upstream acted; the completion fails: the client gets 503, and
        # idemd, which still holds the key (its fence), writes the answer
        # again until the database takes it: never a second forward
        db = self.idemd.db
        harness.psql(
            "CREATE FUNCTION gw_test_fail() RETURNS trigger LANGUAGE plpgsql AS "
            "$$BEGIN RAISE EXCEPTION 'injected completion failure'; END$$; "
            "CREATE TRIGGER gw_test_fail BEFORE UPDATE ON records FOR EACH ROW "
            "WHEN (NEW.state = 'completed') EXECUTE FUNCTION gw_test_fail();", db=db)
        try:
            tok, tid, _ = self.token("order.fragile")
            r = self.submit(tok, path="/fragile")
            assert_problem(self, r, 503, "unavailable")
            # held past its 2 s lease while the answer is not stored
            time.sleep(2.5)
            assert_problem(self, self.submit(tok, path="/fragile"), 409, "request_in_progress")
        finally:
            harness.psql("DROP TRIGGER gw_test_fail ON records; DROP FUNCTION gw_test_fail();",
                         db=db)
        deadline = time.monotonic() + 10
        while True:
            r = self.submit(tok, path="/fragile")
            if r.status != 409 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        self.assert_forwarded(r, "true")
        self.assertEqual([q["key"] for q in self.up.requests(tid)], [tid])

    # ---- start and stop

    def test_shutdown_finishes_in_flight_forward(self):
        port = free_port()
        srv = self.idemd.start(port=port)
        tok, tid, _ = self.token()
        t, out = self.in_thread(lambda: self.submit(tok, port=port,
                                                    headers={"X-Upstream-Mode": "slow=1.5"}))
        time.sleep(0.5)
        t0 = time.monotonic()
        rc = srv.stop()
        stopped = time.monotonic() - t0
        t.join()
        self.assertEqual(rc, 0, srv.stderr_text()[-2000:])
        self.assert_forwarded(out["r"], "false")
        self.assert_forwarded(self.submit(tok), "true")
        self.assertEqual(len(self.up.requests(tid)), 1)
        print("\n  SIGTERM during a 1.5 s forward: stopped after %.2f s, the client got %d"
              % (stopped, out["r"].status), file=sys.stderr)

    def test_unknown_tenant_refuses_to_start(self):
        cfg = dict(self.extra_config)
        cfg["master_key_file"] = self.idemd.master_key_file
        cfg["routes"] = [{"method": "POST", "path": "/x", "tenant": "nope",
                          "operation": "order.create", "upstream": "http://127.0.0.1:9"}]
        other = Idemd(cfg, db=self.idemd.db)
        try:
            srv = other.start(wait=False)
            rc = srv.proc.wait(15)
            self.assertNotEqual(rc, 0)
            self.assertIn('names tenant \\"nope\\", which does not exist', srv.stderr_text())
        finally:
            other.cleanup()


if __name__ == "__main__":
    harness.main()
