"""Records and their audit trail (docs/operations.md, api/openapi.yaml): GET /v1/records/{id} and /v1/records/{id}/events;
every state change leaves one event written with it, naming who did it
(an API key's id or a gateway route, never a secret); events outlive the
swept record for the operation's audit_retention_seconds; tenants never see
each other's records."""

import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IdemdCase, assert_problem, assert_status, psql, uniq  # noqa: E402


class Audit(IdemdCase):
    extra_config = {"sweep_interval_seconds": 1}

    def events(self, rid, client=None):
        r = (client or self.client).get("/v1/records/%s/events" % rid)
        return assert_status(self, r, 200)["events"]

    def test_token_lifecycle_events(self):
        op = self.put_operation()
        r = self.issue_resp(op)
        tok, rid = r.json["token"], r.json["id"]
        self.claim_ok(tok, {"request": {"a": 1}})
        assert_status(self, self.client.post("/v1/tokens/%s/checkpoint" % tok,
                                             {"attempt": 1, "phase": "paid"}), 200)
        assert_status(self, self.client.post("/v1/tokens/%s/extend" % tok, {"attempt": 1}), 200)
        assert_status(self, self.release(tok, 1), 200)
        self.claim_ok(tok, {"request": {"a": 1}}, attempt=2)
        assert_status(self, self.complete(tok, 2, 201, body={"ok": 1}), 200)
        # duplicates write nothing
        self.claim(tok, {"request": {"a": 1}})
        self.claim(tok, {"request": {"a": 9}})
        ev = self.events(rid)
        self.assertEqual([(e["event"], e.get("attempt")) for e in ev],
                         [("claimed", 1), ("checkpoint", 1), ("extended", 1), ("released", 1),
                          ("taken_over", 2), ("completed", 2)])
        self.assertEqual(ev[1]["phase"], "paid")
        self.assertEqual(ev[5]["status"], 201)
        bys = {e["by"] for e in ev}
        self.assertEqual(len(bys), 1, bys)
        self.assertRegex(bys.pop(), r"^api_key:[0-9]+$")
        self.assertEqual([e["at"] for e in ev], sorted(e["at"] for e in ev))
        for e in ev:
            self.assertNotIn(self.api_key, str(e))
        j = assert_status(self, self.client.get("/v1/records/" + rid), 200)
        self.assertEqual((j["id"], j["operation"], j["state"], j["attempt"]),
                         (rid, op, "completed", 2))
        self.assertEqual(j["response"]["body"], {"ok": 1})
        self.assertEqual(j["checkpoint"]["phase"], "paid")
        # another tenant sees nothing
        assert_problem(self, self.other.get("/v1/records/" + rid), 404, "record_not_found")
        assert_problem(self, self.other.get("/v1/records/%s/events" % rid), 404,
                       "record_not_found")

    def test_caller_keys_batches_and_revoke(self):
        op = self.put_operation()
        items = [{"key": uniq("e")} for _ in range(3)]
        j = assert_status(self, self.client.post("/v1/operations/%s/claims" % op,
                                                 {"items": items}), 200)
        ids = [x["id"] for x in j["items"]]
        j = assert_status(self, self.client.post("/v1/operations/%s/completions" % op, {
            "items": [{"key": x["key"], "attempt": 1, "status": 200} for x in items]}), 200)
        for rid in ids:
            self.assertEqual([e["event"] for e in self.events(rid)], ["claimed", "completed"])
            self.assertEqual(assert_status(self, self.client.get("/v1/records/" + rid),
                                           200)["state"], "completed")
        r = self.issue_resp(op)
        assert_status(self, self.revoke(r.json["token"]), 204)
        self.assertEqual([e["event"] for e in self.events(r.json["id"])], ["revoked"])

    def test_bad_ids(self):
        for bad in ["xyz", "0" * 31, "G" * 32, "A" * 32]:
            assert_problem(self, self.client.get("/v1/records/" + bad), 400, "invalid_request")
        assert_problem(self, self.client.get("/v1/records/" + "0" * 32), 404, "record_not_found")
        assert_problem(self, self.anon.get("/v1/records/" + "0" * 32), 401, "unauthorized")

    def test_events_outlive_the_record_then_go(self):
        # The sweeper takes a row a sweep interval after its time, so the
        # life ends 2 to 3 s after the claim on an idle machine, later on a
        # loaded one; the events it told are kept only if their retention
        # has not passed by then (0014). 10 s leaves the sweep 7 s to come.
        op = self.put_operation(token_ttl_seconds=1, retention_seconds=1,
                                audit_retention_seconds=10)
        self.assertEqual(self.client.get("/v1/operations/" + op).json["audit_retention_seconds"],
                         10)
        r = self.issue_resp(op)
        tok, rid = r.json["token"], r.json["id"]
        self.claim_ok(tok)
        assert_status(self, self.complete(tok, 1, 200), 200)
        deadline = time.monotonic() + 8
        while self.client.get("/v1/records/" + rid).status == 200:
            self.assertLess(time.monotonic(), deadline, "the record was never swept")
            time.sleep(0.3)
        # gone for readers at its expiry; the sweeper then ends its life
        # (a fence keeps its attempt: migrations/0011) and says so
        deadline = time.monotonic() + 5
        while [e["event"] for e in self.events(rid)][-1:] != ["expired"]:
            self.assertLess(time.monotonic(), deadline, "no 'expired' event after the sweep")
            time.sleep(0.3)
        ev = self.events(rid)
        self.assertEqual([e["event"] for e in ev], ["claimed", "completed", "expired"])
        self.assertEqual(ev[2]["by"], "sweeper")
        deadline = time.monotonic() + 20
        while self.client.get("/v1/records/%s/events" % rid).status == 200:
            self.assertLess(time.monotonic(), deadline, "the events were never swept")
            time.sleep(0.5)

    def test_a_new_life_of_a_fenced_key_ends_at_its_own_expiry(self):
        # the first life ends and becomes a fence, kept fence_retention_seconds
        # (7 days here); the key's next life, claimed and then abandoned
        # (neither completed nor released, which move the sweep earlier
        # themselves), is swept when its lease ends, not when the fence would
        # have been deleted (migrations/0019)
        op = self.put_operation(token_ttl_seconds=1, lease_seconds=1, retention_seconds=1,
                                audit_retention_seconds=60)
        path = "/v1/operations/%s/keys/%s" % (op, uniq("order"))
        first = assert_status(self, self.client.post(path + "/claim", {}), 201)
        rid = first["id"]
        assert_status(self, self.client.post(path + "/complete", {"attempt": 1, "status": 200}),
                      200)
        for lives in (1, 2):
            deadline = time.monotonic() + 8
            while [e["event"] for e in self.events(rid)].count("expired") < lives:
                self.assertLess(time.monotonic(), deadline,
                                "life %d was not swept at its end" % lives)
                time.sleep(0.3)
            if lives == 1:
                second = assert_status(self, self.client.post(path + "/claim", {}), 201)
                self.assertEqual((second["id"], second["attempt"]), (rid, 2))
        ev = self.events(rid)
        self.assertEqual([(e["event"], e.get("attempt")) for e in ev],
                         [("claimed", 1), ("completed", 1), ("expired", 1),
                          ("claimed", 2), ("expired", 2)])


