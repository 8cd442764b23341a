#!/usr/bin/env python3
"""The contract's corners, run by tests/contract.sh through the validating
proxy (every answer checked against api/openapi.yaml there) and judged
here from the request side: for each case the document's verdict on the
request (openapi-core's request validator, with the formats the document
names) must be idemd's. A request the document calls valid must not get
400, and one it calls invalid must get 400 with the documented code.

The cases are the classes a review found the document and idemd apart
on: limits a schema states (lengths, patterns, maxima, bytes against
characters), JSON edge values (NUL, integral reals, huge numbers), HEAD,
a cursor on a full last page, operation names on every path, and the
answers libmicrohttpd writes itself (414, 431: validated by the proxy as
the document's x-any-path-responses).

Needs openapi-core (the contract stage runs it with build/contract-venv's
python) and the harness's PostgreSQL settings."""

import json
import os
import sys
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import IdemdCase, assert_problem, assert_status, uniq  # noqa: E402
from formats import OPENAPI_FORMATS  # noqa: E402

import yaml  # noqa: E402
from openapi_core import Config, OpenAPI  # noqa: E402
from openapi_core.testing import MockRequest  # noqa: E402

with open(os.path.join(ROOT, "api", "openapi.yaml"), encoding="utf-8") as f:
    SPEC = OpenAPI.from_dict(yaml.safe_load(f), config=Config(
        extra_format_validators=OPENAPI_FORMATS))


def doc_valid(method, path, headers, body):
    """The document's verdict on a request: None when valid, else why."""
    p, _, query = path.partition("?")
    # openapi-core matches path parameters undecoded; idemd decodes them
    # (a segment that decodes to a "/" stays as sent: its characters are
    # the same class either way)
    p = "/".join(seg if "/" in urllib.parse.unquote(seg) else urllib.parse.unquote(seg)
                 for seg in p.split("/"))
    rq = MockRequest("http://127.0.0.1:8080", method.lower(), p,
                     args=dict(urllib.parse.parse_qsl(query)), headers=headers,
                     data=body if body is not None else None,
                     content_type="application/json" if body is not None else None)
    try:
        SPEC.validate_request(rq)
    except Exception as e:  # openapi-core's validation errors
        causes, c = [], e
        while c is not None:
            causes.append("%s: %s" % (type(c).__name__, str(c)[:200]))
            c = c.__cause__
        return " <- ".join(causes)
    return None


def pq(key):
    return urllib.parse.quote(key, safe="")


