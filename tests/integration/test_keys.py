"""Caller keys on the direct API (docs/service-calls.md):
claim, complete, release and introspection of /v1/operations/{op}/keys/{key},
with the outcome table of tokens, a key's scope (tenant and operation),
invalid keys, records never claimed, subjects and version counters, and one
execution under concurrent claims from two idemd processes."""

import os
import random
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

    def test_complete_racing_the_first_claim(self):
        """A complete of a key never claimed, sent at the moment of its
        first claim, is ordered before the claim (404, the claim gets the
        key) or after it (it completes attempt 1): never a third answer.
        idemd's complete reads the record twice; a claim committed between
        the two reads once made it answer 409 not_in_progress."""
        op = self.put_operation()
        second = self.idemd.start()
        other = Client(second.port, self.api_key)
        seen = {}
        for _ in range(150):
            key = uniq("k")
            out = {}
            barrier = threading.Barrier(2)

            def go(name, call):
                barrier.wait(10)
                out[name] = call()
            ts = [threading.Thread(target=go, args=("claim", lambda: self.kclaim(op, key))),
                  threading.Thread(target=go, args=("complete", lambda: self.kcomplete(
                      op, key, 1, client=other)))]
            for t in ts:
                t.start()
            for t in ts:
                t.join(30)
            claim, complete = out["claim"], out["complete"]
            assert_status(self, claim, 201)
            if complete.status == 200:
                seen["after"] = seen.get("after", 0) + 1
                state = "completed"
            else:
                assert_problem(self, complete, 404, "record_not_found")
                seen["before"] = seen.get("before", 0) + 1
                state = "in_progress"
            self.assertEqual(assert_status(self, self.client.get(path(op, key)), 200)["state"],
                             state)
        self.assertTrue(seen, seen)

    def test_unknown_operation(self):
        assert_problem(self, self.kclaim(uniq("nope"), "k1"), 422, "operation_unknown")
        assert_problem(self, self.kclaim("a", "k1", client=self.anon), 401, "unauthorized")

    def test_json_edge_values(self):
        # what the document's schemas accept, idemd accepts: "\u0000" in
        # request and body (AnyJson), 30.0 as an integer; what they bound
        # (numbers past 64 bits, NUL elsewhere) is 400, never a 5xx
        op = self.put_operation()
        key = uniq("nul")
        req = '{"request":{"note":"a\\u0000b","n":[1.5,-0.0,1e-400]}}'
        j = assert_status(self, self.kclaim(op, key, req), 201)
        self.assertEqual(j["attempt"], 1)
        done = '{"attempt":1.0,"status":201.0,"body":{"n":"x\\u0000y"}}'
        j = assert_status(self, self.client.post(path(op, key, "complete"), done), 200)
        self.assertEqual(j["response"]["body"], {"n": "x\u0000y"})
        r = self.kclaim(op, key, req)
        self.assertEqual(assert_status(self, r, 200)["response"]["body"], {"n": "x\u0000y"})
        assert_problem(self, self.kclaim(op, key, '{"request":{"note":"a"}}'), 422,
                       "fingerprint_mismatch")
        j = assert_status(self, self.client.post("/v1/tokens", '{"operation":"%s","subject":"u",'
                                                 '"ttl_seconds":30.0,"count":2.0}' % op), 201)
        self.assertEqual(len(j["tokens"]), 2)
        refused = ['{"request":1e400}', '{"request":[18446744073709551616]}',
                   '{"request":{"n":-1e400}}', '{"fingerprint":"a\\u0000"}',
                   '{"subject":"u\\u0000"}', '{"request":1,"x\\u0000":2}']
        for body in refused:
            with self.subTest(body=body):
                assert_problem(self, self.kclaim(op, uniq("r"), body), 400, "invalid_request")
        for body in ('{"attempt":1.5,"status":200}', '{"attempt":1,"status":200.5}'):
            with self.subTest(body=body):
                assert_problem(self, self.client.post(path(op, uniq("c"), "complete"), body),
                               400, "invalid_request")
        k2 = uniq("cp")
        assert_status(self, self.kclaim(op, k2), 201)
        r = self.client.post(path(op, k2, "checkpoint"),
                             '{"attempt":1,"phase":"p","data":{"s":"\\u0000"}}')
        assert_problem(self, r, 400, "invalid_request")
        r = self.client.post(path(op, k2, "checkpoint"), '{"attempt":1.0,"phase":"p","data":[2.0]}')
        assert_status(self, r, 200)

    def test_malformed_if_match_without_a_counter(self):
        # the IfMatch parameter's pattern holds on every claim, whether or
        # not the operation guards a counter (it was ignored without one)
        op = self.put_operation()
        for im in ("YN4#9xJ@o}]", '"00"', "7"):
            with self.subTest(if_match=im):
                assert_problem(self, self.kclaim(op, uniq("m"), headers={"If-Match": im}), 400,
                               "invalid_request")
        key = uniq("m")
        assert_status(self, self.kclaim(op, key, headers={"If-Match": '"3"'}), 201)
        # a replay wins over a version check, not over a malformed header
        assert_status(self, self.kcomplete(op, key, 1), 200)
        assert_status(self, self.kclaim(op, key), 200)
        assert_problem(self, self.kclaim(op, key, headers={"If-Match": "u"}), 400,
                       "invalid_request")
        assert_status(self, self.kclaim(op, key, headers={"If-Match": '"9"'}), 200)

    def test_invalid_operation_name(self):
        # One rule on every path that names an operation: a name outside
        # [a-z0-9._-]{1,64} is 400 invalid_request (the OperationNamePath
        # parameter), before anything else about it; 422 operation_unknown is
        # for a well-formed name the tenant has not registered.
        bad = ["Bad", "a" * 65, "a%20b", "a%00b", "%C3%A9"]
        for name in bad:
            for method, p, body in (
                    ("POST", path(name, "k1", "claim"), {}),
                    ("POST", path(name, "k1", "complete"), {"attempt": 1, "status": 200}),
                    ("POST", path(name, "k1", "release"), {"attempt": 1}),
                    ("POST", path(name, "k1", "extend"), {"attempt": 1}),
                    ("POST", path(name, "k1", "checkpoint"), {"attempt": 1, "phase": "p"}),
                    ("GET", path(name, "k1"), None),
                    ("POST", "/v1/operations/%s/claims" % name, {"items": [{"key": "a"}]}),
                    ("POST", "/v1/operations/%s/completions" % name,
                     {"items": [{"key": "a", "attempt": 1, "status": 200}]}),
                    ("GET", "/v1/operations/" + name, None),
                    ("PUT", "/v1/operations/" + name, dict(harness.DEFAULT_POLICY))):
                with self.subTest(name=name, method=method, path=p):
                    r = self.client.request(method, p, body)
                    assert_problem(self, r, 400, "invalid_request")
            # the invalid key comes second: the name is judged first
            assert_problem(self, self.kclaim(name, " "), 400, "invalid_request")
        # and a token's operation: the IssueRequest schema's pattern
        for name in ("Bad", "a b", "a" * 65):
            with self.subTest(issue=name):
                r = self.client.post("/v1/tokens", {"operation": name, "subject": "u"})
                assert_problem(self, r, 400, "invalid_request")

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
        # the refused claim left no "expired" event for the row it never kept
        self.assertEqual(harness.psql("SELECT count(*) FROM record_events WHERE event = 'expired'",
                                      db=self.idemd.db).strip(), "0")

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