class HeldSweep(IdemdCase):
    """A trail read while the event sweep has not come (a day apart here,
    as late as a janitor still waiting on a frozen primary would be)."""
    extra_config = {"sweep_interval_seconds": 86400}

    def test_an_event_row_past_its_retention_is_not_shown(self):
        op = self.put_operation()
        r = self.issue_resp(op)
        tok, rid = r.json["token"], r.json["id"]
        self.claim_ok(tok)
        assert_status(self, self.release(tok, 1), 200)
        trail = assert_status(self, self.client.get("/v1/records/%s/events" % rid), 200)
        self.assertEqual([e["event"] for e in trail["events"]], ["claimed", "released"])
        # the release's row reaches the end of its retention; no sweep runs
        row = "token_id = decode('%s', 'hex') AND event = 'released'" % rid
        psql("UPDATE record_events SET expires_at = now() - interval '1 second' WHERE " + row,
             db=self.idemd.db)
        self.assertEqual(psql("SELECT count(*) FROM record_events WHERE " + row,
                              db=self.idemd.db).strip(), "1")
        trail = assert_status(self, self.client.get("/v1/records/%s/events" % rid), 200)
        self.assertEqual([e["event"] for e in trail["events"]], ["claimed"])


class GatewayAudit(IdemdCase):

    @classmethod
    def setUpClass(cls):
        from test_gateway import Upstream
        cls.up = cls.stop_after_class(Upstream())
        cls.extra_config = {"routes": [{
            "method": "POST", "path": "/orders", "tenant": "acme", "operation": "order.create",
            "upstream": "http://127.0.0.1:%d/ok" % cls.up.port}]}
        super().setUpClass()
        cls.define_operation("order.create")

    def test_route_is_named(self):
        r = self.issue_resp("order.create")
        tok, rid = r.json["token"], r.json["id"]
        g = self.anon.request("POST", "/orders", body=b"x=1",
                              headers={"Idempotency-Key": tok, "Content-Type": "text/plain"})
        self.assertEqual(g.status, 201, g.describe())
        ev = self.client.get("/v1/records/%s/events" % rid).json["events"]
        self.assertEqual([(e["event"], e["by"]) for e in ev],
                         [("claimed", "route:POST /orders"), ("completed", "route:POST /orders")])


