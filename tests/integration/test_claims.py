"""Integration tests: the claim-outcome table of the contract (claim,
complete, release, replay, fingerprints, expiry, revocation, version
preconditions, lease takeover and fencing)."""

import base64
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (IdemdCase, assert_problem, assert_retry_after, assert_status,  # noqa: E402
                     uniq)


def lower_keys(d):
    return {k.lower(): v for k, v in (d or {}).items()}


class Claims(IdemdCase):
    # a fast sweeper, so the retention tests see records it would delete
    extra_config = {"sweep_interval_seconds": 1}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.op = uniq("order.create")
        r = cls.client.put("/v1/operations/" + cls.op, harness.DEFAULT_POLICY)
        assert r.status == 201, r.describe()

    def assert_replay(self, r, status, headers, body=None, body_base64=None):
        j = assert_status(self, r, 200)
        self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
        self.assertEqual(j.get("state"), "completed", r.describe())
        resp = j.get("response")
        self.assertIsInstance(resp, dict, r.describe())
        self.assertEqual(resp.get("status"), status, r.describe())
        self.assertEqual(lower_keys(resp.get("headers")), lower_keys(headers), r.describe())
        if body_base64 is not None:
            self.assertEqual(resp.get("body_base64"), body_base64, r.describe())
        else:
            self.assertEqual(resp.get("body"), body, r.describe())
        return resp

    # ---- first submit, replay, in progress

    def test_first_submit_201(self):
        tok = self.issue(self.op)
        r = self.claim(tok, {"fingerprint": "abc"})
        j = assert_status(self, r, 201)
        self.assertEqual(j.get("state"), "in_progress", r.describe())
        self.assertEqual(j.get("attempt"), 1, r.describe())
        self.assertIn("lease_expires_at", j, r.describe())

    def test_replay_json_body(self):
        tok = self.issue(self.op)
        self.claim_ok(tok, {"fingerprint": "f1"})
        headers = {"Location": "/orders/42", "X-Order-Id": "42"}
        body = {"order": 42, "items": [1, 2, {"n": None}], "total": "9.90", "ok": True}
        r = self.complete(tok, 1, 201, headers, body)
        assert_status(self, r, 200)
        for _ in range(2):
            r = self.claim(tok, {"fingerprint": "f1"})
            self.assert_replay(r, 201, headers, body)

    def test_replay_base64_body(self):
        tok = self.issue(self.op)
        self.claim_ok(tok, {"request": {"a": 1}})
        raw = bytes(range(256)) + b"\x00binary\xff"
        b64 = base64.b64encode(raw).decode()
        r = self.complete(tok, 1, 200, {"Content-Type": "application/octet-stream"},
                          body_base64=b64)
        assert_status(self, r, 200)
        r = self.claim(tok, {"request": {"a": 1}})
        resp = self.assert_replay(r, 200, {"Content-Type": "application/octet-stream"},
                                  body_base64=b64)
        self.assertEqual(base64.b64decode(resp["body_base64"]), raw)

    def test_replay_without_body(self):
        tok = self.issue(self.op)
        self.claim_ok(tok)
        assert_status(self, self.complete(tok, 1, 204, {}), 200)
        r = self.claim(tok)
        j = assert_status(self, r, 200)
        self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
        self.assertEqual(j["response"]["status"], 204, r.describe())
        self.assertIn(j["response"].get("body"), (None,), r.describe())

    def test_duplicate_in_progress_409(self):
        tok = self.issue(self.op)
        self.claim_ok(tok, {"fingerprint": "x"})
        r = self.claim(tok, {"fingerprint": "x"})
        assert_problem(self, r, 409, "request_in_progress")
        assert_retry_after(self, r)
        # a retry is asked for in a second, not when the (longer) lease ends
        self.assertEqual(r.header("retry-after").strip(), "1", r.describe())

    # ---- fingerprints

    def test_fingerprint_mismatch_string(self):
        tok = self.issue(self.op)
        self.claim_ok(tok, {"fingerprint": "one"})
        assert_problem(self, self.claim(tok, {"fingerprint": "two"}), 422, "fingerprint_mismatch")
        assert_problem(self, self.claim(tok, {}), 422, "fingerprint_mismatch")
        assert_status(self, self.complete(tok, 1, 200, body={"r": 1}), 200)
        # a different request never gets the stored response
        assert_problem(self, self.claim(tok, {"fingerprint": "two"}), 422, "fingerprint_mismatch")
        self.assert_replay(self.claim(tok, {"fingerprint": "one"}), 200, {}, {"r": 1})

    def test_fingerprint_request_canonical(self):
        tok = self.issue(self.op)
        req1 = '{"request": {"amount": 10, "currency": "EUR", "items": [{"a": 1, "b": 2}]}}'
        req2 = '{"request":{"items":[{"b":2,"a":1}],"currency":"EUR","amount":10}}'
        req3 = '{"request": {"amount": 11, "currency": "EUR", "items": [{"a": 1, "b": 2}]}}'
        assert_status(self, self.client.post("/v1/tokens/%s/claim" % tok, req1), 201)
        # same request, keys reordered, other whitespace: same fingerprint
        r = self.client.post("/v1/tokens/%s/claim" % tok, req2)
        assert_problem(self, r, 409, "request_in_progress")
        r = self.client.post("/v1/tokens/%s/claim" % tok, req3)
        assert_problem(self, r, 422, "fingerprint_mismatch")
        assert_status(self, self.complete(tok, 1, 201, body={"id": 1}), 200)
        r = self.client.post("/v1/tokens/%s/claim" % tok, req2)
        self.assert_replay(r, 201, {}, {"id": 1})
        r = self.client.post("/v1/tokens/%s/claim" % tok, req3)
        assert_problem(self, r, 422, "fingerprint_mismatch")

    def test_fingerprint_array_order_matters(self):
        tok = self.issue(self.op)
        self.claim_ok(tok, {"request": [1, 2]})
        assert_problem(self, self.claim(tok, {"request": [2, 1]}), 422, "fingerprint_mismatch")

    def test_fingerprint_unicode_escapes_equal(self):
        tok = self.issue(self.op)
        url = "/v1/tokens/%s/claim" % tok
        assert_status(self, self.client.post(url, b'{"request": {"name": "Ren\xc3\xa9e"}}'), 201)
        r = self.client.post(url, b'{"request": {"name": "Ren\\u00e9e"}}')
        assert_problem(self, r, 409, "request_in_progress")

    def test_deeply_nested_request(self):
        # deep but within the parser's limits: fingerprinted like any request
        tok = self.issue(self.op)
        url = "/v1/tokens/%s/claim" % tok
        nested = b'{"request": ' + b"[" * 1000 + b"]" * 1000 + b"}"
        assert_status(self, self.client.post(url, nested), 201)
        assert_problem(self, self.client.post(url, nested), 409, "request_in_progress")
        # absurdly deep: a clear 400, never a crash
        tok2 = self.issue(self.op)
        absurd = b'{"request": ' + b"[" * 100000 + b"]" * 100000 + b"}"
        r = self.client.post("/v1/tokens/%s/claim" % tok2, absurd)
        assert_problem(self, r, 400, "invalid_request")
        assert_status(self, self.anon.get("/healthz"), 200)
        self.claim_ok(tok2)

    def test_claim_body_validation(self):
        tok = self.issue(self.op)
        for body in ({"fingerprint": 5}, {"fingerprint": "x", "colour": "blue"}, [1], "str"):
            with self.subTest(body=body):
                r = self.claim(tok, body)
                assert_problem(self, r, 400, "invalid_request")
        self.claim_ok(tok)

    # ---- expiry and revocation

    def test_expired_410(self):
        tok = self.issue(self.op, ttl_seconds=1)
        time.sleep(2.1)
        assert_problem(self, self.claim(tok), 410, "token_expired")

    def test_revoked_410(self):
        tok = self.issue(self.op)
        self.assertEqual(self.revoke(tok).status, 204)
        assert_problem(self, self.claim(tok), 410, "token_revoked")
        assert_problem(self, self.claim(tok, {"fingerprint": "other"}), 410, "token_revoked")
        # no attempt ever held it: every attempt is stale, and nothing is written
        assert_problem(self, self.complete(tok, 1, 200, body={}), 409, "lease_lost")
        assert_problem(self, self.release(tok, 1), 409, "lease_lost")
        self.assertEqual(assert_status(self, self.introspect(tok), 200)["state"], "revoked")

    def test_replay_beats_expiry(self):
        tok = self.issue(self.op, ttl_seconds=1)
        self.claim_ok(tok, {"fingerprint": "p"})
        assert_status(self, self.complete(tok, 1, 201, body={"done": True}), 200)
        time.sleep(2.1)
        self.assert_replay(self.claim(tok, {"fingerprint": "p"}), 201, {}, {"done": True})

    def test_expiry_vs_lease(self):
        live = uniq("live.lease")
        self.put_operation(live, lease_seconds=30)
        dead = uniq("short.lease")
        self.put_operation(dead, lease_seconds=1)
        t_live = self.issue(live, ttl_seconds=1)
        t_dead = self.issue(dead, ttl_seconds=1)
        self.claim_ok(t_live)
        self.claim_ok(t_dead)
        time.sleep(2.1)
        # in progress under a live lease is reported before expiry
        assert_problem(self, self.claim(t_live), 409, "request_in_progress")
        # a takeover of an expired token is refused
        assert_problem(self, self.claim(t_dead), 410, "token_expired")
        # the holder of the live lease can still complete
        assert_status(self, self.complete(t_live, 1, 200, body={"k": 1}), 200)
        self.assert_replay(self.claim(t_live), 200, {}, {"k": 1})

    # ---- retention and the sweeper

    def test_short_retention_never_allows_second_execution(self):
        op = self.put_operation(token_ttl_seconds=60, retention_seconds=1, lease_seconds=30)
        done = self.issue(op)
        running = self.issue(op)
        self.claim_ok(done, {"fingerprint": "r"})
        assert_status(self, self.complete(done, 1, 201, body={"kept": True}), 200)
        self.claim_ok(running)
        time.sleep(2.5)   # retention over, the sweeper ran at least once; tokens still valid
        self.assert_replay(self.claim(done, {"fingerprint": "r"}), 201, {}, {"kept": True})
        assert_problem(self, self.claim(running), 409, "request_in_progress")

    def test_swept_record_is_not_claimable_again(self):
        op = self.put_operation(retention_seconds=1, lease_seconds=30)
        tok = self.issue(op, ttl_seconds=1)
        self.claim_ok(tok)
        assert_status(self, self.complete(tok, 1, 200, body={"once": 1}), 200)
        time.sleep(3.1)   # token expired and retention over: the sweeper may delete it
        r = self.claim(tok)
        if r.status == 200:
            self.assert_replay(r, 200, {}, {"once": 1})
        else:
            assert_problem(self, r, 410, "token_expired")

    # ---- versions

    def versioned_op(self, require=False):
        prefix = uniq("cart")
        name = self.put_operation(version_key=prefix + ":{subject}", require_version=require)
        return name, prefix

    def test_version_mismatch_412(self):
        op, prefix = self.versioned_op()
        subj = uniq("u")
        key = "%s:%s" % (prefix, subj)
        a, b, c = (self.issue(op, subj) for _ in range(3))
        self.claim_ok(a)
        self.assertEqual(self.version(key), 1)
        r = self.claim(b)
        assert_problem(self, r, 412, "version_mismatch")
        self.assertEqual(r.header("etag"), '"1"', r.describe())
        # nothing was claimed
        self.assertEqual(assert_status(self, self.introspect(b), 200)["state"], "issued")
        # If-Match overrides the version the token carries
        self.claim_ok(b, if_match='"1"')
        self.assertEqual(self.version(key), 2)
        r = self.claim(c, if_match='"1"')
        assert_problem(self, r, 412, "version_mismatch")
        self.assertEqual(r.header("etag"), '"2"', r.describe())

    def test_version_required_428(self):
        op = self.put_operation()
        subj = uniq("u")
        tok = self.issue(op, subj)     # carries no version
        prefix = uniq("inv")
        self.put_operation(op, version_key=prefix + ":{subject}", require_version=True, expect=200)
        r = self.claim(tok)
        assert_problem(self, r, 428, "version_required")
        self.assertEqual(assert_status(self, self.introspect(tok), 200)["state"], "issued")
        self.claim_ok(tok, if_match='"0"')
        self.assertEqual(self.version("%s:%s" % (prefix, subj)), 1)
        # tokens issued now carry the version and need no If-Match
        tok2 = self.issue(op, subj)
        self.claim_ok(tok2)
        self.assertEqual(self.version("%s:%s" % (prefix, subj)), 2)

    def test_replay_beats_stale_version(self):
        op, prefix = self.versioned_op()
        subj = uniq("u")
        key = "%s:%s" % (prefix, subj)
        tok = self.issue(op, subj)
        self.claim_ok(tok, {"fingerprint": "v"})
        assert_status(self, self.complete(tok, 1, 201, body={"o": 1}), 200)
        r = self.client.post("/v1/versions/" + key, headers={"If-Match": '"1"'})
        assert_status(self, r, 200)
        self.assert_replay(self.claim(tok, {"fingerprint": "v"}), 201, {}, {"o": 1})
        self.assert_replay(self.claim(tok, {"fingerprint": "v"}, if_match='"0"'),
                           201, {}, {"o": 1})

    def test_takeover_after_release_does_not_bump_twice(self):
        op, prefix = self.versioned_op()
        subj = uniq("u")
        key = "%s:%s" % (prefix, subj)
        tok = self.issue(op, subj)
        self.claim_ok(tok)
        self.assertEqual(self.version(key), 1)
        assert_status(self, self.release(tok, 1), 200)
        self.claim_ok(tok, attempt=2)
        self.assertEqual(self.version(key), 1)

    # ---- lease takeover and fencing

    def test_lease_takeover_and_fencing(self):
        op = self.put_operation(lease_seconds=1)
        tok = self.issue(op)
        self.claim_ok(tok, {"fingerprint": "t"})
        time.sleep(2.1)
        self.claim_ok(tok, {"fingerprint": "t"}, attempt=2)
        r = self.complete(tok, 1, 201, body={"from": "attempt 1"})
        assert_problem(self, r, 409, "lease_lost")
        j = assert_status(self, self.introspect(tok), 200)
        self.assertEqual(j["state"], "in_progress")
        self.assertEqual(j["attempt"], 2)
        self.assertNotIn("response", j)
        assert_status(self, self.complete(tok, 2, 201, body={"from": "attempt 2"}), 200)
        self.assert_replay(self.claim(tok, {"fingerprint": "t"}), 201, {}, {"from": "attempt 2"})
        assert_problem(self, self.complete(tok, 1, 201, body={"from": "attempt 1"}),
                       409, "lease_lost")
        self.assert_replay(self.claim(tok, {"fingerprint": "t"}), 201, {}, {"from": "attempt 2"})

    def test_release_then_reclaim(self):
        tok = self.issue(self.op)
        self.claim_ok(tok)
        r = self.release(tok, 1)
        j = assert_status(self, r, 200)
        self.assertEqual(j.get("state"), "issued", r.describe())
        self.assertEqual(assert_status(self, self.introspect(tok), 200)["state"], "issued")
        assert_problem(self, self.release(tok, 1), 409, "not_in_progress")
        assert_problem(self, self.complete(tok, 1, 200, body={}), 409, "not_in_progress")
        self.claim_ok(tok, attempt=2)
        assert_problem(self, self.release(tok, 1), 409, "lease_lost")
        assert_status(self, self.complete(tok, 2, 200, body={"a": 2}), 200)
        self.assert_replay(self.claim(tok), 200, {}, {"a": 2})

    def test_complete_twice_same_attempt(self):
        tok = self.issue(self.op)
        self.claim_ok(tok)
        r1 = self.complete(tok, 1, 201, {"Location": "/x/1"}, {"x": 1})
        assert_status(self, r1, 200)
        r2 = self.complete(tok, 1, 201, {"Location": "/x/1"}, {"x": 1})
        assert_status(self, r2, 200)
        self.assertEqual(r1.json, r2.json)
        # a retry carrying another outcome is refused and overwrites nothing
        assert_problem(self, self.complete(tok, 1, 500, {}, {"x": "other"}),
                       409, "completion_conflict")
        assert_problem(self, self.complete(tok, 1, 201, {"Location": "/x/2"}, {"x": 1}),
                       409, "completion_conflict")
        assert_problem(self, self.complete(tok, 1, 201, {"Location": "/x/1"}, {"x": 2}),
                       409, "completion_conflict")
        self.assert_replay(self.claim(tok), 201, {"Location": "/x/1"}, {"x": 1})

    def test_complete_never_claimed_409(self):
        tok = self.issue(self.op)
        assert_problem(self, self.complete(tok, 1, 200, body={}), 409, "not_in_progress")
        assert_problem(self, self.release(tok, 1), 409, "not_in_progress")
        self.assertEqual(assert_status(self, self.introspect(tok), 200)["state"], "issued")

    def test_complete_validation(self):
        tok = self.issue(self.op)
        self.claim_ok(tok)
        url = "/v1/tokens/%s/complete" % tok
        cases = [
            {"attempt": 1, "status": 99},
            {"attempt": 1, "status": 600},
            {"attempt": 1, "status": "200"},
            {"attempt": 1},
            {"status": 200},
            {"attempt": "1", "status": 200},
            {"attempt": 1, "status": 200, "body": {"a": 1}, "body_base64": "AAAA"},
            {"attempt": 1, "status": 200, "headers": {"X-N": 1}},
            {"attempt": 1, "status": 200, "headers": {"X-N": ["a"]}},
            {"attempt": 1, "status": 200, "headers": ["X-N: a"]},
            {"attempt": 1, "status": 200, "headers": {"Bad Name": "v"}},
            {"attempt": 1, "status": 200, "headers": {"X-N": "a\r\nInjected: 1"}},
            {"attempt": 1, "status": 200, "body_base64": "!!not base64!!"},
            {"attempt": 1, "status": 200, "colour": "blue"},
        ]
        for body in cases:
            with self.subTest(body=body):
                assert_problem(self, self.client.post(url, body), 400, "invalid_request")
        # nothing was stored
        j = assert_status(self, self.introspect(tok), 200)
        self.assertEqual(j["state"], "in_progress")
        self.assertNotIn("response", j)
        assert_status(self, self.complete(tok, 1, 200, body={"fine": True}), 200)

    def test_release_validation(self):
        tok = self.issue(self.op)
        self.claim_ok(tok)
        url = "/v1/tokens/%s/release" % tok
        for body in ({}, {"attempt": "1"}, {"attempt": 1, "colour": "x"}):
            with self.subTest(body=body):
                assert_problem(self, self.client.post(url, body), 400, "invalid_request")
        self.assertEqual(assert_status(self, self.introspect(tok), 200)["state"], "in_progress")


if __name__ == "__main__":
    harness.main()
