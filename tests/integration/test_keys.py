"""Caller keys on the direct API (PRODUCT.md part two, "Caller keys"):
claim, complete, release and introspection of /v1/operations/{op}/keys/{key},
with the outcome table of tokens, a key's scope (tenant and operation),
invalid keys, records never claimed, subjects and version counters, and one
execution under concurrent claims from two idemd processes."""

import os
import sys
import threading
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Client, IdemdCase, assert_problem, assert_status, uniq)  # noqa: E402


def path(op, key, action=None):
    p = "/v1/operations/%s/keys/%s" % (op, urllib.parse.quote(key, safe=""))
    return p + "/" + action if action else p


class CallerKeys(IdemdCase):

    def kclaim(self, op, key, body=None, client=None, headers=None):
        return (client or self.client).post(path(op, key, "claim"), body or {}, headers=headers)

    def kcomplete(self, op, key, attempt, status=201, body=None, headers=None, client=None):
        b = {"attempt": attempt, "status": status, "body": body if body is not None else {}}
        if headers is not None:
            b["headers"] = headers
        return (client or self.client).post(path(op, key, "complete"), b)

    def test_claim_complete_replay(self):
        op = self.put_operation()
        key = "evt_" + uniq("k")
        r = self.kclaim(op, key, {"request": {"amount": 5}})
        j = assert_status(self, r, 201)
        self.assertEqual(j["state"], "in_progress")
        self.assertEqual(j["attempt"], 1)
        self.assertRegex(j["id"], r"^[0-9a-f]{32}$")
        rid = j["id"]
        assert_problem(self, self.kclaim(op, key, {"request": {"amount": 5}}), 409,
                       "request_in_progress")
        r = self.kcomplete(op, key, 1, 201, {"order": 7}, {"Location": "/o/7"})
        assert_status(self, r, 200)
        for _ in range(2):
            r = self.kclaim(op, key, {"request": {"amount": 5}})
            j = assert_status(self, r, 200)
            self.assertEqual(r.header("idempotent-replayed"), "true", r.describe())
            self.assertEqual(j["id"], rid)
            self.assertEqual(j["response"], {"status": 201, "headers": {"Location": "/o/7"},
                                             "body": {"order": 7}})
        assert_problem(self, self.kclaim(op, key, {"request": {"amount": 6}}), 422,
                       "fingerprint_mismatch")
        r = self.client.get(path(op, key))
        j = assert_status(self, r, 200)
        self.assertEqual((j["id"], j["operation"], j["key"], j["state"], j["attempt"]),
                         (rid, op, key, "completed", 1))
        self.assertEqual(j["response"]["body"], {"order": 7})
        self.assertNotIn("subject", j)

    def test_scope_is_tenant_and_operation(self):
        op1, op2 = self.put_operation(), self.put_operation()
        self.put_operation(op1, client=self.other)
        key = "order:user-42:" + uniq("cart")
        a = assert_status(self, self.kclaim(op1, key), 201)
        b = assert_status(self, self.kclaim(op2, key), 201)
        c = assert_status(self, self.kclaim(op1, key, client=self.other), 201)
        self.assertNotEqual(a["id"], b["id"])
        self.assertEqual(c["attempt"], 1)
        # the other tenant's record is not visible
        assert_status(self, self.kcomplete(op1, key, 1, client=self.other), 200)
        assert_problem(self, self.kclaim(op1, key), 409, "request_in_progress")

    def test_invalid_keys(self):
        op = self.put_operation()
        for bad in ["a b", "x" * 256, "caf\u00e9", "tab\there", "nul\x00x"]:
            r = self.kclaim(op, bad)
            assert_problem(self, r, 400, "idempotency_key_invalid")
        self.assertEqual(self.kclaim(op, "x" * 255).status, 201)
        # '/' and '%' travel percent-encoded
        self.assertEqual(self.kclaim(op, "a/b%c?d#e").status, 201)
        assert_status(self, self.client.get(path(op, "a/b%c?d#e")), 200)

    def test_never_claimed_is_404(self):
        op = self.put_operation()
        key = uniq("k")
        assert_problem(self, self.client.get(path(op, key)), 404, "record_not_found")
        assert_problem(self, self.kcomplete(op, key, 1), 404, "record_not_found")
        r = self.client.post(path(op, key, "release"), {"attempt": 1})
        assert_problem(self, r, 404, "record_not_found")
        # claimed, then completed: complete again of another attempt is 409
        assert_status(self, self.kclaim(op, key), 201)
        assert_status(self, self.kcomplete(op, key, 1), 200)
        assert_problem(self, self.kcomplete(op, key, 2), 409, "lease_lost")

    def test_unknown_operation(self):
        assert_problem(self, self.kclaim(uniq("nope"), "k1"), 422, "operation_unknown")
        assert_problem(self, self.kclaim("a", "k1", client=self.anon), 401, "unauthorized")

    def test_release_then_takeover(self):
        op = self.put_operation()
        key = uniq("k")
        assert_status(self, self.kclaim(op, key), 201)
        r = self.client.post(path(op, key, "release"), {"attempt": 1})
        assert_status(self, r, 200)
        j = assert_status(self, self.kclaim(op, key), 201)
        self.assertEqual(j["attempt"], 2)
        assert_problem(self, self.kcomplete(op, key, 1), 409, "lease_lost")
        assert_status(self, self.kcomplete(op, key, 2), 200)

    def test_subject_fills_the_version_key(self):
        op = self.put_operation(version_key="carts:{subject}")
        key = uniq("k")
        assert_problem(self, self.kclaim(op, key), 400, "invalid_request")
        user = uniq("user")
        before = self.version("carts:" + user)
        j = assert_status(self, self.kclaim(op, key, {"subject": user}), 201)
        self.assertEqual(self.version("carts:" + user), before + 1)
        r = self.client.get(path(op, key))
        self.assertEqual(assert_status(self, r, 200)["subject"], user)
        # a stale If-Match on another key of the same counter
        r = self.kclaim(op, uniq("k"), {"subject": user}, headers={"If-Match": '"%d"' % before})
        assert_problem(self, r, 412, "version_mismatch")
        self.assertEqual(r.header("etag"), '"%d"' % (before + 1))
        self.assertEqual(j["attempt"], 1)

    def test_concurrent_claims_two_processes_one_winner(self):
        op = self.put_operation()
        key = uniq("k")
        second = self.idemd.start()
        clients = [Client(self.server.port, self.api_key), Client(second.port, self.api_key)]
        statuses = []
        lock = threading.Lock()

        def worker(i):
            for _ in range(25):
                s = self.kclaim(op, key, client=clients[i % 2]).status
                with lock:
                    statuses.append(s)

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(len(statuses), 200)
        self.assertEqual(statuses.count(201), 1, sorted(set(statuses)))
        self.assertEqual(statuses.count(409), 199)


if __name__ == "__main__":
    harness.main()