class Listing(IdemdCase):

    def page(self, query, client=None):
        r = (client or self.client).get("/v1/records?" + query)
        return assert_status(self, r, 200)

    def test_keyset_pages_stable_under_inserts(self):
        op = self.put_operation()
        keys = [uniq("l") for _ in range(45)]
        j = assert_status(self, self.client.post("/v1/operations/%s/claims" % op, {
            "items": [{"key": k, "subject": "user-%d" % (i % 3)} for i, k in enumerate(keys)]}),
            200)
        ids = {x["id"] for x in j["items"]}
        seen, cursor, pages = [], None, 0
        while True:
            q = "operation=%s&limit=10" % op + ("&cursor=" + cursor if cursor else "")
            page = self.page(q)
            pages += 1
            seen += [x["id"] for x in page["records"]]
            # inserts between pages never shift a page
            assert_status(self, self.client.post("/v1/operations/%s/keys/%s/claim"
                                                 % (op, uniq("new")), {}), 201)
            cursor = page["next_cursor"]
            if cursor is None:
                break
        self.assertEqual(len(seen), len(set(seen)), "a record came twice")
        self.assertTrue(ids <= set(seen), "records missing from the pages")
        claimed = [x for x in self.page("operation=%s&limit=500" % op)["records"]]
        stamps = [x["claimed_at"] for x in claimed]
        self.assertEqual(stamps, sorted(stamps, reverse=True))

    def test_cursor_null_on_a_full_last_page(self):
        # next_cursor is null exactly when nothing follows: 20 records in
        # pages of 10 are two pages, the second full and without a cursor
        # (no third, empty request); 21 are three, the last holding one
        op = self.put_operation()
        assert_status(self, self.client.post("/v1/operations/%s/claims" % op, {
            "items": [{"key": uniq("f")} for _ in range(20)]}), 200)
        first = self.page("operation=%s&limit=10" % op)
        self.assertEqual(len(first["records"]), 10)
        self.assertIsInstance(first["next_cursor"], str)
        last = self.page("operation=%s&limit=10&cursor=%s" % (op, first["next_cursor"]))
        self.assertEqual(len(last["records"]), 10)
        self.assertIsNone(last["next_cursor"], "a cursor on the full last page")
        whole = self.page("operation=%s&limit=20" % op)
        self.assertEqual((len(whole["records"]), whole["next_cursor"]), (20, None))
        assert_status(self, self.client.post("/v1/operations/%s/keys/%s/claim"
                                             % (op, uniq("g")), {}), 201)
        j = self.page("operation=%s&limit=20" % op)
        self.assertEqual(len(j["records"]), 20)
        j = self.page("operation=%s&limit=20&cursor=%s" % (op, j["next_cursor"]))
        self.assertEqual((len(j["records"]), j["next_cursor"]), (1, None))

    def test_filters_and_stuck_work(self):
        op = self.put_operation(lease_seconds=1)
        other_op = self.put_operation()
        stuck = uniq("stuck")
        assert_status(self, self.client.post("/v1/operations/%s/keys/%s/claim" % (op, stuck),
                                             {"subject": "u1"}), 201)
        done = uniq("done")
        assert_status(self, self.client.post("/v1/operations/%s/keys/%s/claim" % (op, done),
                                             {"subject": "u2"}), 201)
        assert_status(self, self.client.post("/v1/operations/%s/keys/%s/complete" % (op, done),
                                             {"attempt": 1, "status": 200}), 200)
        assert_status(self, self.client.post("/v1/operations/%s/keys/%s/claim"
                                             % (other_op, uniq("x")), {}), 201)
        time.sleep(1.2)
        j = self.page("operation=%s&state=in_progress&older_than=1" % op)
        self.assertEqual([(x["state"], x["subject"]) for x in j["records"]],
                         [("in_progress", "u1")])
        j = self.page("operation=%s&subject=u2" % op)
        self.assertEqual([x["state"] for x in j["records"]], ["completed"])
        self.assertEqual(self.page("operation=%s" % uniq("none"))["records"], [])
        self.assertEqual(self.page("operation=%s&older_than=3600" % op)["records"], [])
        # another tenant sees none of them
        self.put_operation(op, client=self.other)
        self.assertEqual(self.page("operation=%s" % op, client=self.other)["records"], [])
        for bad in ["limit=0", "limit=501", "limit=x", "state=bogus", "older_than=-1",
                    "cursor=abc", "cursor=1.zz"]:
            assert_problem(self, self.client.get("/v1/records?" + bad), 400, "invalid_request")


if __name__ == "__main__":
    harness.main()
