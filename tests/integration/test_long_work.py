"""Long work (docs/long-work.md: extend and checkpoint):
the current attempt extends its lease and leaves checkpoints; a takeover's
201 and introspection carry the latest checkpoint; a stale attempt gets 409
lease_lost and writes nothing. For tokens and caller keys alike."""

import os
import sys
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IdemdCase, assert_problem, assert_status, uniq  # noqa: E402


class LongWork(IdemdCase):

    def base(self, kind, op, ident):
        if kind == "token":
            return "/v1/tokens/%s" % ident
        return "/v1/operations/%s/keys/%s" % (op, urllib.parse.quote(ident, safe=""))

    def record(self, kind, lease=30):
        op = self.put_operation(lease_seconds=lease)
        ident = self.issue(op) if kind == "token" else uniq("job")
        return op, ident, self.base(kind, op, ident)

    def post(self, url, action, body):
        return self.client.post(url + "/" + action, body)

    def check_checkpoints_and_takeover(self, kind):
        op, ident, url = self.record(kind)
        j = assert_status(self, self.post(url, "claim", {"request": {"cart": 9}}), 201)
        self.assertNotIn("checkpoint", j)
        r = self.post(url, "checkpoint", {"attempt": 1, "phase": "stock.reserved",
                                          "data": {"reservation": "r-1"}})
        j = assert_status(self, r, 200)
        self.assertEqual(j["checkpoint"], {"phase": "stock.reserved",
                                           "data": {"reservation": "r-1"}, "attempt": 1})
        r = self.post(url, "checkpoint", {"attempt": 1, "phase": "card.charged",
                                          "data": {"charge": "ch_1", "amount": 500}})
        assert_status(self, r, 200)
        j = assert_status(self, self.client.get(url), 200)
        self.assertEqual(j["checkpoint"]["phase"], "card.charged")
        self.assertEqual(j["checkpoint"]["data"], {"charge": "ch_1", "amount": 500})
        # the worker dies: its claim is released; the next attempt resumes
        assert_status(self, self.post(url, "release", {"attempt": 1}), 200)
        j = assert_status(self, self.post(url, "claim", {"request": {"cart": 9}}), 201)
        self.assertEqual(j["attempt"], 2)
        self.assertEqual(j["checkpoint"], {"phase": "card.charged",
                                           "data": {"charge": "ch_1", "amount": 500},
                                           "attempt": 1})
        # the old attempt is fenced off and writes nothing
        assert_problem(self, self.post(url, "checkpoint", {"attempt": 1, "phase": "x"}), 409,
                       "lease_lost")
        assert_problem(self, self.post(url, "extend", {"attempt": 1}), 409, "lease_lost")
        self.assertEqual(self.client.get(url).json["checkpoint"]["phase"], "card.charged")
        assert_status(self, self.post(url, "checkpoint", {"attempt": 2, "phase": "shipped"}), 200)
        j = assert_status(self, self.client.get(url), 200)
        self.assertEqual(j["checkpoint"], {"phase": "shipped", "data": None, "attempt": 2})
        assert_status(self, self.post(url, "complete", {"attempt": 2, "status": 201,
                                                        "body": {"ok": True}}), 200)
        assert_problem(self, self.post(url, "checkpoint", {"attempt": 2, "phase": "late"}), 409,
                       "not_in_progress")
        assert_problem(self, self.post(url, "extend", {"attempt": 2}), 409, "not_in_progress")

    def test_token_checkpoints_and_takeover(self):
        self.check_checkpoints_and_takeover("token")

    def test_key_checkpoints_and_takeover(self):
        self.check_checkpoints_and_takeover("key")

    def test_extend_keeps_duplicates_out_past_the_first_lease(self):
        for kind in ("token", "key"):
            op, ident, url = self.record(kind, lease=2)
            j = assert_status(self, self.post(url, "claim", {}), 201)
            first_end = j["lease_expires_at"]
            assert_problem(self, self.post(url, "extend", {"attempt": 1, "lease_seconds": 3}),
                           400, "invalid_request")
            j = assert_status(self, self.post(url, "extend", {"attempt": 1}), 200)
            self.assertGreaterEqual(j["lease_expires_at"], first_end)
            time.sleep(1.5)
            j = assert_status(self, self.post(url, "extend", {"attempt": 1, "lease_seconds": 2}),
                              200)
            time.sleep(1.0)
            # 2.5 s after the claim: without the extensions its lease would be over
            assert_problem(self, self.post(url, "claim", {}), 409, "request_in_progress")
            assert_status(self, self.post(url, "complete", {"attempt": 1, "status": 200}), 200)

    def test_lease_ran_out_then_takeover_with_checkpoint(self):
        op, ident, url = self.record("key", lease=1)
        assert_status(self, self.post(url, "claim", {}), 201)
        assert_status(self, self.post(url, "checkpoint", {"attempt": 1, "phase": "half"}), 200)
        time.sleep(1.3)
        j = assert_status(self, self.post(url, "claim", {}), 201)
        self.assertEqual((j["attempt"], j["checkpoint"]["phase"]), (2, "half"))
        assert_problem(self, self.post(url, "checkpoint", {"attempt": 1, "phase": "late"}), 409,
                       "lease_lost")

    def test_batch_takeover_carries_the_checkpoint(self):
        # a consumer that claims in batches resumes like a single claim does
        op, ident, url = self.record("key")
        fresh = uniq("job")
        assert_status(self, self.post(url, "claim", {}), 201)
        assert_status(self, self.post(url, "checkpoint", {"attempt": 1, "phase": "charged",
                                                          "data": {"charge": "ch_9"}}), 200)
        assert_status(self, self.post(url, "release", {"attempt": 1}), 200)
        r = self.client.post("/v1/operations/%s/claims" % op,
                             {"items": [{"key": ident}, {"key": fresh}]})
        items = assert_status(self, r, 200)["items"]
        self.assertEqual((items[0]["status"], items[0]["attempt"]), (201, 2), r.describe())
        self.assertEqual(items[0]["checkpoint"], {"phase": "charged", "data": {"charge": "ch_9"},
                                                  "attempt": 1}, r.describe())
        self.assertEqual((items[1]["status"], items[1]["attempt"]), (201, 1), r.describe())
        self.assertNotIn("checkpoint", items[1], r.describe())

    def test_bad_input(self):
        op, ident, url = self.record("key")
        assert_problem(self, self.post(url, "extend", {"attempt": 1}), 404, "record_not_found")
        assert_problem(self, self.post(url, "checkpoint", {"attempt": 1, "phase": "a"}), 404,
                       "record_not_found")
        assert_status(self, self.post(url, "claim", {}), 201)
        for body in [{"attempt": 1, "phase": "Bad"}, {"attempt": 1, "phase": ""},
                     {"attempt": 1, "phase": "p" * 65}, {"attempt": 1},
                     {"attempt": 1, "phase": "a", "data": {"x": "y" * 70000}},
                     {"attempt": 0, "phase": "a"}, {"attempt": 1, "phase": "a", "other": 1}]:
            assert_problem(self, self.post(url, "checkpoint", body), 400, "invalid_request")
        for body in [{"attempt": 1, "lease_seconds": 0}, {"attempt": "1"}, {}]:
            assert_problem(self, self.post(url, "extend", body), 400, "invalid_request")
        j = self.client.get(url).json
        self.assertNotIn("checkpoint", j)


if __name__ == "__main__":
    harness.main()
