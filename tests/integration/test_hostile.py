"""Hostile HTTP: every kind of bad input gets a clear 4xx (problem+json
where idemd answers; libmicrohttpd answers a few framing errors itself),
never a crash, a hang or a 5xx.

Oversized headers and bodies, many headers, slow clients (the connection
timeout frees the slot), request framing that could smuggle a second
request, invalid UTF-8, NUL bytes, huge numbers, deep nesting, wrong content
types, odd paths and percent-encoding, two Idempotency-Key headers on a
gateway route, and tokens of another tenant or operation."""

import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Client, IdemdCase, assert_problem, assert_status, uniq  # noqa: E402
import faultkit  # noqa: E402
import rawclient  # noqa: E402

MAX_BODY = 65536     # max_body_bytes: deep nesting (60 KB) fits, 200 KB does not
TIMEOUT = 2          # connection_timeout_seconds of the slow-client server
MAX_CONN = 4         # max_connections of the slow-client server


def exchange(port, data, wait=1.5, all_of_it=False):
    """Sends DATA; reads until the server closes, WAIT seconds pass, or
    (unless ALL_OF_IT) one whole response has come. Returns (responses,
    closed, raw)."""
    return rawclient.exchange(port, data, wait, all_of_it)[:3]


class Hostile(IdemdCase):
    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(faultkit.Upstream(status=201))
        cls.extra_config = {
            "threads": 4, "pool_size": 4, "max_body_bytes": MAX_BODY,
            "routes": [{"method": "POST", "path": "/orders", "tenant": "acme",
                        "operation": "order.create", "upstream": cls.up.url + "/orders"}],
        }
        super().setUpClass()
        for name in ("order.create", "payment.capture"):
            cls.define_operation(name)
        cls.define_operation("order.create", client=cls.other)
        cls.op = "order.create"
        cls.mhd_bodies = {}

    def alive(self):
        self.assertIsNone(self.server.proc.poll(), "idemd exited:\n" +
                          self.server.stderr_text()[-2000:])
        assert_status(self, self.anon.get("/healthz"), 200)

    def auth(self):
        return b"Authorization: Bearer " + self.api_key.encode() + b"\r\n"

    def note_mhd(self, what, status, hdrs, body):
        ct = hdrs.get("content-type", "(none)")
        print("\n  %s: %d, Content-Type %s, body %r" % (what, status, ct, body[:60]), end="")

    # ------------------------------------------------------------ headers

    def test_oversized_header_4xx(self):
        for size in (70000, 1000000):
            with self.subTest(size=size):
                head = (b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * size +
                        b"\r\n\r\n")
                rs, closed, raw = exchange(self.server.port, head)
                self.assertTrue(rs, "no answer to a %d-byte header: %r" % (size, raw[:200]))
                status, hdrs, body = rs[0]
                self.assertTrue(400 <= status < 500, "status %d" % status)
                self.note_mhd("header of %d bytes" % size, status, hdrs, body)
        self.alive()

    def test_oversized_authorization_header(self):
        r = self.client.get("/v1/operations", api_key="idk_" + "x" * 50000)
        self.assertTrue(400 <= r.status < 500, r.describe())
        if r.status == 401:
            assert_problem(self, r, 401, "unauthorized")
        self.alive()

    def test_many_headers(self):
        # a few hundred small headers fit: answered normally
        hdrs = {"X-H%d" % i: "v" for i in range(200)}
        r = self.client.get("/v1/operations", headers=hdrs)
        assert_status(self, r, 200)
        # thousands do not: a 4xx from libmicrohttpd, never a crash
        for n in (2000, 20000):
            with self.subTest(headers=n):
                head = (b"GET /v1/operations HTTP/1.1\r\nHost: t\r\n" + self.auth() +
                        b"".join(b"X-H%d: v\r\n" % i for i in range(n)) + b"\r\n")
                rs, closed, raw = exchange(self.server.port, head)
                self.assertTrue(rs, "no answer to %d headers: %r" % (n, raw[:200]))
                status, h, body = rs[0]
                self.assertTrue(400 <= status < 500, "status %d" % status)
                self.note_mhd("%d headers" % n, status, h, body)
        self.alive()

    def test_many_idempotency_keys_and_repeated_authorization(self):
        # the same header 200 times: still one clear answer
        head = (b"GET /v1/operations HTTP/1.1\r\nHost: t\r\n" + self.auth() * 200 + b"\r\n")
        rs, _, raw = exchange(self.server.port, head)
        self.assertTrue(rs, raw[:200])
        # 200 repeated keys outgrow the 16 KiB header buffer: 431 is a clear answer too
        self.assertTrue(rs[0][0] in (200, 400, 401, 431), rs[0])
        self.alive()

    # ------------------------------------------------------------ bodies

    def test_oversized_body_413(self):
        big = 200 * 1024
        # declared too large: answered before a byte of the body is read
        for cl in (b"%d" % big, b"%d" % (MAX_BODY + 1), b"18446744073709551615",
                   b"99999999999999999999999"):
            with self.subTest(content_length=cl):
                head = (b"POST /v1/tokens HTTP/1.1\r\nHost: t\r\n" + self.auth() +
                        b"Content-Type: application/json\r\nContent-Length: " + cl + b"\r\n\r\n")
                rs, _, raw = exchange(self.server.port, head + b"{")
                self.assertTrue(rs, raw[:300])
                status, hdrs, body = rs[0]
                self.assertEqual(status, 413, rs[0])
                if hdrs.get("content-type") == "application/problem+json":
                    self.assertIn(b"payload_too_large", body)
                else:   # libmicrohttpd's own answer to a length it cannot parse
                    self.note_mhd("Content-Length %s" % cl.decode(), status, hdrs, body)
        # sent in full, and chunked
        pad = {"operation": self.op, "subject": "u", "pad": "x" * big}
        pad_small = {"operation": self.op, "subject": "u", "pad": "x" * (MAX_BODY - 20)}
        assert_problem(self, self.client.post("/v1/tokens", pad_small), 413, "payload_too_large")
        assert_problem(self, self.client.post("/v1/tokens", pad), 413, "payload_too_large")
        assert_problem(self, self.client.post("/v1/tokens", pad, chunked=True),
                       413, "payload_too_large")
        self.alive()

    def test_bad_content_length_4xx(self):
        for cl in (b"-1", b"abc", b"1e3", b" 12 3"):
            with self.subTest(content_length=cl):
                head = (b"POST /v1/tokens HTTP/1.1\r\nHost: t\r\n" + self.auth() +
                        b"Content-Type: application/json\r\nContent-Length: " + cl +
                        b"\r\n\r\n{}")
                rs, _, raw = exchange(self.server.port, head)
                self.assertTrue(rs, raw[:300])
                self.assertTrue(400 <= rs[0][0] < 500, rs[0])
                if rs[0][1].get("content-type") != "application/problem+json":
                    self.note_mhd("Content-Length %r" % cl, *rs[0])
        self.alive()

    def test_conflicting_content_lengths_rejected(self):
        """Two different Content-Length values (RFC 9112 6.3: unrecoverable)
        must not be read as one request plus a second, smuggled one."""
        tok = self.issue(self.op)
        smuggled = b"GET /v1/operations HTTP/1.1\r\nHost: t\r\n" + self.auth() + b"\r\n"
        head = (b"POST /v1/tokens/" + tok.encode() + b"/claim HTTP/1.1\r\nHost: t\r\n" +
                self.auth() + b"Content-Type: application/json\r\nContent-Length: 2\r\n"
                b"Content-Length: %d\r\n\r\n{}" % (2 + len(smuggled)))
        rs, closed, raw = exchange(self.server.port, head + smuggled, all_of_it=True)
        print("\n  conflicting Content-Length: %s, connection closed: %s"
              % ([r[0] for r in rs], closed))
        self.assertEqual(len(rs), 1, "one request with two Content-Length values was read as "
                         "%d requests: %s" % (len(rs), [r[0] for r in rs]))
        self.assertEqual(rs[0][0], 400, rs[0])
        self.assertEqual(assert_status(self, self.introspect(tok), 200)["state"], "issued",
                         "the request with conflicting lengths was acted on")

    def test_content_length_with_transfer_encoding(self):
        """Both Content-Length and Transfer-Encoding (RFC 9112 6.1): reject, or
        process by Transfer-Encoding and close the connection."""
        op = self.op
        body = b'{"operation":"%s","subject":"te"}' % op.encode()
        chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
        head = (b"POST /v1/tokens HTTP/1.1\r\nHost: t\r\n" + self.auth() +
                b"Content-Type: application/json\r\nContent-Length: %d\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n" % (len(chunked) + 40))
        rs, closed, raw = exchange(self.server.port, head + chunked, wait=2.5, all_of_it=True)
        print("\n  Content-Length with Transfer-Encoding: %s, connection closed: %s"
              % ([r[0] for r in rs], closed))
        self.assertTrue(rs, raw[:300])
        self.assertTrue(rs[0][0] == 400 or closed,
                        "answered %d and kept the connection open" % rs[0][0])

    # ------------------------------------------------------------ JSON

    def post_raw(self, path, raw, client=None):
        return (client or self.client).post(path, raw)

    def bodies_400(self, cases):
        """CASES: [(label, path-or-callable, raw body)] -> each 400 invalid_request."""
        for label, path, raw in cases:
            with self.subTest(case=label):
                p = path() if callable(path) else path
                r = self.post_raw(p, raw)
                assert_problem(self, r, 400, "invalid_request")
        self.alive()

    def claim_path(self):
        return "/v1/tokens/%s/claim" % self.issue(self.op)

    def complete_path(self):
        tok = self.issue(self.op)
        self.claim_ok(tok)
        return "/v1/tokens/%s/complete" % tok

    def test_invalid_utf8_400(self):
        op = self.op.encode()
        bad = {
            "0xff": b"\xff\xfe",
            "overlong /": b"\xc0\xaf",
            "utf-8 surrogate": b"\xed\xa0\x80",
            "truncated": b"\xe2\x82",
            "escaped lone surrogate": b"\\ud800",
            "escaped reversed pair": b"\\udc00\\ud800",
        }
        cases = []
        for name, s in bad.items():
            cases += [
                ("issue subject " + name, "/v1/tokens",
                 b'{"operation":"%s","subject":"u%s"}' % (op, s)),
                ("issue operation " + name, "/v1/tokens",
                 b'{"operation":"%s%s","subject":"u"}' % (op, s)),
                ("claim request " + name, self.claim_path, b'{"request":{"a":"%s"}}' % s),
                ("claim key " + name, self.claim_path, b'{"request":{"%s":1}}' % s),
                ("claim fingerprint " + name, self.claim_path, b'{"fingerprint":"%s"}' % s),
                ("complete body " + name, self.complete_path,
                 b'{"attempt":1,"status":200,"body":"%s"}' % s),
                ("complete header " + name, self.complete_path,
                 b'{"attempt":1,"status":200,"headers":{"X-A":"%s"}}' % s),
            ]
        self.bodies_400(cases)
        r = self.client.put("/v1/operations/ok.op", b'{"token_ttl_seconds":60,'
                            b'"retention_seconds":60,"lease_seconds":5,"version_key":"v:\xff"}')
        assert_problem(self, r, 400, "invalid_request")

    def test_nul_bytes_400(self):
        op = self.op.encode()
        cases = [
            ("raw NUL in subject", "/v1/tokens", b'{"operation":"%s","subject":"a\x00b"}' % op),
            ("escaped NUL in subject", "/v1/tokens",
             b'{"operation":"%s","subject":"a\\u0000b"}' % op),
            ("escaped NUL in operation", "/v1/tokens",
             b'{"operation":"%s\\u0000x","subject":"a"}' % op),
            ("NUL after the document", "/v1/tokens",
             b'{"operation":"%s","subject":"a"}\x00' % op),
            ("NUL before the document", "/v1/tokens",
             b'\x00{"operation":"%s","subject":"a"}' % op),
            ("escaped NUL in a key", self.claim_path, b'{"request":{"a\\u0000":1}}'),
            ("escaped NUL in fingerprint", self.claim_path, b'{"fingerprint":"f\\u0000g"}'),
            ("escaped NUL in header value", self.complete_path,
             b'{"attempt":1,"status":200,"headers":{"X-A":"a\\u0000b"}}'),
        ]
        self.bodies_400(cases)
        # inside request and body (any JSON) an escaped NUL is JSON like any
        # other character: taken, never a 5xx (test_keys checks the replay)
        for path, body in ((self.claim_path, b'{"request":{"a":"x\\u0000"}}'),
                           (self.complete_path, b'{"attempt":1,"status":200,"body":"\\u0000"}')):
            r = self.post_raw(path(), body)
            self.assertIn(r.status, (200, 201), r.describe())
        # an encoded NUL in a path parameter
        assert_problem(self, self.client.get("/v1/versions/a%00b"), 400, "invalid_request")

    def test_huge_numbers_400(self):
        op = self.op.encode()
        cases = []
        for num in (b"1e400", b"-1e400", b"99999999999999999999999", b"-99999999999999999999999",
                    b"1" + b"0" * 5000):
            n = num.decode()[:12]
            cases += [
                ("issue ttl_seconds " + n, "/v1/tokens",
                 b'{"operation":"%s","subject":"u","ttl_seconds":%s}' % (op, num)),
                ("issue count " + n, "/v1/tokens",
                 b'{"operation":"%s","subject":"u","count":%s}' % (op, num)),
                ("claim request " + n, self.claim_path, b'{"request":{"amount":%s}}' % num),
                ("complete attempt " + n, self.complete_path,
                 b'{"attempt":%s,"status":200}' % num),
                ("complete status " + n, self.complete_path,
                 b'{"attempt":1,"status":%s}' % num),
                ("complete body " + n, self.complete_path,
                 b'{"attempt":1,"status":200,"body":[%s]}' % num),
            ]
        # numbers JSON can carry but idemd's fields cannot
        for num in (b"1e308", b"9223372036854775807", b"-9223372036854775808", b"4294967297",
                    b"3600.5", b"NaN", b"Infinity", b"0x10"):
            n = num.decode()
            cases += [
                ("issue ttl_seconds " + n, "/v1/tokens",
                 b'{"operation":"%s","subject":"u","ttl_seconds":%s}' % (op, num)),
                ("complete attempt " + n, self.complete_path,
                 b'{"attempt":%s,"status":200}' % num),
            ]
        self.bodies_400(cases)
        for field in ("token_ttl_seconds", "retention_seconds", "lease_seconds"):
            for num in (b"1e400", b"99999999999999999999999", b"4294967297"):
                with self.subTest(field=field, num=num):
                    policy = dict(harness.DEFAULT_POLICY)
                    raw = ("{%s}" % ",".join('"%s":%s' % (k, num.decode() if k == field else v)
                                             for k, v in policy.items())).encode()
                    assert_problem(self, self.client.put("/v1/operations/" + uniq("n"), raw),
                                   400, "invalid_request")

    def test_deep_nesting_400(self):
        depth = 10000
        arrays = b"[" * depth + b"]" * depth
        objects = b'{"a":' * depth + b"1" + b"}" * depth
        cases = [
            ("issue document of arrays", "/v1/tokens", arrays),
            ("issue document of objects", "/v1/tokens", objects),
            ("issue subject nested", "/v1/tokens",
             b'{"operation":"%s","subject":%s}' % (self.op.encode(), arrays)),
            ("claim request arrays", self.claim_path, b'{"request":%s}' % arrays),
            ("claim request objects", self.claim_path, b'{"request":%s}' % objects),
            ("complete body arrays", self.complete_path,
             b'{"attempt":1,"status":200,"body":%s}' % arrays),
            ("complete body objects", self.complete_path,
             b'{"attempt":1,"status":200,"body":%s}' % objects),
            ("unclosed", self.claim_path, b'{"request":' + b"[" * depth),
        ]
        for label, path, raw in cases:
            with self.subTest(case=label):
                p = path() if callable(path) else path
                t0 = time.monotonic()
                r = self.post_raw(p, raw)
                self.assertLess(time.monotonic() - t0, 5, label)
                self.assertEqual(r.status, 400, r.describe())
                self.assertIn(r.json.get("code"), ("invalid_request",), r.describe())
        self.alive()

    def test_other_malformed_json_400(self):
        op = self.op.encode()
        cases = [
            ("duplicate keys", "/v1/tokens",
             b'{"operation":"%s","subject":"a","subject":"b"}' % op),
            ("array document", "/v1/tokens", b'["%s","u"]' % op),
            ("string document", "/v1/tokens", b'"hello"'),
            ("trailing comma", "/v1/tokens", b'{"operation":"%s","subject":"a",}' % op),
            ("single quotes", "/v1/tokens", b"{'operation':'x'}"),
            ("comments", "/v1/tokens", b'{"operation":"%s",/*x*/"subject":"a"}' % op),
            ("two documents", "/v1/tokens",
             b'{"operation":"%s","subject":"a"}{"x":1}' % op),
            ("BOM", "/v1/tokens", b'\xef\xbb\xbf{"operation":"%s","subject":"a"}' % op),
            ("control char in string", "/v1/tokens",
             b'{"operation":"%s","subject":"a\x01b"}' % op),
            ("subject not a string", "/v1/tokens", b'{"operation":"%s","subject":42}' % op),
            ("subject too long", "/v1/tokens",
             b'{"operation":"%s","subject":"%s"}' % (op, b"s" * 129)),
            ("huge string", "/v1/tokens",
             b'{"operation":"%s","subject":"%s"}' % (op, b"s" * 60000)),
        ]
        self.bodies_400(cases)

    # ------------------------------------------------------------ content types

    def test_wrong_content_types_415(self):
        body = {"operation": self.op, "subject": "ct"}
        for ct in ("text/plain", "application/x-www-form-urlencoded",
                   "multipart/form-data; boundary=x", "application/jsonp",
                   "application/json-patch+json", "application/problem+json",
                   "application/xml", "json", "application/", "*/*", "",
                   "application/json\tx"):
            with self.subTest(content_type=ct):
                r = self.client.post("/v1/tokens", body, content_type=ct)
                assert_problem(self, r, 415, "unsupported_media_type")
        # no Content-Type at all, with a body
        head = (b"POST /v1/tokens HTTP/1.1\r\nHost: t\r\n" + self.auth() +
                b"Content-Length: 2\r\n\r\n{}")
        rs, _, raw = exchange(self.server.port, head)
        self.assertTrue(rs, raw[:200])
        self.assertEqual(rs[0][0], 415, rs[0])
        for r in (self.client.put("/v1/operations/x.y", harness.DEFAULT_POLICY,
                                  content_type="text/plain"),
                  self.client.post(self.claim_path(), {}, content_type="text/json"),
                  self.client.post(self.complete_path(), {"attempt": 1, "status": 200},
                                   content_type="application/octet-stream")):
            assert_problem(self, r, 415, "unsupported_media_type")
        # accepted spellings
        for ct in ("application/json", "Application/JSON", "application/json; charset=utf-8"):
            with self.subTest(content_type=ct):
                assert_status(self, self.client.post("/v1/tokens", body, content_type=ct), 201)

    # ------------------------------------------------------------ paths

    def test_odd_paths_404_or_400(self):
        tok = self.issue(self.op)
        paths = [
            ("GET", "//"), ("GET", "///"), ("POST", "//v1/tokens"), ("POST", "/v1//tokens"),
            ("POST", "/v1/tokens/"), ("POST", "/v1/../v1/tokens"), ("POST", "/v1/./tokens"),
            ("POST", "/v1/%2e%2e/v1/tokens"), ("POST", "/v1/%2E%2E/v1/tokens"),
            ("POST", "/%2e%2e/v1/tokens"), ("GET", "/v1/tokens/%2e%2e"),
            ("GET", "/v1/tokens/.."), ("GET", "/v1/tokens/%2e%2e%2f%2e%2e%2fhealthz"),
            ("GET", "/v1/tokens/..%2F..%2Fhealthz"), ("GET", "/v1/tokens/%2F"),
            ("GET", "/healthz/../v1/operations"), ("GET", "/v1/operations/%2e%2e"),
            ("GET", "/v1/tokens/%zz"),
            ("GET", "/v1/tokens/%"), ("GET", "/v1/tokens/%0"), ("GET", "/V1/OPERATIONS"),
            ("GET", "/v1/operations;x"), ("GET", "/v1/tokens/" + tok + "/"),
            ("POST", "/v1/tokens/" + tok + "/claim/"), ("POST", "/v1/tokens/" + tok + "//claim"),
            ("POST", "/v1/tokens/" + tok + "/%63laim"), ("GET", "/v1/tokens/" + tok + "%00"),
            ("GET", "/v1/tokens/" + tok + "%2f"), ("GET", "/%00"), ("GET", "/\\v1\\operations"),
            ("GET", "/v1/operations/" + "a" * 5000), ("GET", "/v1/tokens/" + "A" * 8000),
            ("GET", "/" + "x/" * 3000), ("GET", "http://evil.example/v1/operations"),
        ]
        for method, path in paths:
            with self.subTest(method=method, path=path[:60]):
                r = self.client.request(method, path, {} if method == "POST" else None)
                self.assertIn(r.status, (400, 404, 405), r.describe())
                self.assertEqual((r.header("content-type") or "").split(";")[0],
                                 "application/problem+json", r.describe())
                self.assertIn(r.json.get("code"),
                              ("not_found", "token_malformed", "invalid_request",
                               "method_not_allowed"), r.describe())
        # nothing claimed the token
        self.assertEqual(assert_status(self, self.introspect(tok), 200)["state"], "issued")
        # a version key is an opaque name: dots and slashes are just characters
        j = assert_status(self, self.client.get("/v1/versions/%2e%2e%2fx"), 200)
        self.assertEqual(j["key"], "../x")
        # a path too long for the request line: libmicrohttpd's 414
        rs, _, raw = exchange(self.server.port, b"GET /" + b"a" * 100000 +
                              b" HTTP/1.1\r\nHost: t\r\n\r\n")
        self.assertTrue(rs and 400 <= rs[0][0] < 500, raw[:200])
        self.note_mhd("path of 100000 bytes", *rs[0])
        # raw request lines a client library would not send
        for line in (b"GET /v1/../../etc/passwd HTTP/1.1", b"GET * HTTP/1.1",
                     b"OPTIONS * HTTP/1.1", b"GET v1/operations HTTP/1.1",
                     b"GET /v1/tokens/a\x00b HTTP/1.1", b"GET /v1/operations\x7f HTTP/1.1",
                     b"GET /v1/tokens/\xff\xfe HTTP/1.1"):
            with self.subTest(line=line[:40]):
                rs, _, raw = exchange(self.server.port, line + b"\r\nHost: t\r\n" +
                                      self.auth() + b"\r\n")
                self.assertTrue(rs, "no answer to %r: %r" % (line, raw[:200]))
                self.assertTrue(400 <= rs[0][0] < 500, (line, rs[0]))
        self.alive()

    # ------------------------------------------------------------ scope

    def test_other_tenants_token_403(self):
        tok = self.issue(self.op)
        gtok = self.issue(self.op, client=self.other)
        for what, r in (
                ("introspect", self.introspect(tok, client=self.other)),
                ("claim", self.claim(tok, client=self.other)),
                ("revoke", self.revoke(tok, client=self.other)),
                ("complete", self.complete(tok, 1, 200, body={}, client=self.other)),
                ("release", self.release(tok, 1, client=self.other)),
                ("claim the other way", self.claim(gtok))):
            with self.subTest(what=what):
                assert_problem(self, r, 403, "token_scope_mismatch")
        self.assertEqual(assert_status(self, self.introspect(tok), 200)["state"], "issued")
        self.assertEqual(assert_status(self, self.introspect(gtok, client=self.other),
                                       200)["state"], "issued")
        # counters and policies are per tenant too
        key = uniq("orders") + ":u1"
        assert_status(self, self.client.post("/v1/versions/" + key,
                                             headers={"If-Match": '"0"'}), 200)
        self.assertEqual(self.version(key), 1)
        self.assertEqual(self.version(key, client=self.other), 0)
        assert_problem(self, self.other.get("/v1/operations/payment.capture"), 404, "not_found")
        r = self.issue_resp("payment.capture", client=self.other)
        assert_problem(self, r, 422, "operation_unknown")

    # ------------------------------------------------------------ gateway route

    def gw(self, headers, body=b'{"sku":1}'):
        c = Client(self.server.port, timeout=10)
        return c.request("POST", "/orders", body, headers=headers, api_key=None)

    def test_gateway_hostile_keys(self):
        n0 = len(self.up.requests)
        tok = self.issue(self.op)
        tok2 = self.issue(self.op)
        # two Idempotency-Key headers: raw, as a client library would merge them
        for pair in ((tok, tok), (tok, tok2), (tok, "x")):
            with self.subTest(pair=[p[:8] for p in pair]):
                head = (b"POST /orders HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                        b"Idempotency-Key: %s\r\nidempotency-key: %s\r\nContent-Length: 2\r\n"
                        b"\r\n{}" % (pair[0].encode(), pair[1].encode()))
                rs, _, raw = exchange(self.server.port, head)
                self.assertTrue(rs, raw[:200])
                status, hdrs, body = rs[0]
                self.assertEqual(status, 400, rs[0])
                self.assertEqual(hdrs.get("content-type"), "application/problem+json")
                self.assertIn(b'"code":"invalid_request"', body)
        # one header holding two tokens, an empty one, a malformed one
        for value, code in (("%s, %s" % (tok, tok2), "token_malformed"),
                            ('"%s"' % tok + ", x", "token_malformed"),
                            ("", None), ("   ", None), ("\"\"", "token_malformed"),
                            ("A" * 5000, "token_malformed")):
            with self.subTest(value=value[:20]):
                r = self.gw({"Idempotency-Key": value})
                self.assertEqual(r.status, 400, r.describe())
                if code:
                    self.assertEqual(r.json.get("code"), code, r.describe())
                else:
                    self.assertIn(r.json.get("code"),
                                  ("idempotency_key_missing", "token_malformed"), r.describe())
        assert_problem(self, self.gw({}), 400, "idempotency_key_missing")
        # a token for another operation and for another tenant
        other_op = self.issue("payment.capture")
        assert_problem(self, self.gw({"Idempotency-Key": other_op}), 403, "token_scope_mismatch")
        other_tenant = self.issue(self.op, client=self.other)
        assert_problem(self, self.gw({"Idempotency-Key": other_tenant}), 403,
                       "token_scope_mismatch")
        # a tampered token
        bad = harness.tamper(tok, len(tok) - 5)
        assert_problem(self, self.gw({"Idempotency-Key": bad}), 403, "token_invalid")
        self.assertEqual(len(self.up.requests), n0, "a refused submit reached the upstream")
        for t in (tok, tok2, other_op):
            self.assertEqual(assert_status(self, self.introspect(t), 200)["state"], "issued")
        # and the good token still works once
        r = self.gw({"Idempotency-Key": tok})
        self.assertEqual(r.status, 201, r.describe())
        self.alive()