def metric(client, name):
    r = client.get("/metrics")
    for line in r.body.decode().splitlines():
        if line.startswith(name + " "):
            return int(float(line.split()[1]))
    raise AssertionError("no metric %s" % name)


class Batches(IdemdCase):

    def claims(self, op, items, client=None):
        return (client or self.client).post("/v1/operations/%s/claims" % op, {"items": items})

    def completions(self, op, items, client=None):
        return (client or self.client).post("/v1/operations/%s/completions" % op,
                                            {"items": items})

    def single(self, op, item):
        body = {k: v for k, v in item.items() if k != "key"}
        return self.client.post(path(op, item["key"], "claim"), body)

    def test_mixed_batch_in_order_each_as_if_alone(self):
        op = self.put_operation()
        done, busy, fresh = uniq("done"), uniq("busy"), uniq("fresh")
        assert_status(self, self.single(op, {"key": done, "request": {"n": 1}}), 201)
        assert_status(self, self.client.post(path(op, done, "complete"),
                                             {"attempt": 1, "status": 201, "body": {"ok": 1}}), 200)
        assert_status(self, self.single(op, {"key": busy}), 201)
        items = [{"key": fresh, "request": {"n": 3}},
                 {"key": "bad key"},
                 {"key": done, "request": {"n": 1}},
                 {"key": busy},
                 {"key": done + "x", "fingerprint": "f", "unknown": 1},
                 {"key": uniq("k"), "subject": ""}]
        r = self.claims(op, items)
        j = assert_status(self, r, 200)
        got = [(x["key"], x["status"], x.get("code")) for x in j["items"]]
        self.assertEqual(got, [(fresh, 201, None), ("bad key", 400, "idempotency_key_invalid"),
                               (done, 200, None), (busy, 409, "request_in_progress"),
                               (done + "x", 400, "invalid_request"),
                               (items[5]["key"], 400, "invalid_request")])
        self.assertEqual(j["items"][0]["attempt"], 1)
        self.assertRegex(j["items"][0]["id"], r"^[0-9a-f]{32}$")
        self.assertEqual(j["items"][2]["response"]["body"], {"ok": 1})
        # a different request for a completed key, as a single claim would say
        j = assert_status(self, self.claims(op, [{"key": done, "request": {"n": 2}}]), 200)
        self.assertEqual(j["items"][0]["status"], 422)
        self.assertEqual(j["items"][0]["code"], "fingerprint_mismatch")
        # and each answer is what a single claim now answers
        for item in items[:1] + items[2:4]:
            self.assertIn(self.single(op, item).status, (200, 409), item)

    def test_batch_refused_as_a_whole(self):
        op = self.put_operation()
        k = uniq("k")
        for body in [{"items": []}, {"items": [{"key": uniq("k")}] * 1},
                     {"items": [{"key": k}, {"key": k}]},
                     {"items": [{"key": uniq("k%d" % i)} for i in range(501)]},
                     {"items": "x"}, {"items": [], "other": 1}]:
            r = self.client.post("/v1/operations/%s/claims" % op, body)
            if body["items"] and isinstance(body["items"], list) and \
                    len(body["items"]) == 1 and len(body) == 1:
                assert_status(self, r, 200)
                continue
            assert_problem(self, r, 400, "invalid_request")
        assert_problem(self, self.claims(uniq("nope"), [{"key": "a"}]), 422, "operation_unknown")

    def test_one_round_trip_per_batch(self):
        op = self.put_operation()
        items = [{"key": uniq("m"), "request": {"i": i}} for i in range(500)]
        b0 = metric(self.client, "idemd_db_batches_total")
        j0 = metric(self.client, "idemd_db_batch_jobs_total")
        j = assert_status(self, self.claims(op, items), 200)
        self.assertEqual([x["status"] for x in j["items"]], [201] * 500)
        self.assertEqual(metric(self.client, "idemd_db_batches_total") - b0, 1)
        self.assertEqual(metric(self.client, "idemd_db_batch_jobs_total") - j0, 500)
        comps = [{"key": x["key"], "attempt": 1, "status": 200, "body": {"i": i}}
                 for i, x in enumerate(items)]
        comps[7]["attempt"] = 2
        comps[9]["status"] = 99
        j = assert_status(self, self.completions(op, comps), 200)
        st = [(x["status"], x.get("code")) for x in j["items"]]
        self.assertEqual(st[7], (409, "lease_lost"))
        self.assertEqual(st[9], (400, "invalid_request"))
        self.assertEqual(st.count((200, None)), 498)
        # replayed from then on, by batch and alone
        j = assert_status(self, self.claims(op, items[:10]), 200)
        self.assertEqual([x["status"] for x in j["items"]], [200, 200, 200, 200, 200, 200, 200,
                                                             409, 200, 409])
        self.assertEqual(j["items"][3]["response"]["body"], {"i": 3})
        # never claimed, and completing twice with another body
        j = assert_status(self, self.completions(op, [
            {"key": uniq("never"), "attempt": 1, "status": 200},
            {"key": items[0]["key"], "attempt": 1, "status": 200, "body": {"i": 0}},
            {"key": items[1]["key"], "attempt": 1, "status": 200, "body": {"other": 1}}]), 200)
        self.assertEqual([(x["status"], x.get("code")) for x in j["items"]],
                         [(409, "not_in_progress"), (200, None), (409, "completion_conflict")])

    def test_mixed_batches_write_one_event_per_change(self):
        """A batch whose fresh elements are settled by the plain-SQL path
        and whose others go on to idemd.claim / idemd.complete: every
        record changed exactly once, with exactly one audit event each."""
        op = self.put_operation()
        done, busy, lost = uniq("done"), uniq("busy"), uniq("lost")
        for k in (done, busy, lost):
            assert_status(self, self.single(op, {"key": k, "request": {"k": k}}), 201)
        assert_status(self, self.client.post(path(op, done, "complete"),
                                             {"attempt": 1, "status": 201, "body": {"ok": 1}}), 200)
        fresh = [uniq("f") for _ in range(3)]
        items = [{"key": fresh[0], "request": {"k": fresh[0]}},
                 {"key": done, "request": {"k": done}},
                 {"key": fresh[1], "request": {"k": fresh[1]}},
                 {"key": busy, "request": {"k": busy}},
                 {"key": fresh[2], "request": {"k": fresh[2]}}]
        j = assert_status(self, self.claims(op, items), 200)
        self.assertEqual([x["status"] for x in j["items"]], [201, 200, 201, 409, 201])
        ids = {it["key"]: x.get("id") for it, x in zip(items, j["items"])}
        comps = [{"key": fresh[0], "attempt": 1, "status": 200, "body": {"n": 0}},
                 {"key": done, "attempt": 1, "status": 201, "body": {"ok": 1}},
                 {"key": lost, "attempt": 2, "status": 200},
                 {"key": fresh[1], "attempt": 1, "status": 200, "body": {"n": 1}},
                 {"key": uniq("never"), "attempt": 1, "status": 200}]
        j = assert_status(self, self.completions(op, comps), 200)
        self.assertEqual([(x["status"], x.get("code")) for x in j["items"]],
                         [(200, None), (200, None), (409, "lease_lost"), (200, None),
                          (409, "not_in_progress")])

        def events(key):
            rid = ids.get(key) or assert_status(
                self, self.client.get(path(op, key)), 200)["id"]
            r = self.client.get("/v1/records/%s/events" % rid)
            return [e["event"] for e in assert_status(self, r, 200)["events"]]
        self.assertEqual(events(fresh[0]), ["claimed", "completed"])
        self.assertEqual(events(fresh[1]), ["claimed", "completed"])
        self.assertEqual(events(fresh[2]), ["claimed"])
        self.assertEqual(events(done), ["claimed", "completed"])
        self.assertEqual(events(busy), ["claimed"])
        self.assertEqual(events(lost), ["claimed"])
        # the replays are what was stored, whichever path stored it
        j = assert_status(self, self.claims(op, items[:3]), 200)
        self.assertEqual([x["response"]["body"] for x in j["items"]],
                         [{"n": 0}, {"ok": 1}, {"n": 1}])
        # and on another instance, whose replay cache has none of them, the
        # database answers replays, the in-progress one and a different
        # request in one batch, as single claims would be answered
        second = self.idemd.start()
        other = Client(second.port, self.api_key)
        cold = [items[0], items[1], items[4], {"key": fresh[1], "request": {"k": "other"}}]
        j = assert_status(self, self.claims(op, cold, client=other), 200)
        self.assertEqual([(x["status"], x.get("code")) for x in j["items"]],
                         [(200, None), (200, None), (409, "request_in_progress"),
                          (422, "fingerprint_mismatch")])
        self.assertEqual([j["items"][k]["response"]["body"] for k in (0, 1)],
                         [{"n": 0}, {"ok": 1}])
        self.assertEqual(events(fresh[2]), ["claimed"])

    def test_random_batches_match_the_model(self):
        """Random batches over keys that are new, in progress or completed,
        with matching or other requests: each item's answer is the one the
        claim table gives a single claim (fingerprint first, then completed,
        then in progress)."""
        rnd = random.Random(20261123)
        op = self.put_operation()
        state = {}   # key -> (state, request)
        for rnd_no in range(6):
            keys = [uniq("r") for _ in range(rnd.randint(5, 40))]
            pool = keys + rnd.sample(sorted(state), min(len(state), rnd.randint(0, 40)))
            rnd.shuffle(pool)
            items, expect = [], []
            for k in pool:
                req = {"v": rnd.randint(0, 2)}
                items.append({"key": k, "request": req})
                st = state.get(k)
                if st is None:
                    expect.append(201)
                elif st[1] != req:
                    expect.append(422)
                elif st[0] == "completed":
                    expect.append(200)
                else:
                    expect.append(409)
            j = assert_status(self, self.claims(op, items), 200)
            self.assertEqual([x["status"] for x in j["items"]], expect, "round %d" % rnd_no)
            comps = []
            for it, x in zip(items, j["items"]):
                if x["status"] == 201:
                    state[it["key"]] = ("in_progress", it["request"])
                    if rnd.random() < 0.5:
                        comps.append({"key": it["key"], "attempt": 1, "status": 200,
                                      "body": it["request"]})
            j = assert_status(self, self.completions(op, comps), 200) if comps else {"items": []}
            for c, x in zip(comps, j["items"]):
                self.assertEqual(x["status"], 200, x)
                state[c["key"]] = ("completed", state[c["key"]][1])

    def test_overlapping_batches_two_processes(self):
        op = self.put_operation()
        second = self.idemd.start()
        keys = [uniq("o") for _ in range(300)]
        clients = [Client(self.server.port, self.api_key), Client(second.port, self.api_key)]
        results = [None] * 4

        def worker(n):
            ks = keys[n * 50:n * 50 + 200]
            r = self.claims(op, [{"key": k} for k in ks], client=clients[n % 2])
            results[n] = (ks, r)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        won = {}
        for ks, r in results:
            j = assert_status(self, r, 200)
            for k, x in zip(ks, j["items"]):
                self.assertEqual(x["key"], k)
                self.assertIn(x["status"], (201, 409), x)
                if x["status"] == 201:
                    won[k] = won.get(k, 0) + 1
        self.assertEqual(sorted(won), sorted(keys))
        self.assertEqual(set(won.values()), {1})


if __name__ == "__main__":
    harness.main()
