"""Integration tests: the hardening rules of docs/security.md, with
raw sockets on the client side and a raw-socket upstream (rawupstream.py)
that keeps the exact bytes of every upstream connection and parses them
strictly.

Each test is named after the rule it checks:
  rule01 header names that are not tokens (space before the colon, a space
         inside, obs-fold) -> 400 invalid_request, never forwarded
  rule02 control characters in header values (bare CR, 0x01, 0x7f, NUL)
         -> 400; ordinary headers still pass
  rule03 `_` spellings of idemd's own or stripped headers on gateway routes
  rule04 smuggling by framing (Content-Length twice, with a space, with
         Transfer-Encoding; a request inside a body)
  rule05 routing and authentication on the headers, before the body
  rule06 memory without credentials; max_inflight_body_bytes
  rule07 request_timeout_seconds, for trickled bodies and headers
  rule08 max_connections_per_ip
  rule09 a route ignores the client's If-Match unless client_if_match
  rule10 stored headers never include framing, hop-by-hop, CORS or cookies
  rule11 a second, different complete of one attempt is 409
  rule12 X-Forwarded-For, Forwarded & co, Idempotency-Key/-Subject upstream
  rule13 an upstream answer that looks wrong is 502 upstream_invalid
  rule14 Idempotent-Replayed on a passed-through 5xx, Retry-After on 502/504

After every attack on a gateway route the upstream is checked: every
connection's bytes parse as whole HTTP/1.1 requests with nothing left over,
the number of requests it parsed is the number of submits idemd forwarded,
and a legitimate request from another user (with a session cookie) arrives
intact and gets its own answer.
"""

import json
import os
import selectors
import socket
import subprocess
import sys
import tempfile
import shutil
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (BIN, Client, Idemd, IdemdCase, assert_problem, assert_retry_after,  # noqa: E402
                     assert_status, free_port, rss_kib, uniq)
import rawupstream  # noqa: E402
from rawupstream import response  # noqa: E402

ORIGIN = "http://shop.example"
MIB = 1024 * 1024


from rawclient import exchange, parse_responses  # noqa: E402


def assert_raw_problem(tc, r, status, code, what=""):
    tc.assertEqual(r.status, status, "%s: %r" % (what, r))
    ct = (r.header("content-type") or "").split(";")[0].strip().lower()
    tc.assertEqual(ct, "application/problem+json", "%s: %r" % (what, r))
    j = r.json
    tc.assertIsInstance(j, dict, "%s: %r" % (what, r))
    tc.assertEqual(j.get("code"), code, "%s: %r" % (what, r))
    tc.assertEqual(j.get("status"), status, "%s: %r" % (what, r))


# ---------------------------------------------------------------- gateway

