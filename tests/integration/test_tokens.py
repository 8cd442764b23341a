"""Integration tests: token issue, introspection, revocation, token
integrity (tampering, garbage, scope) and signing-key rotation."""

import base64
import datetime
import os
import re
import struct
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (IdemdCase, Idemd, assert_problem, assert_status, tamper,  # noqa: E402
                     uniq)

TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{1,256}$")


def ts(value):
    """expires_at as unix seconds (accepts an RFC 3339 string or a number)."""
    if isinstance(value, (int, float)):
        return float(value)
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def token_key_id(token):
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    return struct.unpack("<I", raw[2:6])[0]


class Tokens(IdemdCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.op = uniq("order.create")
        r = cls.client.put("/v1/operations/" + cls.op,
                           {"token_ttl_seconds": 600, "retention_seconds": 3600,
                            "lease_seconds": 30})
        assert r.status == 201, r.describe()

    def check_token_obj(self, j, subject, ttl, resp):
        self.assertIsInstance(j, dict, resp.describe())
        self.assertRegex(j.get("token", ""), TOKEN_RE, resp.describe())
        self.assertRegex(j.get("id", ""), r"^[0-9a-f]{32}$", resp.describe())
        self.assertEqual(j.get("operation"), self.op, resp.describe())
        self.assertEqual(j.get("subject"), subject, resp.describe())
        exp = ts(j["expires_at"])
        now = time.time()
        self.assertTrue(now + ttl - 5 <= exp <= now + ttl + 5,
                        "expires_at %r not about now+%ds" % (j["expires_at"], ttl) + resp.describe())
        self.assertNotIn("version", j, "version on a token of an unguarded operation" + resp.describe())

    def test_issue_single(self):
        r = self.issue_resp(self.op, "user-1")
        j = assert_status(self, r, 201)
        self.check_token_obj(j, "user-1", 600, r)

    def test_issue_with_ttl(self):
        r = self.issue_resp(self.op, "user-ttl", ttl_seconds=60)
        j = assert_status(self, r, 201)
        self.check_token_obj(j, "user-ttl", 60, r)

    def test_issue_count(self):
        r = self.issue_resp(self.op, "user-3", count=3)
        j = assert_status(self, r, 201)
        self.assertIsInstance(j.get("tokens"), list, r.describe())
        self.assertEqual(len(j["tokens"]), 3, r.describe())
        for t in j["tokens"]:
            self.check_token_obj(t, "user-3", 600, r)
        self.assertEqual(len({t["token"] for t in j["tokens"]}), 3)
        self.assertEqual(len({t["id"] for t in j["tokens"]}), 3)

    def test_issue_count_100(self):
        r = self.issue_resp(self.op, "user-100", count=100)
        j = assert_status(self, r, 201)
        self.assertEqual(len({t["token"] for t in j["tokens"]}), 100)

    def test_issue_bad_count(self):
        for count in (0, 101, -1, "3", 2.5):
            with self.subTest(count=count):
                r = self.issue_resp(self.op, "u", count=count)
                assert_problem(self, r, 400, "invalid_request")

    def test_issue_ttl_bounds(self):
        for ttl in (601, 0, -1, "60", 10 ** 12):
            with self.subTest(ttl=ttl):
                r = self.issue_resp(self.op, "u", ttl_seconds=ttl)
                assert_problem(self, r, 400, "invalid_request")
        assert_status(self, self.issue_resp(self.op, "u", ttl_seconds=600), 201)

    def test_issue_unknown_operation(self):
        r = self.issue_resp(uniq("no.such.op"), "u")
        assert_problem(self, r, 422, "operation_unknown")

    def test_issue_subject_bounds(self):
        for subject in ("", "s" * 129, 42, None):
            with self.subTest(subject=str(subject)[:10]):
                r = self.client.post("/v1/tokens", {"operation": self.op, "subject": subject})
                assert_problem(self, r, 400, "invalid_request")
        r = self.issue_resp(self.op, "s" * 128)
        j = assert_status(self, r, 201)
        self.assertEqual(j["subject"], "s" * 128)
        # 128 bytes of UTF-8 (64 two-byte characters) is fine, 129 bytes is not
        assert_status(self, self.issue_resp(self.op, "\u00e9" * 64), 201)
        assert_problem(self, self.issue_resp(self.op, "\u00e9" * 64 + "x"), 400, "invalid_request")

    def test_issue_missing_fields_and_unknown_field(self):
        for body in ({"subject": "u"}, {"operation": self.op},
                     {"operation": self.op, "subject": "u", "colour": "blue"}):
            with self.subTest(body=body):
                assert_problem(self, self.client.post("/v1/tokens", body), 400, "invalid_request")

    # ---- introspection

    def test_introspect_lifecycle(self):
        tok = self.issue(self.op, "user-life")
        r = self.introspect(tok)
        j = assert_status(self, r, 200)
        self.assertEqual(j.get("state"), "issued", r.describe())
        self.assertEqual(j.get("operation"), self.op)
        self.assertEqual(j.get("subject"), "user-life")
        self.assertEqual(j.get("attempt"), 0, r.describe())
        self.assertRegex(j.get("id", ""), r"^[0-9a-f]{32}$")
        self.assertIn("expires_at", j)
        self.assertNotIn("response", j, r.describe())

        self.claim_ok(tok)
        r = self.introspect(tok)
        j = assert_status(self, r, 200)
        self.assertEqual(j.get("state"), "in_progress", r.describe())
        self.assertEqual(j.get("attempt"), 1, r.describe())
        self.assertNotIn("response", j, r.describe())

        assert_status(self, self.complete(tok, 1, 201, {"Location": "/orders/7"}, {"order": 7}), 200)
        r = self.introspect(tok)
        j = assert_status(self, r, 200)
        self.assertEqual(j.get("state"), "completed", r.describe())
        self.assertEqual(j.get("attempt"), 1, r.describe())
        resp = j.get("response")
        self.assertIsInstance(resp, dict, r.describe())
        self.assertEqual(resp.get("status"), 201, r.describe())
        self.assertEqual(resp.get("body"), {"order": 7}, r.describe())
        hdrs = {k.lower(): v for k, v in (resp.get("headers") or {}).items()}
        self.assertEqual(hdrs.get("location"), "/orders/7", r.describe())

    def test_introspect_revoked(self):
        tok = self.issue(self.op)
        self.assertEqual(self.revoke(tok).status, 204)
        r = self.introspect(tok)
        self.assertEqual(assert_status(self, r, 200).get("state"), "revoked", r.describe())

    def test_ttl_is_a_lower_bound(self):
        # expires_at is whole seconds rounded up: a token lives at least its TTL
        for _ in range(5):
            t0 = time.time()
            r = self.client.post("/v1/tokens", {"operation": self.op, "subject": "u",
                                                "ttl_seconds": 1})
            t1 = time.time()
            exp = datetime.datetime.fromisoformat(
                assert_status(self, r, 201)["expires_at"].replace("Z", "+00:00")).timestamp()
            self.assertGreaterEqual(exp, t0 + 1 - 0.002, r.describe())
            self.assertLess(exp, t1 + 2, r.describe())
            self.claim_ok(r.json["token"])
            time.sleep(0.137)

    def test_introspect_expired(self):
        tok = self.issue(self.op, ttl_seconds=1)
        time.sleep(2.1)
        r = self.introspect(tok)
        self.assertEqual(assert_status(self, r, 200).get("state"), "expired", r.describe())

    # ---- revocation

    def test_revoke_idempotent(self):
        tok = self.issue(self.op)
        r = self.revoke(tok)
        self.assertEqual(r.status, 204, r.describe())
        self.assertEqual(r.body, b"", r.describe())
        r = self.revoke(tok)
        self.assertEqual(r.status, 204, r.describe())
        assert_problem(self, self.claim(tok), 410, "token_revoked")

    def test_revoke_in_progress_and_completed_409(self):
        tok = self.issue(self.op)
        self.claim_ok(tok)
        assert_problem(self, self.revoke(tok), 409, "token_in_use")
        assert_status(self, self.complete(tok, 1, 200, body={"ok": 1}), 200)
        assert_problem(self, self.revoke(tok), 409, "token_in_use")
        # still replayable
        r = self.claim(tok)
        assert_status(self, r, 200)

    def test_revoke_after_release(self):
        tok = self.issue(self.op)
        self.claim_ok(tok)
        assert_status(self, self.release(tok, 1), 200)
        self.assertEqual(self.revoke(tok).status, 204)
        assert_problem(self, self.claim(tok), 410, "token_revoked")

    # ---- integrity

    def test_tampered_token_403(self):
        tok = self.issue(self.op, "user-tamper")
        n = len(tok)
        # index 24 lies in the random id, n-5 in the MAC tag (never the last
        # character, whose low bits are padding).
        for idx in (24, n - 5):
            bad = tamper(tok, idx)
            with self.subTest(index=idx):
                assert_problem(self, self.introspect(bad), 403, "token_invalid")
                assert_problem(self, self.claim(bad), 403, "token_invalid")
                assert_problem(self, self.revoke(bad), 403, "token_invalid")
                assert_problem(self, self.complete(bad, 1, 200, body={}), 403, "token_invalid")
        # the genuine token is unaffected
        assert_status(self, self.claim(tok), 201)

    def test_garbage_token_400(self):
        tok = self.issue(self.op)
        for bad in ("abc", "not-a-token", "%21%21%21%21", "A" * 300, tok[:-10], tok + "AAAA"):
            with self.subTest(token=bad[:20]):
                assert_problem(self, self.introspect(bad), 400, "token_malformed")
                assert_problem(self, self.claim(bad), 400, "token_malformed")
                assert_problem(self, self.revoke(bad), 400, "token_malformed")

    def test_token_with_encoded_nul_suffix_400(self):
        tok = self.issue(self.op)
        for suffix in ("%00", "%00xyz"):
            with self.subTest(suffix=suffix):
                assert_problem(self, self.introspect(tok + suffix), 400, "token_malformed")
                assert_problem(self, self.claim(tok + suffix), 400, "token_malformed")
                assert_problem(self, self.revoke(tok + suffix), 400, "token_malformed")
        self.assertEqual(assert_status(self, self.introspect(tok), 200)["state"], "issued")

    def test_other_tenants_token_403(self):
        tok = self.issue(self.op)
        assert_problem(self, self.introspect(tok, client=self.other), 403, "token_scope_mismatch")
        assert_problem(self, self.claim(tok, client=self.other), 403, "token_scope_mismatch")
        assert_problem(self, self.revoke(tok, client=self.other), 403, "token_scope_mismatch")
        self.claim_ok(tok)
        assert_problem(self, self.complete(tok, 1, 200, body={}, client=self.other),
                       403, "token_scope_mismatch")
        assert_problem(self, self.release(tok, 1, client=self.other), 403, "token_scope_mismatch")
        # nothing happened to it
        j = assert_status(self, self.introspect(tok), 200)
        self.assertEqual(j["state"], "in_progress")

    def test_token_carries_version(self):
        op = self.put_operation(version_key="orders:{subject}")
        subj = uniq("user")
        r = self.issue_resp(op, subj)
        self.assertEqual(assert_status(self, r, 201).get("version"), 0, r.describe())
        r = self.client.post("/v1/versions/orders:" + subj, headers={"If-Match": '"0"'})
        assert_status(self, r, 200)
        r = self.issue_resp(op, subj)
        self.assertEqual(assert_status(self, r, 201).get("version"), 1, r.describe())
        r = self.issue_resp(op, subj, count=2)
        for t in assert_status(self, r, 201)["tokens"]:
            self.assertEqual(t.get("version"), 1, r.describe())


class KeyRotation(unittest.TestCase):
    def setUp(self):
        self.idemd = Idemd()
        self.idemd.migrate()
        self.key = self.idemd.tenant_create("rot")

    def tearDown(self):
        for s in self.idemd.servers:
            s.stop()
        self.idemd.cleanup()

    def test_old_tokens_verify_after_rotation(self):
        srv = self.idemd.start()
        c = srv.client(self.key)
        assert_status(self, c.put("/v1/operations/rot.op", harness.DEFAULT_POLICY), 201)
        old = assert_status(self, c.post("/v1/tokens", {"operation": "rot.op", "subject": "u"}), 201)
        old2 = assert_status(self, c.post("/v1/tokens", {"operation": "rot.op", "subject": "u"}), 201)
        new_id = self.idemd.keys_rotate()
        self.assertNotEqual(token_key_id(old["token"]), new_id)
        self.assertEqual(srv.stop(), 0)

        srv = self.idemd.start()
        c = srv.client(self.key)
        new = assert_status(self, c.post("/v1/tokens", {"operation": "rot.op", "subject": "u"}), 201)
        self.assertEqual(token_key_id(new["token"]), new_id, "new tokens not signed with the new key")
        for t in (old, new):
            r = c.get("/v1/tokens/" + t["token"])
            self.assertEqual(assert_status(self, r, 200)["state"], "issued")
            assert_status(self, c.post("/v1/tokens/%s/claim" % t["token"], {}), 201)
        r = c.get("/v1/tokens/" + tamper(old2["token"], len(old2["token"]) - 5))
        assert_problem(self, r, 403, "token_invalid")


if __name__ == "__main__":
    harness.main()
