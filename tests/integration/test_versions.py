"""Integration tests: version counters (GET, If-Match bump, 412/428, bumps
by claims, per-tenant isolation)."""

import os
import sys
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IdemdCase, assert_problem, assert_status, uniq  # noqa: E402


class Versions(IdemdCase):
    def get(self, key, client=None):
        return (client or self.client).get("/v1/versions/" + key)

    def bump(self, key, if_match=None, client=None):
        h = {"If-Match": if_match} if if_match is not None else {}
        return (client or self.client).post("/v1/versions/" + key, headers=h)

    def test_unknown_key_is_zero(self):
        key = uniq("orders") + ":user-42"
        r = self.get(key)
        j = assert_status(self, r, 200)
        self.assertEqual(j, {"key": key, "version": 0}, r.describe())
        self.assertEqual(r.header("etag"), '"0"', r.describe())

    def test_bump_with_if_match(self):
        key = uniq("orders") + ":u1"
        r = self.bump(key, '"0"')
        j = assert_status(self, r, 200)
        self.assertEqual(j.get("version"), 1, r.describe())
        r = self.get(key)
        self.assertEqual(assert_status(self, r, 200)["version"], 1)
        self.assertEqual(r.header("etag"), '"1"', r.describe())
        r = self.bump(key, '"1"')
        self.assertEqual(assert_status(self, r, 200).get("version"), 2, r.describe())

    def test_stale_if_match_412(self):
        key = uniq("orders") + ":u2"
        assert_status(self, self.bump(key, '"0"'), 200)
        r = self.bump(key, '"0"')
        assert_problem(self, r, 412, "version_mismatch")
        self.assertEqual(r.header("etag"), '"1"', r.describe())
        r = self.bump(key, '"5"')
        assert_problem(self, r, 412, "version_mismatch")
        self.assertEqual(self.version(key), 1)

    def test_missing_if_match_428(self):
        key = uniq("orders") + ":u3"
        assert_problem(self, self.bump(key), 428, "version_required")
        self.assertEqual(self.version(key), 0)

    def test_bump_body_is_empty_or_nothing(self):
        # the bump takes no body; one sent is an empty object (the
        # document's requestBody), a member is an unknown field
        key = uniq("orders") + ":u5"
        r = self.client.post("/v1/versions/" + key, {"version": 7}, headers={"If-Match": '"0"'})
        assert_problem(self, r, 400, "invalid_request")
        self.assertIn("version", r.json["detail"], r.describe())
        assert_problem(self, self.client.post("/v1/versions/" + key, [],
                                              headers={"If-Match": '"0"'}), 400, "invalid_request")
        self.assertEqual(self.version(key), 0)
        r = self.client.post("/v1/versions/" + key, {}, headers={"If-Match": '"0"'})
        self.assertEqual(assert_status(self, r, 200)["version"], 1)

    def test_if_match_limits(self):
        # exactly the IfMatch pattern: no leading zeros, at most 2^63-1
        key = uniq("orders") + ":u6"
        for im in ('"00"', '"01"', '"9223372036854775808"', '"99999999999999999999"'):
            with self.subTest(if_match=im):
                assert_problem(self, self.bump(key, im), 400, "invalid_request")
        for im in ('"9223372036854775807"', 'W/"0"', 'W/"9223372036854775807"'):
            with self.subTest(if_match=im):
                assert_problem(self, self.bump(key, im), 412, "version_mismatch")
        assert_status(self, self.bump(key, '"0"'), 200)

    def test_malformed_if_match(self):
        key = uniq("orders") + ":u4"
        for im in ("0", '"abc"', '"-1"', 'w/"0"', 'W/"x"'):
            with self.subTest(if_match=im):
                assert_problem(self, self.bump(key, im), 400, "invalid_request")
        self.assertEqual(self.version(key), 0)

    def test_weak_if_match_412(self):
        # RFC 9110: If-Match uses strong comparison, which never matches a
        # weak tag, even one naming the current version
        key = uniq("orders") + ":u5"
        for im in ('W/"0"', 'W/"1"'):
            with self.subTest(if_match=im):
                r = self.bump(key, im)
                assert_problem(self, r, 412, "version_mismatch")
                self.assertEqual(r.header("etag"), '"0"', r.describe())
        self.assertEqual(self.version(key), 0)
        prefix = uniq("weak")
        op = self.put_operation(version_key=prefix + ":{subject}")
        tok = self.issue(op, "u1")
        r = self.claim(tok, if_match='W/"0"')
        assert_problem(self, r, 412, "version_mismatch")
        self.assertEqual(r.header("etag"), '"0"', r.describe())
        self.assertEqual(self.version(prefix + ":u1"), 0)
        self.claim_ok(tok, if_match='"0"')
        self.assertEqual(self.version(prefix + ":u1"), 1)

    def test_claims_bump_counter(self):
        prefix = uniq("stock")
        op = self.put_operation(version_key=prefix + ":{subject}")
        subj = uniq("u")
        key = "%s:%s" % (prefix, subj)
        assert_status(self, self.bump(key, '"0"'), 200)
        assert_status(self, self.bump(key, '"1"'), 200)
        v = self.version(key)
        self.assertEqual(v, 2)
        r1 = self.issue_resp(op, subj)
        r2 = self.issue_resp(op, subj)
        t1 = assert_status(self, r1, 201)
        t2 = assert_status(self, r2, 201)
        self.assertEqual(t1.get("version"), v, r1.describe())
        self.assertEqual(t2.get("version"), v, r2.describe())
        self.claim_ok(t1["token"])
        self.assertEqual(self.version(key), v + 1)
        r = self.claim(t2["token"])
        assert_problem(self, r, 412, "version_mismatch")
        self.assertEqual(r.header("etag"), '"%d"' % (v + 1), r.describe())
        self.assertEqual(self.version(key), v + 1)

    def test_fixed_key_shared_across_subjects(self):
        key = uniq("catalog")
        op = self.put_operation(version_key=key)
        ta = self.issue(op, "alice")
        tb = self.issue(op, "bob")
        self.claim_ok(ta)
        self.assertEqual(self.version(key), 1)
        assert_problem(self, self.claim(tb), 412, "version_mismatch")

    def test_counters_per_tenant(self):
        key = uniq("orders") + ":shared"
        assert_status(self, self.bump(key, '"0"'), 200)
        assert_status(self, self.bump(key, '"1"'), 200)
        r = self.get(key, client=self.other)
        self.assertEqual(assert_status(self, r, 200)["version"], 0, r.describe())
        assert_problem(self, self.bump(key, '"2"', client=self.other), 412, "version_mismatch")
        assert_status(self, self.bump(key, '"0"', client=self.other), 200)
        self.assertEqual(self.version(key), 2)
        self.assertEqual(self.version(key, client=self.other), 1)

    def test_key_length_and_charset(self):
        ok = uniq("k") + "k" * 490
        ok = ok + "x" * (512 - len(ok))
        self.assertEqual(len(ok), 512)
        self.assertEqual(self.version(ok), 0)
        for bad in (ok + "x", "a%20b", "caf%C3%A9", "abc%00def", "abc%0Adef"):
            with self.subTest(key=bad[:16]):
                assert_problem(self, self.get(bad), 400, "invalid_request")
                assert_problem(self, self.bump(bad, '"0"'), 400, "invalid_request")

    def test_counter_of_any_issuable_subject_is_addressable(self):
        # Whatever subject a token can be issued for, the counter its claim
        # bumps can be read and bumped by its key (percent-encoded in the path).
        prefix = uniq("orders")
        op = self.put_operation(version_key=prefix + ":{subject}")
        for subj in ("team/42", "a?b#c", "50%off", "x+y", "a%2Fb"):
            with self.subTest(subject=subj):
                r = self.issue_resp(op, subj)
                if r.status == 400:
                    assert_problem(self, r, 400, "invalid_request")
                    continue
                tok = assert_status(self, r, 201)["token"]
                self.claim_ok(tok)
                path = "/v1/versions/" + urllib.parse.quote("%s:%s" % (prefix, subj), safe=":")
                r = self.client.get(path)
                j = assert_status(self, r, 200)
                self.assertEqual(j, {"key": "%s:%s" % (prefix, subj), "version": 1}, r.describe())
                r = self.client.post(path, headers={"If-Match": '"1"'})
                self.assertEqual(assert_status(self, r, 200).get("version"), 2, r.describe())

    def test_versions_need_api_key(self):
        assert_problem(self, self.anon.get("/v1/versions/x"), 401, "unauthorized")
        assert_problem(self, self.bump("x", '"0"', client=self.anon), 401, "unauthorized")


if __name__ == "__main__":
    harness.main()