class Edges(IdemdCase):

    def judge(self, method, path, body=None, headers=None, code="invalid_request",
              client=None):
        """Sends the request; asserts idemd agrees with the document on it."""
        client = client or self.client
        h = dict(headers or {})
        h["Authorization"] = "Bearer " + client.api_key
        text = body if body is None or isinstance(body, str) else json.dumps(body)
        why = doc_valid(method, path, h, text)
        r = client.request(method, path, text, headers=headers)
        if why is None:
            self.assertNotEqual(r.status, 400, "the document takes it, idemd refused it: "
                                + r.describe())
            self.assertLess(r.status, 500, r.describe())
        else:
            self.assertEqual(r.status, 400, "the document refuses it (%s), idemd answered: %s"
                             % (why[:300], r.describe()))
            assert_problem(self, r, 400, code)
        return r

    def test_limits_from_both_sides(self):
        op = self.put_operation()
        claim = "/v1/operations/%s/keys/%%s/claim" % op
        # a caller key: 1..255 visible ASCII
        for key in ("k" * 255, "evt_1:x/y?z#w%"):
            self.judge("POST", claim % pq(key), {})
        for key in ("k" * 256, "a b", "\u00e9", "a\x7f"):
            self.judge("POST", claim % pq(key), {}, code="idempotency_key_invalid")
        # a subject: 1..128 bytes of UTF-8, not characters
        for subject in ("s" * 128, "\u00e9" * 64):
            self.judge("POST", claim % pq(uniq("s")), {"subject": subject})
        for subject in ("s" * 129, "\u00e9" * 65, "\u00e9" * 100, ""):
            self.judge("POST", claim % pq(uniq("s")), {"subject": subject})
            self.judge("POST", "/v1/tokens", {"operation": op, "subject": subject})
        # an attempt: 1..2147483647
        key = uniq("a")
        assert_status(self, self.client.post(claim % key, {}), 201)
        base = "/v1/operations/%s/keys/%s/" % (op, key)
        for attempt in (2147483647, 2147483648, 0, 1.5):
            self.judge("POST", base + "release", {"attempt": attempt})
            self.judge("POST", base + "extend", {"attempt": attempt})
        self.judge("POST", base + "extend", {"attempt": 1, "lease_seconds": 3601})
        # If-Match: no leading zeros, at most 2^63-1
        vpath = "/v1/versions/%s" % uniq("v")
        for im in ('"0"', '"00"', '"9223372036854775807"', '"9223372036854775808"',
                   'W/"1"', '"1a"'):
            self.judge("POST", vpath, headers={"If-Match": im})
        # an operation name, on every path that takes one
        for name in ("Bad", "a" * 65):
            self.judge("POST", "/v1/operations/%s/keys/k/claim" % name, {})
            self.judge("POST", "/v1/operations/%s/claims" % name, {"items": [{"key": "a"}]})
            self.judge("GET", "/v1/operations/%s/keys/k" % name)
            self.judge("POST", "/v1/tokens", {"operation": name, "subject": "u"})

    def test_json_edge_values(self):
        op = self.put_operation()
        claim = "/v1/operations/%s/keys/%%s/claim" % op
        for text in ('{"request":"\\u0000"}', '{"request":{"a":[1e-400,-0.0,30.0]}}',
                     '{"request":1e400}', '{"request":18446744073709551616}',
                     '{"request":-9223372036854775808}', '{"fingerprint":"\\u0000"}'):
            self.judge("POST", claim % uniq("j"), text)
        for text in ('{"operation":"%s","subject":"u","ttl_seconds":30.0}' % op,
                     '{"operation":"%s","subject":"u","ttl_seconds":30.5}' % op,
                     '{"operation":"%s","subject":"u","count":1e400}' % op):
            self.judge("POST", "/v1/tokens", text)
        key = uniq("b")
        assert_status(self, self.client.post(claim % key, {}), 201)
        self.judge("POST", "/v1/operations/%s/keys/%s/complete" % (op, key),
                   '{"attempt":1.0,"status":201,"body":{"s":"\\u0000"}}')
        self.judge("POST", "/v1/versions/%s" % uniq("v"), '{"x":1}',
                   headers={"If-Match": '"0"'})

    def test_head_and_cursor(self):
        for client, path in ((self.anon, "/healthz"), (self.anon, "/metrics"),
                             (self.client, "/v1/operations"), (self.anon, "/v1/operations")):
            r = client.request("HEAD", path)
            self.assertEqual(r.body, b"", r.describe())
        op = self.put_operation()
        assert_status(self, self.client.post("/v1/operations/%s/claims" % op, {
            "items": [{"key": uniq("c")} for _ in range(4)]}), 200)
        j = assert_status(self, self.client.get("/v1/records?operation=%s&limit=2" % op), 200)
        j = assert_status(self, self.client.get("/v1/records?operation=%s&limit=2&cursor=%s"
                                                % (op, j["next_cursor"])), 200)
        self.assertEqual((len(j["records"]), j["next_cursor"]), (2, None))

    def test_answers_of_the_http_library(self):
        # written by libmicrohttpd, not idemd: the proxy checks them against
        # x-any-path-responses
        r = self.anon.get("/healthz?" + "q" * 20000)
        self.assertEqual(r.status, 414, r.describe())
        r = self.anon.get("/healthz", headers={"X-Big": "v" * 20000})
        self.assertEqual(r.status, 431, r.describe())


if __name__ == "__main__":
    harness.main()
