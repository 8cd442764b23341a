"""Integration tests: one token, one execution across two idemd instances
sharing one database (concurrent claims, replays, version bumps)."""

import collections
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Client, IdemdCase, assert_status, free_port, uniq  # noqa: E402
from faultkit import storm  # noqa: E402


def figures(results):
    c = collections.Counter()
    for r in results:
        if isinstance(r, Exception):
            c["error:" + type(r).__name__] += 1
        else:
            code = (r.json or {}).get("code") if r.status >= 400 else ""
            c["%d %s" % (r.status, code or "")] += 1
    return dict(c)


class TwoInstances(IdemdCase):
    extra_config = {"pool_size": 8, "threads": 8}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.port2 = free_port()
        cls.server2 = cls.idemd.start(port=cls.port2)
        cls.clients = [Client(cls.server.port, cls.api_key, timeout=60),
                       Client(cls.port2, cls.api_key, timeout=60)]

    def test_200_concurrent_claims_one_winner(self):
        op = self.put_operation()
        tok = self.issue(op)
        path = "/v1/tokens/%s/claim" % tok
        body = {"request": {"cart": 7, "items": ["a", "b"]}}
        results, elapsed = storm(200, lambda i: self.clients[i % 2].post(path, body))
        fig = figures(results)
        print("\n  200 concurrent claims over 2 instances: %s in %.3fs" % (fig, elapsed))
        for r in results:
            self.assertNotIsInstance(r, Exception, repr(r))
        winners = [r for r in results if r.status == 201]
        self.assertEqual(len(winners), 1, fig)
        self.assertEqual(winners[0].json["attempt"], 1)
        for r in results:
            if r.status != 201:
                self.assertEqual(r.status, 409, r.describe())
                self.assertEqual(r.json.get("code"), "request_in_progress", r.describe())
                self.assertTrue(r.header("retry-after"), r.describe())

        # complete on one instance, replay from both
        resp_body = {"order": 1234, "status": "accepted"}
        c = self.clients[1].post("/v1/tokens/%s/complete" % tok,
                                 {"attempt": 1, "status": 201,
                                  "headers": {"Location": "/orders/1234"}, "body": resp_body})
        assert_status(self, c, 200)
        results, elapsed = storm(100, lambda i: self.clients[i % 2].post(path, body))
        fig = figures(results)
        print("  100 concurrent replays over 2 instances: %s in %.3fs" % (fig, elapsed))
        bodies = set()
        for r in results:
            self.assertNotIsInstance(r, Exception, repr(r))
            self.assertEqual(r.status, 200, r.describe())
            self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
            self.assertEqual(r.json["response"]["body"], resp_body, r.describe())
            bodies.add(r.body)
        self.assertEqual(len(bodies), 1, "replays differ")

    def test_concurrent_claims_many_tokens(self):
        op = self.put_operation()
        toks = assert_status(self, self.issue_resp(op, count=20), 201)["tokens"]
        per = 10
        results, elapsed = storm(len(toks) * per, lambda i: self.clients[i % 2].post(
            "/v1/tokens/%s/claim" % toks[i // per]["token"], {}))
        fig = figures(results)
        print("\n  20 tokens x 10 concurrent claims: %s in %.3fs" % (fig, elapsed))
        for i, t in enumerate(toks):
            rs = results[i * per:(i + 1) * per]
            for r in rs:
                self.assertNotIsInstance(r, Exception, repr(r))
            self.assertEqual(sum(1 for r in rs if r.status == 201), 1, figures(rs))
            self.assertEqual(sum(1 for r in rs if r.status == 409), per - 1, figures(rs))

    def test_concurrent_claims_share_one_counter(self):
        prefix = uniq("seat")
        op = self.put_operation(version_key=prefix + ":{subject}")
        subj = uniq("u")
        toks = assert_status(self, self.issue_resp(op, subj, count=40), 201)["tokens"]
        results, elapsed = storm(len(toks), lambda i: self.clients[i % 2].post(
            "/v1/tokens/%s/claim" % toks[i]["token"], {}))
        fig = figures(results)
        print("\n  40 tokens at one version, concurrent claims: %s in %.3fs" % (fig, elapsed))
        for r in results:
            self.assertNotIsInstance(r, Exception, repr(r))
        self.assertEqual(sum(1 for r in results if r.status == 201), 1, fig)
        for r in results:
            if r.status != 201:
                self.assertEqual(r.status, 412, r.describe())
                self.assertEqual(r.header("etag"), '"1"', r.describe())
        self.assertEqual(self.version("%s:%s" % (prefix, subj)), 1)

    def test_concurrent_takeover_one_winner(self):
        op = self.put_operation(lease_seconds=1)
        tok = self.issue(op)
        self.claim_ok(tok)
        time.sleep(2.1)
        path = "/v1/tokens/%s/claim" % tok
        results, elapsed = storm(100, lambda i: self.clients[i % 2].post(path, {}))
        fig = figures(results)
        print("\n  100 concurrent takeovers of an expired lease: %s in %.3fs" % (fig, elapsed))
        for r in results:
            self.assertNotIsInstance(r, Exception, repr(r))
        winners = [r for r in results if r.status == 201]
        self.assertEqual(len(winners), 1, fig)
        self.assertEqual(winners[0].json["attempt"], 2, winners[0].describe())
        self.assertEqual(sum(1 for r in results if r.status == 409), 99, fig)
        assert_status(self, self.complete(tok, 2, 200, body={"w": 2}), 200)

    def test_concurrent_complete_and_claims(self):
        op = self.put_operation()
        tok = self.issue(op)
        self.claim_ok(tok)
        path = "/v1/tokens/%s/claim" % tok
        done = {"attempt": 1, "status": 201, "body": {"n": 5}}

        def fn(i):
            if i == 50:
                return self.clients[0].post("/v1/tokens/%s/complete" % tok, done)
            return self.clients[i % 2].post(path, {})

        results, elapsed = storm(101, fn)
        fig = figures(results)
        print("\n  100 claims racing one complete: %s in %.3fs" % (fig, elapsed))
        for r in results:
            self.assertNotIsInstance(r, Exception, repr(r))
        self.assertEqual(results[50].status, 200, results[50].describe())
        for i, r in enumerate(results):
            if i == 50:
                continue
            if r.status == 200:
                self.assertEqual(r.json["response"]["body"], {"n": 5}, r.describe())
                self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
            else:
                self.assertEqual(r.status, 409, r.describe())
                self.assertEqual(r.json["code"], "request_in_progress", r.describe())

    def test_concurrent_put_same_operation(self):
        name = uniq("race.op")
        results, elapsed = storm(20, lambda i: self.clients[i % 2].put(
            "/v1/operations/" + name, harness.DEFAULT_POLICY))
        fig = figures(results)
        print("\n  20 concurrent PUTs of one new operation: %s in %.3fs" % (fig, elapsed))
        for r in results:
            self.assertNotIsInstance(r, Exception, repr(r))
        self.assertEqual(sum(1 for r in results if r.status == 201), 1, fig)
        self.assertEqual(sum(1 for r in results if r.status == 200), 19, fig)

    def test_concurrent_version_bumps(self):
        key = uniq("stock") + ":sku-1"
        results, elapsed = storm(50, lambda i: self.clients[i % 2].post(
            "/v1/versions/" + key, headers={"If-Match": '"0"'}))
        fig = figures(results)
        print("\n  50 concurrent bumps with If-Match \"0\": %s in %.3fs" % (fig, elapsed))
        for r in results:
            self.assertNotIsInstance(r, Exception, repr(r))
        self.assertEqual(sum(1 for r in results if r.status == 200), 1, fig)
        self.assertEqual(sum(1 for r in results if r.status == 412), 49, fig)
        self.assertEqual(self.version(key), 1)


if __name__ == "__main__":
    harness.main()