class SlowClients(IdemdCase):
    """connection_timeout_seconds = 2, max_connections = 4: slow clients
    hold every slot, are cut after the timeout, and the slots serve again."""
    extra_config = {"threads": 2, "pool_size": 2, "max_connections": MAX_CONN,
                    "connection_timeout_seconds": TIMEOUT}

    def test_slow_clients_are_cut_and_slots_freed(self):
        op = self.put_operation()
        time.sleep(0.3)     # the readiness probe's connection is gone
        halves = [
            b"POST /v1/tokens HTTP/1.1\r\nHost: t\r\nContent-Type: appl",      # half a header
            b"POST /v1/tokens HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n"
            b"Content-Type: application/json\r\n\r\n{\"operation\":",        # half a body
            b"GET /healthz HTTP/1.1\r\nHost: t\r\n",                          # no blank line
            b"G",                                                              # one byte
        ]
        socks = []
        t0 = time.monotonic()
        for h in halves[:MAX_CONN]:
            s = socket.create_connection(("127.0.0.1", self.server.port), timeout=5)
            s.sendall(h)
            socks.append(s)
        time.sleep(0.2)

        # every slot is held: a new request waits for one (or is refused)
        out = {}

        def probe():
            t = time.monotonic()
            try:
                r = Client(self.server.port, timeout=10).get("/healthz")
                out["r"] = (r.status, time.monotonic() - t)
            except OSError as e:
                out["r"] = (type(e).__name__, time.monotonic() - t)
        th = threading.Thread(target=probe, daemon=True)
        th.start()

        closed_at = []
        for s in socks:
            data, _, closed = faultkit.recv_until_closed(s, TIMEOUT + 4)
            closed_at.append(time.monotonic() - t0 if closed else None)
            s.close()
        th.join(10)
        print("\n  %d slow connections closed by the server after %s s (timeout %d s); a "
              "request made while all %d slots were held: %s"
              % (len(socks), ["%.2f" % c if c else "never" for c in closed_at], TIMEOUT,
                 MAX_CONN, "%s after %.2fs" % out.get("r", ("none", 0))))
        for c in closed_at:
            self.assertIsNotNone(c, "a slow connection was never closed")
            self.assertGreaterEqual(c, TIMEOUT - 0.5)
            self.assertLess(c, TIMEOUT + 3)
        self.assertIn("r", out, "the request made while the slots were held hung")
        self.assertTrue(out["r"][0] == 200 or isinstance(out["r"][0], str), out)

        # the slots serve again: MAX_CONN concurrent requests, promptly
        results, elapsed = faultkit.storm(MAX_CONN, lambda i: self.client.post(
            "/v1/tokens", {"operation": op, "subject": "s%d" % i}))
        fig = faultkit.status_figures(results)
        print("  afterwards: %d concurrent issues -> %s in %.2fs" % (MAX_CONN, fig, elapsed))
        self.assertEqual(fig, {"201": MAX_CONN})
        self.assertLess(elapsed, TIMEOUT)

        # a client trickling a header byte every TIMEOUT/2 seconds: the timeout
        # is an inactivity timeout (libmicrohttpd's), so it holds its slot
        # while it trickles and loses it TIMEOUT seconds after it stops
        s = socket.create_connection(("127.0.0.1", self.server.port), timeout=5)
        t1 = time.monotonic()
        cut_while = None
        try:
            for b in b"GET /healthz HTTP/1.1\r\nX-Slow: aaaaaaaa":
                s.sendall(bytes([b]))
                if b == ord("a"):
                    time.sleep(TIMEOUT / 2.0)
        except (BrokenPipeError, ConnectionResetError):
            cut_while = time.monotonic() - t1
        t_last = time.monotonic()
        data, _, closed = faultkit.recv_until_closed(s, TIMEOUT + 3)
        s.close()
        idle_cut = time.monotonic() - t_last if closed else None
        print("  a client trickling a header byte every %.1f s: %s; closed %s after its "
              "last byte" % (TIMEOUT / 2.0, "cut after %.2fs" % cut_while if cut_while else
                             "kept its slot for %.1fs" % (t_last - t1),
                             "%.2fs" % idle_cut if idle_cut else "never"))
        self.assertIsNotNone(idle_cut if cut_while is None else cut_while)
        if idle_cut is not None:
            self.assertLess(idle_cut, TIMEOUT + 2)
        assert_status(self, self.anon.get("/healthz"), 200)


if __name__ == "__main__":
    harness.main()