class GatewayHardening(IdemdCase):
    """One idemd with gateway routes to one raw upstream."""

    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(rawupstream.RawUpstream())
        cls.dead_port = free_port()
        u = cls.up.url
        cls.vk_prefix = uniq("vk")

        def route(method, path, upstream, **kw):
            r = {"method": method, "path": path, "tenant": "acme",
                 "operation": "order.create", "upstream": upstream}
            r.update(kw)
            return r
        cls.extra_config = {
            "threads": 4, "pool_size": 6, "max_body_bytes": 2 * MIB,
            "cors_origins": [ORIGIN],
            "routes": [
                route("POST", "/orders", u + "/orders", timeout_ms=5000,
                      store_headers=["location", "x-foo", "x-order"]),
                route("POST", "/orders/trusted", u + "/trusted", timeout_ms=5000,
                      trust_forwarded=True),
                route("POST", "/orders/quick", u + "/quick", timeout_ms=500),
                route("POST", "/orders/dead", "http://127.0.0.1:%d/dead" % cls.dead_port,
                      connect_timeout_ms=500),
                route("POST", "/v/orders", u + "/v", operation="order.versioned"),
                route("POST", "/v/orders-im", u + "/v-im", operation="order.versioned",
                      client_if_match=True),
            ],
        }
        super().setUpClass()
        cls.define_operation("order.create")
        cls.define_operation("order.versioned", version_key=cls.vk_prefix + ":{subject}")
        cls.up.modes.update({
            "s503": lambda q: response(503, '{"error":"down"}',
                                       [("Content-Type", "application/json")]),
            "hang": lambda q: None,
            "badname": lambda q: (b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                                  b"X-Order : 1\r\nContent-Length: 2\r\n\r\n{}"),
            "barecr": lambda q: (b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                                 b"X-Order: 1\rSet-Cookie: sid=evil\r\n"
                                 b"Content-Length: 2\r\n\r\n{}"),
            "excess": lambda q: (b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                                 b"Content-Length: 2\r\n\r\n{}"
                                 b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
            "trailers": lambda q: (b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                                   b"Transfer-Encoding: chunked\r\nTrailer: Location, X-Order\r\n"
                                   b"\r\nc\r\n{\"order\":88}\r\n0\r\n"
                                   b"Location: /from-trailer\r\nX-Order: 9\r\n\r\n"),
            "cookies": lambda q: response(201, '{"order":77}', [
                ("Content-Type", "application/json"),
                ("Set-Cookie", "sid=one; Path=/"),
                ("Set-Cookie", "tracker=two; Path=/"),
                ("Access-Control-Allow-Origin", "https://evil.example"),
                ("Connection", "X-Foo"),
                ("X-Foo", "bar"),
                ("Location", "/orders/77")]),
        })

    # ---- helpers

    def token(self, op="order.create", subject=None):
        r = self.issue_resp(op, subject)
        j = assert_status(self, r, 201)
        return j["token"], j["id"], j["subject"]

    def head(self, tok, path="/orders", extra=b"", body=b"item=42", cl=None,
             ctype=b"application/x-www-form-urlencoded"):
        """A raw gateway request: EXTRA (header lines with their CRLF) goes
        between the Idempotency-Key and the Content-Length."""
        h = b"POST " + path.encode() + b" HTTP/1.1\r\nHost: idemd.test\r\n"
        if tok is not None:
            h += b"Idempotency-Key: " + tok.encode() + b"\r\n"
        if ctype:
            h += b"Content-Type: " + ctype + b"\r\n"
        h += extra
        if cl is not False:
            h += b"Content-Length: %d\r\n" % (len(body) if cl is None else cl)
        return h + b"\r\n" + body

    def state(self, tok):
        return assert_status(self, self.introspect(tok), 200)["state"]

    def submit(self, tok, path="/orders", body=b"item=42", headers=None, timeout=15.0):
        h = dict(headers or {})
        if tok is not None:
            h["Idempotency-Key"] = tok
        return Client(self.server.port, timeout=timeout).request(
            "POST", path, body, headers=h, api_key=None,
            content_type="application/x-www-form-urlencoded")

    def legit_followup(self):
        """Another user's ordinary submit with a session cookie: it must
        arrive as exactly one intact request and get its own answer."""
        tok, tid, subj = self.token(subject=uniq("bob"))
        cookie = "session=" + uniq("s")
        body = ("item=legit&user=%s" % subj).encode()
        data = self.head(tok, extra=b"Cookie: " + cookie.encode() + b"\r\n", body=body)
        rs, _, raw, _ = exchange(self.server.port, data, wait=10)
        self.assertTrue(rs, "no answer to a legitimate submit: %r" % raw[:300])
        r = rs[0]
        self.assertEqual(r.status, 201, r)
        self.assertEqual(r.header("idempotent-replayed"), "false", r)
        j = r.json
        self.assertIsInstance(j, dict, r)
        self.assertEqual((j.get("key"), j.get("subject"), j.get("cookie"), j.get("body")),
                         (tid, subj, cookie, body.decode()),
                         "the legitimate submit got another request's answer: %r" % r)
        got = self.up.requests(tid)
        self.assertEqual(len(got), 1, got)
        q = got[0]
        self.assertEqual(q.values("cookie"), [cookie])
        self.assertEqual(q.values("idempotency-subject"), [subj])
        self.assertEqual(q.body, body)
        self.assertEqual(q.values("content-length"), [str(len(body))])

    def assert_upstream_clean(self, mark, forwarded, what=""):
        """Since MARK the upstream parsed exactly FORWARDED requests, every
        connection parses strictly with nothing left over, and a legitimate
        request after that goes through intact."""
        deadline = time.monotonic() + 1.0
        while self.up.leftovers(mark) and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertEqual(self.up.errors(mark), [],
                         "%s: an upstream connection did not parse as HTTP/1.1" % what)
        self.assertEqual(self.up.leftovers(mark), {},
                         "%s: bytes on an upstream connection that make no whole request"
                         % what)
        got = self.up.since(mark)
        self.assertEqual(len(got), forwarded,
                         "%s: the upstream parsed %d request(s), idemd forwarded %d: %r"
                         % (what, len(got), forwarded, got))
        m2 = self.up.mark()
        self.legit_followup()
        self.assertEqual(len(self.up.since(m2)), 1, "%s: follow-up" % what)
        self.assertEqual(self.up.errors(m2), [], what)

    def refused_400(self, data, what, closed_too=False):
        rs, closed, raw, _ = exchange(self.server.port, data, wait=3.0, all_of_it=closed_too)
        self.assertTrue(rs, "%s: no answer (%r)" % (what, raw[:300]))
        assert_raw_problem(self, rs[0], 400, "invalid_request", what)
        if closed_too:
            self.assertEqual(len(rs), 1, "%s: one request was answered as %d: %r"
                             % (what, len(rs), rs))
            self.assertTrue(closed, "%s: the client connection was left open" % what)
        return rs[0]

    def api_request(self, line):
        """A raw API request (GET /v1/operations) with LINE (a header line
        with its line end) as its last header line."""
        return (b"GET /v1/operations HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " +
                self.api_key.encode() + b"\r\n" + line + b"\r\n")

    def refused_on_both_routes(self, what, line, **api_subtest):
        """LINE in a gateway request and in an API request: each is 400, and
        the gateway one is neither forwarded nor claims its token."""
        with self.subTest(case=what, route="gateway"):
            tok, tid, _ = self.token()
            self.refused_400(self.head(tok, extra=line), what)
            self.assertEqual(self.up.requests(tid), [], "%s was forwarded" % what)
            self.assertEqual(self.state(tok), "issued", "%s was claimed" % what)
        with self.subTest(case=what, route="api", **api_subtest):
            self.refused_400(self.api_request(line), what)

    def answered_200(self, data, what):
        """DATA, a raw request, gets a 200."""
        with self.subTest(case=what):
            rs, _, raw, _ = exchange(self.server.port, data, wait=3.0)
            self.assertTrue(rs, "%s: no answer (%r)" % (what, raw[:300]))
            self.assertEqual(rs[0].status, 200, "%s: %r" % (what, rs[0]))

    # ---- rule 1

    def test_rule01_header_name_not_a_token_400_not_forwarded(self):
        mark = self.up.mark()
        cases = [
            ("space before the colon", b"X-Note : x\r\n"),
            ("space inside the name", b"X Note: y\r\n"),
            ("obs-fold", b"X-Note: a\r\n Idempotency-Subject: alice\r\n"),
            ("obs-fold with a tab", b"X-Note: a\r\n\tIdempotency-Subject: alice\r\n"),
            # a fold with neither space nor colon: libmicrohttpd 0.9.75
            # joins it onto the name, a valid token (X-Notefolded: a)
            ("obs-fold of one word", b"X-Note: a\r\n folded\r\n"),
            ("obs-fold of one word, tab", b"X-Note: a\r\n\tfolded\r\n"),
            ("obs-fold, two lines", b"X-Note: a\r\n b\r\n c\r\n"),
            ("obs-fold, bare LF", b"X-Note: a\n folded\n"),
        ]
        for what, line in cases:
            self.refused_on_both_routes(what, line)
        self.assert_upstream_clean(mark, 0, "rule 1")

    # ---- rule 2

    def test_rule02_control_character_in_value_400_not_forwarded(self):
        mark = self.up.mark()
        cases = [
            ("bare CR", b"X-Note: x\rIdempotency-Subject: mallory-cr\rIdempotency-Key: " +
             b"0" * 32 + b"\r\n"),
            ("0x01", b"X-Note: a\x01b\r\n"),
            ("0x7f", b"X-Note: a\x7fb\r\n"),
        ]
        for what, line in cases:
            self.refused_on_both_routes(what, line)
        self.assertNotIn(b"mallory-cr", self.up.all_bytes())
        self.assert_upstream_clean(mark, 0, "rule 2")

    def test_rule02_nul_in_value_400_not_forwarded(self):
        # libmicrohttpd 0.9.75 cuts a value at a NUL and drops the rest of
        # the line; idemd refuses the request instead
        mark = self.up.mark()
        marker = b"SmuggledAfterNul"
        cases = [
            ("NUL then a header", b"X-Note: ok\x00" + marker + b": evil\x00Idempotency-Subject: " +
             marker + b"\r\n"),
            ("NUL inside", b"X-Note: a\x00b\r\n"),
            ("NUL at the end", b"X-Note: a\x00\r\n"),
            ("NUL first", b"X-Note: \x00b\r\n"),
            ("NUL and CR LF", b"X-Note: a\x00\r\nX-Other: b\r\n"),
        ]
        # (a NUL before the colon leaves a line without one: libmicrohttpd
        # answers its own 400 page, docs/reliability.md)
        for what, line in cases:
            # on the API route LINE is the last header line, right before
            # the empty line
            self.refused_on_both_routes(what, line, last=True)
        self.assertNotIn(marker.lower(), self.up.all_bytes().lower(),
                         "bytes after a NUL reached the upstream")
        self.assert_upstream_clean(mark, 0, "rule 2 NUL")

    def test_rule02_plain_headers_still_pass(self):
        # the raw check reads libmicrohttpd's in-place header section:
        # ordinary spellings of line ends and blanks must all pass
        cases = [
            ("no blank after the colon", b"X-Note:a\r\n"),
            ("blanks and tabs after the colon", b"X-Note: \t  a b\t\r\n"),
            ("empty value", b"X-Note:\r\n"),
            ("empty value with blanks", b"X-Note:   \r\n"),
            ("trailing blank", b"X-Note: a \r\n"),
            ("obs-text", b"X-Note: caf\xc3\xa9\r\n"),
            ("many headers", b"".join(b"X-N%d: v%d\r\n" % (i, i) for i in range(40))),
            ("a cookie", b"Cookie: a=1; b=2\r\n"),
        ]
        for what, line in cases:
            self.answered_200(self.api_request(line), what)
        # bare LF line ends throughout, and no header at all (HTTP/1.0)
        for what, data in [
                ("bare LF", b"GET /v1/operations HTTP/1.1\nHost: t\nAuthorization: Bearer " +
                 self.api_key.encode() + b"\nX-Note: a\n\n"),
                ("no header", b"GET /healthz HTTP/1.0\r\n\r\n")]:
            self.answered_200(data, what)

    # ---- rule 3

    def test_rule03_underscore_spelling_of_own_headers_400(self):
        mark = self.up.mark()
        names = ["Idempotency_Key", "Idempotency_Subject", "idempotency_subject",
                 "X_Request_Id", "X_Forwarded_For", "X-Forwarded_For", "X_Forwarded_Host",
                 "X_Forwarded_Proto", "X_Real_IP", "x_real_ip", "Content_Length",
                 "Transfer_Encoding"]
        for name in names:
            with self.subTest(header=name):
                tok, tid, _ = self.token()
                value = b"alice" if "ength" not in name else b"0"
                if name.lower() == "transfer_encoding":
                    value = b"chunked"
                self.refused_400(self.head(tok, extra=name.encode() + b": " + value + b"\r\n"),
                                 name)
                self.assertEqual(self.up.requests(tid), [], "%s: forwarded" % name)
                self.assertEqual(self.state(tok), "issued", "%s: claimed" % name)
        self.assert_upstream_clean(mark, 0, "rule 3")

    # ---- rule 4

    def smuggled(self, tok):
        return (b"POST /orders HTTP/1.1\r\nHost: idemd.test\r\nIdempotency-Key: " +
                tok.encode() + b"\r\nContent-Length: 0\r\n\r\n")

    def test_rule04_content_length_with_space_and_second_length(self):
        mark = self.up.mark()
        tok, tid, _ = self.token()
        tok2, tid2, _ = self.token()
        body = b"a=1" + self.smuggled(tok2)
        for first, second, payload in ((3, 5, b"a=1&b"), (3, len(body), body),
                                       (len(body), 3, body)):
            with self.subTest(lengths=(first, second)):
                data = self.head(tok, extra=b"Content-Length : %d\r\nContent-Length: %d\r\n"
                                 % (first, second), body=payload, cl=False)
                self.refused_400(data, "Content-Length : %d + Content-Length: %d"
                                 % (first, second), closed_too=True)
        self.assertEqual(self.up.requests(tid) + self.up.requests(tid2), [])
        self.assertEqual((self.state(tok), self.state(tok2)), ("issued", "issued"))
        self.assert_upstream_clean(mark, 0, "rule 4 CL with space")

    def test_rule04_two_content_lengths(self):
        mark = self.up.mark()
        tok, tid, _ = self.token()
        tok2, tid2, _ = self.token()
        body = b"a=1" + self.smuggled(tok2)
        for first in (3, len(body)):
            with self.subTest(first=first):
                other = len(body) if first == 3 else 3
                data = self.head(tok, extra=b"Content-Length: %d\r\nContent-Length: %d\r\n"
                                 % (first, other), body=body, cl=False)
                self.refused_400(data, "two Content-Length", closed_too=True)
        self.assertEqual(self.up.requests(tid) + self.up.requests(tid2), [])
        self.assertEqual((self.state(tok), self.state(tok2)), ("issued", "issued"))
        self.assert_upstream_clean(mark, 0, "rule 4 two CL")

    def test_rule04_content_length_with_transfer_encoding(self):
        mark = self.up.mark()
        tok, tid, _ = self.token()
        tok2, tid2, _ = self.token()
        chunked = b"3\r\na=1\r\n0\r\n\r\n"
        body = chunked + self.smuggled(tok2)
        for te in (b"chunked", b" chunked", b"identity, chunked"):
            with self.subTest(te=te):
                data = self.head(tok, extra=b"Transfer-Encoding: " + te + b"\r\n", body=body)
                self.refused_400(data, "Content-Length + Transfer-Encoding: %r" % te,
                                 closed_too=True)
        self.assertEqual(self.up.requests(tid) + self.up.requests(tid2), [])
        self.assertEqual((self.state(tok), self.state(tok2)), ("issued", "issued"))
        self.assert_upstream_clean(mark, 0, "rule 4 CL+TE")

    def test_rule04_request_inside_body_is_only_body(self):
        mark = self.up.mark()
        tok, tid, _ = self.token()
        tok2, tid2, _ = self.token()
        body = b"a=1\r\n\r\n" + self.smuggled(tok2) + b"GET /admin HTTP/1.1\r\nHost: x\r\n\r\n"
        rs, _, raw, _ = exchange(self.server.port, self.head(tok, body=body), wait=10)
        self.assertTrue(rs, raw[:300])
        self.assertEqual(rs[0].status, 201, rs[0])
        got = self.up.requests(tid)
        self.assertEqual(len(got), 1, got)
        self.assertEqual(got[0].body, body)
        self.assertEqual(got[0].values("content-length"), [str(len(body))])
        self.assertEqual(self.up.requests(tid2), [])
        self.assertEqual([q.target for q in self.up.since(mark)], ["/orders"])
        self.assertEqual(self.state(tok2), "issued")
        self.assert_upstream_clean(mark, 1, "rule 4 request in body")

    # ---- rule 5

    def test_rule05_answered_on_headers_before_body(self):
        auth = b"Authorization: Bearer " + self.api_key.encode() + b"\r\n"
        cases = [
            ("unknown path", b"POST /nowhere/at/all HTTP/1.1\r\nHost: t\r\n" + auth,
             404, None),
            ("wrong method on an API path", b"PUT /v1/tokens HTTP/1.1\r\nHost: t\r\n" + auth,
             405, None),
            ("missing API key", b"POST /v1/tokens HTTP/1.1\r\nHost: t\r\n", 401, "unauthorized"),
            ("missing gateway key", b"POST /orders HTTP/1.1\r\nHost: t\r\n", 400,
             "idempotency_key_missing"),
        ]
        mark = self.up.mark()
        for what, start, status, code in cases:
            with self.subTest(case=what):
                data = (start + b"Content-Type: application/json\r\n"
                        b"Content-Length: 1048576\r\n\r\n")
                rs, _, raw, first = exchange(self.server.port, data, wait=3.0)
                self.assertTrue(rs, "%s: no answer within 3 s without the body: %r"
                                % (what, raw[:300]))
                self.assertEqual(rs[0].status, status, "%s: %r" % (what, rs[0]))
                if code:
                    assert_raw_problem(self, rs[0], status, code, what)
                self.assertLess(first, 1.0, "%s: answered after %.2f s" % (what, first))
        self.assertEqual(self.up.since(mark), [])

    # ---- rule 9

    def test_rule09_stale_tab_client_if_match_ignored(self):
        subj = uniq("u")
        key = "%s:%s" % (self.vk_prefix, subj)
        bump = lambda im: self.client.post("/v1/versions/" + key,  # noqa: E731
                                           headers={"If-Match": im})
        assert_status(self, bump('"0"'), 200)
        r = self.issue_resp("order.versioned", subj)
        j = assert_status(self, r, 201)
        self.assertEqual(j.get("version"), 1, r.describe())
        tok, tid = j["token"], j["id"]
        assert_status(self, bump('"1"'), 200)
        mark = self.up.mark()

        r = self.submit(tok, path="/v/orders")
        assert_problem(self, r, 412, "version_mismatch")
        self.assertEqual(r.header("etag"), '"2"', r.describe())
        r = self.submit(tok, path="/v/orders", headers={"If-Match": '"2"'})
        assert_problem(self, r, 412, "version_mismatch")
        self.assertEqual(r.header("etag"), '"2"', r.describe())
        self.assertEqual(self.up.requests(tid), [], "a stale tab got through with If-Match")
        self.assertEqual(self.version(key), 2)

        r = self.submit(tok, path="/v/orders-im", headers={"If-Match": '"2"'})
        self.assertEqual(r.status, 201, r.describe())
        self.assertEqual(r.header("idempotent-replayed"), "false", r.describe())
        self.assertEqual(r.json.get("key"), tid, r.describe())
        self.assertEqual(len(self.up.requests(tid)), 1)
        self.assertEqual(self.version(key), 3)
        self.assertEqual(len(self.up.since(mark)), 1)

    # ---- rule 10

    def test_rule10_complete_refuses_framing_and_cookie_headers(self):
        tok = self.issue("order.create")
        self.claim_ok(tok)
        bad = [("Transfer-Encoding", "chunked"), ("Connection", "close"),
               ("Keep-Alive", "timeout=5"), ("Content-Length", "5"),
               ("Access-Control-Allow-Origin", "*"), ("Set-Cookie", "sid=evil"),
               ("set-cookie", "sid=evil"), ("content-length", "5"),
               ("access-control-allow-origin", "https://evil.example")]
        for name, value in bad:
            with self.subTest(header=name):
                r = self.complete(tok, 1, 201, {"Location": "/x/1", name: value}, {"x": 1})
                assert_problem(self, r, 400, "invalid_request")
                self.assertEqual(self.state(tok), "in_progress", "%s: stored" % name)
        r = self.complete(tok, 1, 201, {"Location": "/x/1"}, {"x": 1})
        assert_status(self, r, 200)
        r = self.claim(tok)
        j = assert_status(self, r, 200)
        self.assertEqual(j["response"]["status"], 201, r.describe())
        self.assertEqual({k.lower(): v for k, v in j["response"]["headers"].items()},
                         {"location": "/x/1"}, r.describe())

    def test_rule10_upstream_cookies_cors_and_connection_headers_not_stored(self):
        tok, tid, _ = self.token()
        mark = self.up.mark()
        answers = []
        for n in range(2):
            r = self.submit(tok, headers={"X-Raw-Mode": "cookies", "Origin": ORIGIN})
            answers.append(r)
            self.assertEqual(r.status, 201, r.describe())
            self.assertEqual(r.header("idempotent-replayed"), ("false", "true")[n],
                             r.describe())
            self.assertEqual(r.header("location"), "/orders/77", r.describe())
            self.assertIsNone(r.header("set-cookie"), r.describe())
            self.assertIsNone(r.header("x-foo"), r.describe())
            self.assertEqual(r.header("access-control-allow-origin"), ORIGIN, r.describe())
        r = self.submit(tok)
        self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
        for h in ("set-cookie", "x-foo", "access-control-allow-origin"):
            self.assertIsNone(r.header(h), "%s replayed without an Origin%s"
                              % (h, r.describe()))
        j = assert_status(self, self.introspect(tok), 200)
        stored = {k.lower() for k in (j.get("response") or {}).get("headers", {})}
        for h in ("set-cookie", "x-foo", "access-control-allow-origin", "connection"):
            self.assertNotIn(h, stored, j)
        self.assertEqual(len(self.up.requests(tid)), 1)
        self.assertEqual(len(self.up.since(mark)), 1)

    def test_upstream_trailers_are_never_promoted_to_headers(self):
        """Issue 38: libcurl's header callback receives trailer fields
        too; `Location: /from-trailer` was stored and replayed as a header
        of the answer. Trailers are dropped."""
        tok, tid, _ = self.token()
        for n in range(2):
            r = self.submit(tok, headers={"X-Raw-Mode": "trailers"})
            self.assertEqual(r.status, 201, r.describe())
            self.assertEqual(r.header("idempotent-replayed"), ("false", "true")[n])
            self.assertEqual(r.json, {"order": 88}, r.describe())
            self.assertIsNone(r.header("location"), "a trailer became a header" + r.describe())
            self.assertIsNone(r.header("x-order"), "a trailer became a header" + r.describe())
        j = assert_status(self, self.introspect(tok), 200)
        stored = {k.lower() for k in (j.get("response") or {}).get("headers", {})}
        self.assertFalse(stored & {"location", "x-order"}, j)
        self.assertEqual(len(self.up.requests(tid)), 1)

    def test_rule10_check_config_refuses_never_stored_headers(self):
        tmp = tempfile.mkdtemp(prefix="idemd-it-hard-")
        names = ("set-cookie", "content-length", "transfer-encoding", "connection",
                 "access-control-allow-origin")
        outputs = {}
        try:
            path = os.path.join(tmp, "idemd.json")
            for name in names:
                cfg = {"listen": "127.0.0.1:18080", "database_url": "host=/tmp dbname=x",
                       "master_key_file": os.path.join(tmp, "k"),
                       "routes": [{"method": "POST", "path": "/orders", "tenant": "acme",
                                   "operation": "order.create",
                                   "upstream": "http://127.0.0.1:9/",
                                   "store_headers": ["location", name]}]}
                with open(path, "w") as f:
                    json.dump(cfg, f)
                env = dict(os.environ)
                env.pop("IDEMD_DATABASE_URL", None)
                env.pop("IDEMD_LISTEN", None)
                p = subprocess.run([BIN, "check-config", "--config", path], env=env,
                                   capture_output=True, text=True, timeout=10)
                outputs[name] = (p.returncode, (p.stdout + p.stderr).lower())
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for i, name in enumerate(names):
            with self.subTest(header=name):
                rc, out = outputs[name]
                self.assertEqual(rc, 2, out)
                # the message must name this header: a generic list of what is
                # never stored (the same for another header) does not count
                _, baseline = outputs[names[(i + 1) % len(names)]]
                self.assertGreater(out.count(name), baseline.count(name),
                                   "the error does not name %s: %r" % (name, out))

    # ---- rule 11

    def test_rule11_second_complete_conflict(self):
        tok = self.issue("order.create")
        self.claim_ok(tok)
        r1 = self.complete(tok, 1, 201, {"Location": "/x/1"}, {"x": 1})
        assert_status(self, r1, 200)
        for what, args in (("status", (202, {"Location": "/x/1"}, {"x": 1})),
                           ("headers", (201, {"Location": "/x/2"}, {"x": 1})),
                           ("extra header", (201, {"Location": "/x/1", "X-A": "1"}, {"x": 1})),
                           ("body", (201, {"Location": "/x/1"}, {"x": 2}))):
            with self.subTest(different=what):
                assert_problem(self, self.complete(tok, 1, *args), 409, "completion_conflict")
        r2 = self.complete(tok, 1, 201, {"Location": "/x/1"}, {"x": 1})
        assert_status(self, r2, 200)
        self.assertEqual(r2.json, r1.json)
        r = self.claim(tok)
        j = assert_status(self, r, 200)
        self.assertEqual((j["response"]["status"], j["response"].get("body")), (201, {"x": 1}))

    # ---- rule 12

    def test_rule12_forwarded_headers_untrusted_route(self):
        mark = self.up.mark()
        spoof = {"Forwarded": "for=198.51.100.1;proto=https;host=evil.example",
                 "X-Real-IP": "198.51.100.2", "X-Forwarded-Host": "evil.example",
                 "X-Forwarded-Proto": "https"}
        tok, tid, subj = self.token()
        r = self.submit(tok, headers=dict(spoof, **{"X-Forwarded-For": "203.0.113.9"}))
        self.assertEqual(r.status, 201, r.describe())
        q = self.up.requests(tid)[0]
        # the client's own chain is not believed on an untrusted route
        self.assertEqual(q.values("x-forwarded-for"), ["127.0.0.1"])
        for h in spoof:
            self.assertEqual(q.values(h), [], "%s reached the upstream" % h)
        tok, tid, subj = self.token()
        self.assertEqual(self.submit(tok).status, 201)
        self.assertEqual(self.up.requests(tid)[0].values("x-forwarded-for"), ["127.0.0.1"])
        self.assert_upstream_clean(mark, 2, "rule 12")

    def test_rule12_forwarded_headers_trusted_route(self):
        spoof = {"Forwarded": "for=198.51.100.1;proto=https;host=shop.example",
                 "X-Real-IP": "198.51.100.2", "X-Forwarded-Host": "shop.example",
                 "X-Forwarded-Proto": "https"}
        tok, tid, subj = self.token()
        r = self.submit(tok, path="/orders/trusted",
                        headers=dict(spoof, **{"X-Forwarded-For": "203.0.113.9"}))
        self.assertEqual(r.status, 201, r.describe())
        q = self.up.requests(tid)[0]
        self.assertEqual(q.values("x-forwarded-for"), ["203.0.113.9, 127.0.0.1"])
        for h, v in spoof.items():
            self.assertEqual(q.values(h), [v], h)

    def test_rule12_exactly_one_key_and_subject(self):
        mark = self.up.mark()
        tok, tid, subj = self.token()
        extra = (b"Idempotency-Subject: mallory\r\nidempotency-subject: eve\r\n"
                 b"X-Note: keep\r\n")
        rs, _, raw, _ = exchange(self.server.port, self.head(tok, extra=extra), wait=10)
        self.assertTrue(rs, raw[:300])
        self.assertEqual(rs[0].status, 201, rs[0])
        q = self.up.requests(tid)
        self.assertEqual(len(q), 1)
        q = q[0]
        self.assertRegex(tid, r"^[0-9a-f]{32}$")
        self.assertEqual(q.values("idempotency-key"), [tid])
        self.assertEqual(q.values("idempotency-subject"), [subj])
        self.assertEqual(q.values("x-note"), ["keep"])
        # the token itself, bare or quoted, never reaches the upstream
        self.assertNotIn(tok.encode(), q.raw)
        self.assert_upstream_clean(mark, 1, "rule 12 key/subject")

    # ---- rule 13

    def test_rule13_upstream_answer_that_looks_wrong_502(self):
        mark0 = self.up.mark()
        forwarded = 0
        for mode in ("badname", "barecr", "excess"):
            with self.subTest(upstream=mode):
                tok, tid, _ = self.token()
                mark = self.up.mark()
                r = self.submit(tok, headers={"X-Raw-Mode": mode, "Origin": ORIGIN})
                forwarded += 1
                # it answered 200: the upstream acted, so the unstorable
                # answer is recorded as executed and never forwarded again
                assert_problem(self, r, 502, "upstream_answer_unstorable")
                self.assertIsNone(r.header("set-cookie"), r.describe())
                got = self.up.requests(tid)
                self.assertEqual(len(got), 1, got)
                cid = got[0].conn_id
                self.assertTrue(self.up.wait_eof(cid, 3.0),
                                "%s: idemd kept the upstream connection open" % mode)
                self.assertIs(self.up.conn(cid).requests[-1], got[0],
                              "%s: the connection carried more after the bad answer" % mode)
                r = self.submit(tok, headers={"Origin": ORIGIN})
                assert_problem(self, r, 502, "upstream_answer_unstorable")
                self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
                self.assertEqual(len(self.up.requests(tid)), 1,
                                 "%s: the upstream ran again" % mode)
                self.assertEqual(len(self.up.since(mark)), 1)
        self.assert_upstream_clean(mark0, forwarded, "rule 13")

    # ---- rule 14

    def test_rule14_passed_through_5xx_replayed_false(self):
        tok, tid, _ = self.token()
        r = self.submit(tok, headers={"X-Raw-Mode": "s503"})
        self.assertEqual(r.status, 503, r.describe())
        self.assertEqual(r.json, {"error": "down"}, r.describe())
        self.assertEqual(r.header("idempotent-replayed"), "false", r.describe())
        r = self.submit(tok)
        self.assertEqual(r.status, 201, r.describe())
        self.assertEqual(len(self.up.requests(tid)), 2)

    def test_rule14_502_and_504_retry_after(self):
        tok, tid, _ = self.token()
        r = self.submit(tok, path="/orders/dead")
        assert_problem(self, r, 502, "upstream_unavailable")
        assert_retry_after(self, r)
        tok, tid, _ = self.token()
        r = self.submit(tok, path="/orders/quick", headers={"X-Raw-Mode": "hang"})
        assert_problem(self, r, 504, "upstream_timeout")
        assert_retry_after(self, r)
        self.assertEqual(len(self.up.requests(tid)), 1)


# ---------------------------------------------------------------- limits

class Limits(IdemdCase):
    """Servers with their own limits, sharing one database."""

    tenant_names = ("acme",)
    start_server = False

    def serve(self, **cfg):
        c = dict(self.idemd.extra_config)
        c.update({"master_key_file": self.idemd.master_key_file, "threads": 4,
                  "pool_size": 4})
        c.update(cfg)
        other = Idemd(c, db=self.idemd.db)
        self.addCleanup(other.cleanup)
        return other.start()

    def put_op(self, srv):
        r = Client(srv.port, self.keys["acme"]).put("/v1/operations/order.create",
                                                   harness.DEFAULT_POLICY)
        self.assertIn(r.status, (200, 201), r.describe())

    # ---- rule 6

    def test_rule06_memory_without_credentials(self):
        srv = self.serve()
        pid = srv.proc.pid
        n, size = 300, MIB
        head = (b"POST /no/such/path HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % size)
        chunk = b"x" * 65536
        socks = []
        sel = selectors.DefaultSelector()
        peak = [0]
        sent, cut = [0], [0]
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                try:
                    peak[0] = max(peak[0], rss_kib(pid))
                except OSError:
                    return
                time.sleep(0.05)
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        try:
            for i in range(n):
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
                s.setblocking(False)
                socks.append(s)
                sel.register(s, selectors.EVENT_WRITE, [head, size - 1])
            t0 = time.monotonic()
            last_progress = t0
            live = n
            while live and time.monotonic() - t0 < 10 and time.monotonic() - last_progress < 1.5:
                for key, _ in sel.select(0.2):
                    st = key.data
                    try:
                        if st[0]:
                            k = key.fileobj.send(st[0])
                            st[0] = st[0][k:]
                        else:
                            k = key.fileobj.send(chunk[:min(len(chunk), st[1])])
                            st[1] -= k
                        sent[0] += k
                        last_progress = time.monotonic()
                    except BlockingIOError:
                        continue
                    except OSError:
                        st[0], st[1] = b"", 0
                        cut[0] += 1
                    if not st[0] and st[1] <= 0:
                        sel.unregister(key.fileobj)
                        live -= 1
            sent_for = time.monotonic() - t0
            t1 = time.monotonic()
            h = Client(srv.port, timeout=5).get("/healthz")
            healthz = time.monotonic() - t1
            self.assertEqual(h.status, 200, h.describe())
            self.assertLess(healthz, 2.0)
            time.sleep(0.3)
            stop.set()
            sampler.join(2)
            hwm = rss_kib(pid, "VmHWM")
            print("\n  %d connections declaring 1 MiB to an unknown path: %.1f MiB sent in "
                  "%.1f s, %d connections closed by idemd; peak RSS %.1f MiB (VmHWM %.1f MiB); "
                  "/healthz meanwhile in %.1f ms"
                  % (n, sent[0] / float(MIB), sent_for, cut[0], peak[0] / 1024.0, hwm / 1024.0,
                     healthz * 1e3),
                  file=sys.stderr)
            self.assertLess(peak[0], 96 * 1024, "RSS went to %d KiB" % peak[0])
            self.assertLess(hwm, 96 * 1024, "VmHWM %d KiB" % hwm)
            self.assertIsNone(srv.proc.poll())
        finally:
            stop.set()
            sel.close()
            for s in socks:
                s.close()

    def test_rule06_max_inflight_body_bytes_503(self):
        # one address and one tenant, so their shares are the whole budget:
        # the global bound is tested (the shares: test_hostile_tenants)
        srv = self.serve(max_inflight_body_bytes=4 * MIB, max_body_bytes=2 * MIB,
                         max_inflight_body_bytes_per_client=4 * MIB,
                         max_inflight_body_bytes_per_tenant=4 * MIB)
        self.put_op(srv)
        declared = 1000000
        start = b'{"operation":"order.create","subject":"big"}'
        body = start + b" " * (declared - len(start))
        head = (b"POST /v1/tokens HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer " +
                self.keys["acme"].encode() + b"\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n" % declared)
        held = []
        try:
            for i in range(4):
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
                held.append(s)
                s.sendall(head + body[:4096])
            time.sleep(0.3)
            for i, s in enumerate(held):
                s.settimeout(0.05)
                try:
                    d = s.recv(65536)
                    self.fail("held request %d (%d MB declared in all) was answered: %r"
                              % (i + 1, (i + 1) * declared // 10**6, d[:300]))
                except socket.timeout:
                    pass
            for extra in range(3):
                with self.subTest(extra=extra + 1):
                    rs, closed, raw, first = exchange(srv.port, head, wait=3.0)
                    self.assertTrue(rs, "no answer to a request over the in-flight budget: %r"
                                    % raw[:300])
                    assert_raw_problem(self, rs[0], 503, "unavailable", "over the budget")
                    ra = rs[0].header("retry-after")
                    self.assertIsNotNone(ra, rs[0])
                    self.assertRegex(ra, r"^\d+$")
                    self.assertLess(first, 1.0)
            # the held ones were real: the first, sent whole, is issued
            s = held[0]
            s.settimeout(10)
            s.sendall(body[4096:])
            raw, t0 = b"", time.monotonic()
            while not parse_responses(raw) and time.monotonic() - t0 < 10:
                d = s.recv(65536)
                if not d:
                    break
                raw += d
            rs = parse_responses(raw)
            self.assertTrue(rs, raw[:300])
            self.assertEqual(rs[0].status, 201, rs[0])
        finally:
            for s in held:
                s.close()
        # once they are gone, the budget is back
        deadline = time.monotonic() + 3
        while True:
            r = Client(srv.port, self.keys["acme"]).post(
                "/v1/tokens", {"operation": "order.create", "subject": "after"})
            if r.status == 201 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.assertEqual(r.status, 201, r.describe())

    # ---- rule 7

    def trickle(self, port, first, rest, out, key):
        """Sends FIRST, then REST one byte every 0.3 s; records when the
        server closed the connection (seconds after opening) and what it sent."""
        t0 = time.monotonic()
        got, closed_at = b"", None
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
        except OSError as e:
            out[key] = (None, repr(e).encode())
            return
        with s:
            t0 = time.monotonic()
            try:
                s.sendall(first)
                i = 0
                s.settimeout(0.3)
                while time.monotonic() - t0 < 7 and closed_at is None:
                    try:
                        d = s.recv(65536)
                        if not d:
                            closed_at = time.monotonic() - t0
                            break
                        got += d
                    except socket.timeout:
                        pass
                    if i < len(rest):
                        s.sendall(rest[i:i + 1])
                        i += 1
            except OSError:
                closed_at = time.monotonic() - t0
        out[key] = (closed_at, got)

    def test_rule07_request_deadline(self):
        srv = self.serve(request_timeout_seconds=2)
        auth = b"Authorization: Bearer " + self.keys["acme"].encode() + b"\r\n"
        body = b'{"operation":"order.create","subject":"slow"}' + b" " * 100
        body_first = (b"POST /v1/tokens HTTP/1.1\r\nHost: t\r\n" + auth +
                      b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                      % len(body))
        header_first = b"GET /healthz HTTP/1.1\r\nHost: t\r\n"
        header_rest = b"X-Slow: " + b"a" * 100 + b"\r\n\r\n"
        out = {}
        ts = [threading.Thread(target=self.trickle, args=(srv.port, body_first, body, out,
                                                          "body")),
              threading.Thread(target=self.trickle, args=(srv.port, header_first, header_rest,
                                                          out, "headers"))]
        for t in ts:
            t.start()
        served = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:
            t1 = time.monotonic()
            r = Client(srv.port, timeout=2).get("/healthz")
            served.append((r.status, time.monotonic() - t1))
            time.sleep(0.25)
        for t in ts:
            t.join(10)
        print("\n  request_timeout_seconds 2: trickled body closed after %s s, trickled headers "
              "after %s s; %d /healthz meanwhile, slowest %.1f ms"
              % (out.get("body", (None,))[0], out.get("headers", (None,))[0], len(served),
                 max(e for _, e in served) * 1e3), file=sys.stderr)
        self.assertTrue(all(st == 200 and e < 1.0 for st, e in served), served)
        for what in ("body", "headers"):
            closed_at, got = out[what]
            self.assertIsNotNone(closed_at, "%s trickle: the connection was never closed; "
                                 "it got %r" % (what, got[:300]))
            self.assertLessEqual(closed_at, 3.5, "%s trickle closed after %.2f s"
                                 % (what, closed_at))
            rs = parse_responses(got)
            for r in rs:
                self.assertEqual(r.status, 408, "%s trickle: %r" % (what, r))

    # ---- rule 8

    def test_rule08_max_connections_per_ip(self):
        srv = self.serve(max_connections_per_ip=5)
        time.sleep(0.3)
        held = []
        req = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"
        try:
            for i in range(5):
                s = socket.create_connection(("127.0.0.1", srv.port), timeout=3)
                held.append(s)
                s.sendall(req)
                raw = b""
                while not parse_responses(raw):
                    d = s.recv(65536)
                    self.assertTrue(d, "held connection %d was closed" % (i + 1))
                    raw += d
                self.assertEqual(parse_responses(raw)[0].status, 200)
            s = socket.create_connection(("127.0.0.1", srv.port), timeout=3)
            with s:
                try:
                    s.sendall(req)
                except OSError:
                    pass
                s.settimeout(2.0)
                got, refused = b"", False
                t0 = time.monotonic()
                try:
                    while time.monotonic() - t0 < 2.0:
                        d = s.recv(65536)
                        if not d:
                            refused = True
                            break
                        got += d
                except socket.timeout:
                    pass
                except OSError:
                    refused = True
                self.assertEqual(got, b"", "the 6th connection was answered")
                self.assertTrue(refused, "the 6th connection was neither closed nor reset")
                self.assertLess(time.monotonic() - t0, 1.5)
        finally:
            for s in held:
                s.close()
        deadline = time.monotonic() + 3
        status = None
        while time.monotonic() < deadline:
            try:
                status = Client(srv.port, timeout=1).get("/healthz").status
                if status == 200:
                    break
            except OSError as e:
                status = e
            time.sleep(0.1)
        self.assertEqual(status, 200)


if __name__ == "__main__":
    harness.main()
