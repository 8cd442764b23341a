"""Integration tests: HTTP core behaviour (routing errors, body limits, media
types, malformed JSON, request ids, access log, authentication, health,
readiness and metrics endpoints)."""

import json
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IdemdCase, assert_problem, assert_status, uniq  # noqa: E402


ORIGIN = "https://shop.example"


class HttpCore(IdemdCase):
    extra_config = {"max_body_bytes": 1024, "cors_origins": [ORIGIN]}

    def test_unknown_path_404(self):
        assert_problem(self, self.client.get("/v1/nothing-here"), 404, "not_found")
        assert_problem(self, self.anon.get("/nothing-here"), 404, "not_found")

    def test_wrong_method_405_with_allow(self):
        r = self.client.request("PATCH", "/v1/tokens", {"operation": "x", "subject": "y"})
        assert_problem(self, r, 405, "method_not_allowed")
        allow = r.header("allow")
        self.assertIsNotNone(allow, "405 without Allow" + r.describe())
        self.assertIn("POST", [m.strip() for m in allow.split(",")], r.describe())

        r = self.anon.delete("/healthz")
        assert_problem(self, r, 405, "method_not_allowed")
        self.assertEqual(r.header("allow"), "GET, HEAD", r.describe())
        r = self.client.delete("/v1/operations/x")
        self.assertEqual(r.header("allow"), "GET, HEAD, PUT", r.describe())

    def test_head_on_get_paths(self):
        # HEAD is the GET without its body, on every GET path (documented
        # as such), and nowhere else
        for client, p in ((self.anon, "/healthz"), (self.anon, "/readyz"),
                          (self.anon, "/metrics"), (self.client, "/v1/operations"),
                          (self.client, "/v1/versions/a:b"), (self.client, "/v1/records")):
            with self.subTest(path=p):
                g, h = client.get(p), client.request("HEAD", p)
                self.assertEqual((h.status, h.body), (g.status, b""), h.describe())
                self.assertEqual(h.header("content-type"), g.header("content-type"))
                self.assertIsNotNone(h.header("x-request-id"), h.describe())
        h = self.anon.request("HEAD", "/v1/operations")
        self.assertEqual((h.status, h.body), (401, b""), h.describe())
        h = self.client.request("HEAD", "/v1/tokens")
        self.assertEqual((h.status, h.header("allow")), (405, "POST"), h.describe())

    def test_preflight_on_every_path(self):
        # a preflight is answered on every path idemd serves (the health
        # paths too, as documented); an OPTIONS without Origin and
        # Access-Control-Request-Method is no preflight: 405
        pre = {"Origin": ORIGIN, "Access-Control-Request-Method": "GET"}
        for p in ("/healthz", "/readyz", "/metrics", "/v1/operations"):
            with self.subTest(path=p):
                r = self.anon.request("OPTIONS", p, headers=pre)
                self.assertEqual(r.status, 204, r.describe())
                self.assertEqual(r.header("access-control-allow-methods"), "GET, HEAD",
                                 r.describe())
                for h in ({"Origin": ORIGIN}, {"Access-Control-Request-Method": "GET"}, {}):
                    r = self.anon.request("OPTIONS", p, headers=h)
                    assert_problem(self, r, 405, "method_not_allowed")

    def test_body_over_limit_413(self):
        op = self.put_operation()
        body = {"operation": op, "subject": "u", "pad": "x" * 2000}
        assert_problem(self, self.client.post("/v1/tokens", body), 413, "payload_too_large")

    def test_chunked_body_over_limit_413(self):
        op = self.put_operation()
        body = {"operation": op, "subject": "u", "pad": "x" * 4000}
        r = self.client.post("/v1/tokens", body, chunked=True)
        assert_problem(self, r, 413, "payload_too_large")

    def test_body_just_under_limit_accepted(self):
        op = self.put_operation()
        r = self.client.post("/v1/tokens", {"operation": op, "subject": "s" * 100})
        assert_status(self, r, 201)

    def expect_head(self, length):
        return (b"POST /v1/tokens HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
                b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
                b"Content-Length: %d\r\n\r\n" % (self.api_key.encode(), length))

    def test_expect_continue_over_limit_413_without_body(self):
        interim, final = harness.raw_http(self.server.port, self.expect_head(5000000), b"")
        self.assertTrue(final.startswith(b"HTTP/1.1 413"), final[:300])
        self.assertIn(b"payload_too_large", final)

    def test_expect_continue_under_limit(self):
        op = self.put_operation()
        body = json.dumps({"operation": op, "subject": "u"}).encode()
        interim, final = harness.raw_http(self.server.port, self.expect_head(len(body)), body)
        self.assertTrue(interim.startswith(b"HTTP/1.1 100"), interim[:300])
        self.assertTrue(final.startswith(b"HTTP/1.1 201"), final[:300])

    def test_text_plain_415(self):
        op = self.put_operation()
        r = self.client.post("/v1/tokens", '{"operation":"%s","subject":"u"}' % op,
                             content_type="text/plain")
        assert_problem(self, r, 415, "unsupported_media_type")

    def test_json_with_charset_accepted(self):
        op = self.put_operation()
        r = self.client.post("/v1/tokens", {"operation": op, "subject": "u"},
                             content_type="application/json; charset=utf-8")
        assert_status(self, r, 201)

    def test_malformed_json_400(self):
        op = self.put_operation()
        for raw in ('{"operation": "%s", "subject": ' % op, "not json", "[1,2,3]", '"str"',
                    '{"operation": "%s", "subject": "u"} trailing' % op):
            with self.subTest(body=raw):
                r = self.client.post("/v1/tokens", raw)
                assert_problem(self, r, 400, "invalid_request")

    def test_invalid_utf8_400(self):
        op = self.put_operation()
        r = self.client.post("/v1/tokens", b'{"operation": "%s", "subject": "\xff\xfe"}' % op.encode())
        assert_problem(self, r, 400, "invalid_request")

    def test_request_id_echoed(self):
        rid = "it-" + uuid.uuid4().hex
        r = self.anon.get("/healthz", headers={"X-Request-Id": rid})
        assert_status(self, r, 200)
        self.assertEqual(r.header("x-request-id"), rid, r.describe())

    def test_request_id_generated(self):
        r1 = self.anon.get("/healthz")
        r2 = self.anon.get("/healthz")
        for r in (r1, r2):
            self.assertTrue(r.header("x-request-id"), "no X-Request-Id generated" + r.describe())
        self.assertNotEqual(r1.header("x-request-id"), r2.header("x-request-id"))

    def test_request_id_on_errors(self):
        rid = "it-" + uuid.uuid4().hex
        r = self.anon.get("/v1/operations", headers={"X-Request-Id": rid})
        assert_problem(self, r, 401, "unauthorized")
        self.assertEqual(r.header("x-request-id"), rid, r.describe())

    def wait_log(self, rid, timeout=3.0):
        deadline = time.monotonic() + timeout
        while True:
            recs = [x for x in self.server.log_records()
                    if isinstance(x, dict) and x.get("request_id") == rid]
            if recs or time.monotonic() > deadline:
                return recs
            time.sleep(0.05)

    def test_access_log_line_per_request(self):
        op = self.put_operation()
        tok = self.issue(op)
        cases = [
            ("GET", "/healthz", None, 200),
            ("GET", "/v1/operations/" + op, None, 200),
            ("POST", "/v1/tokens/%s/claim" % tok, {}, 201),
            ("GET", "/v1/tokens/%s" % tok, None, 200),
            ("GET", "/v1/nope", None, 404),
        ]
        for method, path, body, status in cases:
            with self.subTest(method=method, path=path):
                rid = "it-" + uuid.uuid4().hex
                r = self.client.request(method, path, body, headers={"X-Request-Id": rid})
                self.assertEqual(r.status, status, r.describe())
                recs = self.wait_log(rid)
                self.assertEqual(len(recs), 1, "log lines for %s: %r" % (rid, recs))
                rec = recs[0]
                for field in ("time", "request_id", "method", "route", "status", "duration_ms"):
                    self.assertIn(field, rec, "log line lacks %r: %r" % (field, rec))
                self.assertEqual(rec["method"], method, rec)
                self.assertEqual(rec["status"], status, rec)
                self.assertIsInstance(rec["duration_ms"], (int, float), rec)
                self.assertGreaterEqual(rec["duration_ms"], 0, rec)
                self.assertNotIn(tok, str(rec["route"]), "route carries the raw token: %r" % rec)

    def test_log_never_contains_secrets(self):
        op = self.put_operation()
        toks = [self.issue(op) for _ in range(3)]
        self.claim(toks[0], {"fingerprint": "f"})
        self.complete(toks[0], 1, 201, {"Location": "/x"}, {"ok": True})
        self.claim(toks[0], {"fingerprint": "f"})
        self.introspect(toks[1])
        self.revoke(toks[1])
        self.claim(toks[1])
        self.claim(harness.tamper(toks[2], len(toks[2]) - 5))
        self.client.post("/v1/tokens", {"operation": op, "subject": "u", "count": 2})
        self.anon.get("/v1/operations", headers={"Authorization": "Bearer " + self.api_key + "x"})
        self.client.request("POST", "/v1/tokens/%s/claim" % toks[2], "{bad json")
        time.sleep(0.3)
        log = self.server.stderr_text()
        self.assertTrue(log.strip(), "nothing logged")
        secret = self.api_key[4:] if self.api_key.startswith("idk_") else self.api_key
        self.assertNotIn(secret, log, "API key found in the log")
        for t in toks:
            self.assertNotIn(t, log, "token found in the log")
            self.assertNotIn(t[:40], log, "token prefix found in the log")

    def test_log_lines_are_json(self):
        self.anon.get("/healthz")
        time.sleep(0.2)
        for rec in self.server.log_records():
            self.assertIsInstance(rec, dict, "non-JSON log line: %r" % rec)

    def test_missing_api_key_401(self):
        assert_problem(self, self.anon.get("/v1/operations"), 401, "unauthorized")
        assert_problem(self, self.anon.post("/v1/tokens", {"operation": "x", "subject": "y"}),
                       401, "unauthorized")

    def test_wrong_api_key_401(self):
        for auth in ("Bearer " + self.api_key + "x", "Bearer idk_" + "0" * 40,
                     "Basic " + self.api_key, "Bearer", "bearer" + self.api_key):
            with self.subTest(auth=auth[:12]):
                r = self.anon.get("/v1/operations", headers={"Authorization": auth})
                assert_problem(self, r, 401, "unauthorized")

    def test_bearer_scheme_case_insensitive(self):
        r = self.anon.get("/v1/operations", headers={"Authorization": "bearer " + self.api_key})
        assert_status(self, r, 200)

    def test_keys_change_on_one_connection(self):
        # a connection remembers the key it last authenticated with: the next
        # request with another key, a wrong one or none must not ride on it
        import http.client
        op_a = self.put_operation()
        op_b = self.put_operation(client=self.other)
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=15)

        def names(key):
            conn.request("GET", "/v1/operations",
                         headers={"Authorization": "Bearer " + key} if key else {})
            r = conn.getresponse()
            body = r.read()
            if r.status != 200:
                return r.status
            return {o["name"] for o in json.loads(body)["operations"]}

        try:
            self.assertIn(op_a, names(self.api_key))
            got = names(self.keys[self.tenant_names[1]])
            self.assertIn(op_b, got)
            self.assertNotIn(op_a, got)
            self.assertEqual(names(self.api_key[:-1] + ("A" if self.api_key[-1] != "A" else "B")), 401)
            self.assertEqual(names(None), 401)
            got = names(self.api_key)
            self.assertIn(op_a, got)
            self.assertNotIn(op_b, got)
        finally:
            conn.close()

    def test_tenant_created_while_serving_can_authenticate(self):
        key = self.idemd.tenant_create(uniq("late"))
        r = self.client.with_key(key).get("/v1/operations")
        assert_status(self, r, 200)

    def test_healthz(self):
        r = self.anon.get("/healthz")
        assert_status(self, r, 200)

    def test_readyz(self):
        r = self.anon.get("/readyz")
        assert_status(self, r, 200)

    def test_metrics(self):
        self.anon.get("/healthz")
        r = self.anon.get("/metrics")
        assert_status(self, r, 200)
        self.assertTrue(r.header("content-type", "").startswith("text/plain"), r.describe())
        text = r.body.decode()
        self.assertIn("# TYPE", text, r.describe())
        for gauge in ("idemd_replay_cache_bytes", "idemd_replay_cache_entries"):
            self.assertRegex(text, r"(?m)^%s \d+$" % gauge, r.describe())
        for ln in text.splitlines():
            if ln and not ln.startswith("#"):
                name_labels, _, value = ln.rpartition(" ")
                self.assertTrue(name_labels, "bad metrics line %r" % ln)
                float(value)

    def test_head_or_unknown_method_does_not_crash(self):
        r = self.client.request("FROB", "/v1/operations")
        self.assertIn(r.status, (400, 405, 501), r.describe())
        r = self.anon.get("/healthz")
        assert_status(self, r, 200)


if __name__ == "__main__":
    harness.main()
