"""Duplicates that wait for the answer instead of a 409 (api/openapi.yaml,
Prefer: wait): Prefer: wait=N or the operation's wait_seconds; the
waiter gets the replay when the first completes, becomes the next attempt
when it is released or its lease ends, or gets 409 when N passes; across
idemd instances; bounded by max_waiters; holding no HTTP thread; answered
on shutdown."""

import os
import re
import subprocess
import sys
import threading
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Client, IdemdCase, assert_problem, assert_status, uniq  # noqa: E402


def gauge(client, name):
    """The unlabelled metric NAME of the instance CLIENT talks to."""
    r = client.get("/metrics")
    m = re.search(r"^%s (\d+)$" % name, r.body.decode(), re.M)
    return int(m.group(1))


def later(fn, *args):
    """Runs FN(*ARGS) on a thread; returns a getter for (result, seconds)."""
    box = {}

    def run():
        t0 = time.monotonic()
        box["r"] = fn(*args)
        box["t"] = time.monotonic() - t0

    t = threading.Thread(target=run)
    t.start()

    def get():
        t.join(30)
        return box.get("r"), box.get("t")
    return get


class Waiting(IdemdCase):
    extra_config = {"threads": 2, "max_waiters": 40}

    def kurl(self, op, key, action):
        return "/v1/operations/%s/keys/%s/%s" % (op, urllib.parse.quote(key, safe=""), action)

    def kclaim(self, op, key, wait=None, client=None):
        h = {"Prefer": "wait=%d" % wait} if wait is not None else None
        return (client or self.client).post(self.kurl(op, key, "claim"), {"request": {"a": 1}},
                                            headers=h)

    def notifications_during(self, action):
        """Runs ACTION while a session LISTENs to idemd's channel; returns
        the payloads that session received."""
        listener = subprocess.Popen(
            [harness.PSQL, "-X", "-q", "-At", "-d", self.idemd.db, "-c", "LISTEN idemd_records",
             "-c", "SELECT pg_sleep(1.5)", "-c", "SELECT 1"],
            env=harness.pg_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(0.5)
        action()
        out, _ = listener.communicate(timeout=30)
        return re.findall(r'notification "idemd_records" with payload "([^"]*)"', out)

    def test_only_a_record_someone_waits_for_is_announced(self):
        # PostgreSQL serialises the commits of notifying transactions: a
        # completion nobody waits for must not notify
        op = self.put_operation()
        quiet, waited = uniq("q"), uniq("w")
        assert_status(self, self.kclaim(op, quiet), 201)
        assert_problem(self, self.kclaim(op, quiet), 409, "request_in_progress")
        got = self.notifications_during(lambda: assert_status(self, self.client.post(
            self.kurl(op, quiet, "complete"), {"attempt": 1, "status": 201, "body": {}}), 200))
        self.assertEqual(got, [])

        assert_status(self, self.kclaim(op, waited), 201)
        waiter = later(self.kclaim, op, waited, 10)
        time.sleep(0.5)
        got = self.notifications_during(lambda: assert_status(self, self.client.post(
            self.kurl(op, waited, "complete"), {"attempt": 1, "status": 201, "body": {"w": 1}}),
            200))
        self.assertEqual(len(got), 1, got)
        r, took = waiter()
        self.assertEqual(assert_status(self, r, 200)["response"]["body"], {"w": 1})
        self.assertLess(took, 5.0)

    def test_waiter_gets_the_replay(self):
        op = self.put_operation()
        key = uniq("w")
        assert_status(self, self.kclaim(op, key), 201)
        got = later(self.kclaim, op, key, 5)
        time.sleep(0.5)
        t_done = time.monotonic()
        assert_status(self, self.client.post(self.kurl(op, key, "complete"),
                                             {"attempt": 1, "status": 201, "body": {"o": 7}}), 200)
        r, took = got()
        j = assert_status(self, r, 200)
        self.assertEqual(j["response"]["body"], {"o": 7})
        self.assertEqual(r.header("idempotent-replayed"), "true")
        self.assertEqual(r.header("preference-applied"), "wait=5")
        self.assertLess(took, 0.5 + (time.monotonic() - t_done) + 1.0, took)

    def test_waiter_becomes_the_next_attempt_after_a_release(self):
        op = self.put_operation()
        tok = self.issue(op)
        assert_status(self, self.claim(tok, {"request": {"a": 1}}), 201)
        got = later(self.claim, tok, {"request": {"a": 1}}, None, None, {"Prefer": "wait=5"})
        time.sleep(0.3)
        assert_status(self, self.release(tok, 1), 200)
        r, took = got()
        j = assert_status(self, r, 201)
        self.assertEqual(j["attempt"], 2)
        self.assertEqual(r.header("preference-applied"), "wait=5")
        self.assertLess(took, 2.0)

    def test_deadline_gives_409(self):
        op = self.put_operation()
        key = uniq("w")
        assert_status(self, self.kclaim(op, key), 201)
        t0 = time.monotonic()
        r = self.kclaim(op, key, 1)
        took = time.monotonic() - t0
        assert_problem(self, r, 409, "request_in_progress")
        self.assertEqual(r.header("preference-applied"), "wait=1")
        self.assertGreaterEqual(took, 0.9)
        self.assertLess(took, 2.5)
        t0 = time.monotonic()
        r = self.kclaim(op, key, 0)
        assert_problem(self, r, 409, "request_in_progress")
        self.assertIsNone(r.header("preference-applied"))
        self.assertLess(time.monotonic() - t0, 0.5)

    def test_lease_end_makes_the_waiter_take_over(self):
        op = self.put_operation(lease_seconds=1)
        key = uniq("w")
        assert_status(self, self.kclaim(op, key), 201)
        r = self.kclaim(op, key, 10)
        j = assert_status(self, r, 201)
        self.assertEqual(j["attempt"], 2)

    def test_operation_wait_seconds(self):
        op = self.put_operation(wait_seconds=3)
        self.assertEqual(self.client.get("/v1/operations/" + op).json["wait_seconds"], 3)
        key = uniq("w")
        assert_status(self, self.kclaim(op, key), 201)
        got = later(self.kclaim, op, key)
        time.sleep(0.3)
        assert_status(self, self.client.post(self.kurl(op, key, "complete"),
                                             {"attempt": 1, "status": 200}), 200)
        r, _ = got()
        # it waited (the replay came after the completion), but no Prefer
        # was sent: RFC 7240 answers Preference-Applied only to a preference
        self.assertEqual((r.status, r.header("preference-applied")), (200, None))
        for bad in (-1, 61, "3"):
            r = self.client.put("/v1/operations/" + uniq("op"),
                                dict(harness.DEFAULT_POLICY, wait_seconds=bad))
            assert_problem(self, r, 400, "invalid_request")

    def test_across_instances(self):
        op = self.put_operation()
        key = uniq("x")
        second = self.idemd.start()
        c2 = Client(second.port, self.api_key)
        assert_status(self, self.kclaim(op, key), 201)
        got = later(self.kclaim, op, key, 10, c2)
        time.sleep(0.5)
        t0 = time.monotonic()
        assert_status(self, self.client.post(self.kurl(op, key, "complete"),
                                             {"attempt": 1, "status": 200, "body": {"z": 1}}), 200)
        r, _ = got()
        j = assert_status(self, r, 200)
        self.assertEqual(j["response"]["body"], {"z": 1})
        self.assertLess(time.monotonic() - t0, 1.5)
        second.stop()

    def test_many_waiters_of_one_record_cost_one_claim(self):
        # 20 waiters on the instance that completes and 20 on another: the
        # first are answered from the replay cache, the others follow one
        # leader's claim, instead of 40 claims in the database
        op = self.put_operation()
        key = uniq("many")
        second = self.idemd.start()
        self.addCleanup(second.stop)
        c2 = Client(second.port, self.api_key)
        assert_status(self, self.kclaim(op, key), 201)
        here = [later(self.kclaim, op, key, 10) for _ in range(15)]
        there = [later(self.kclaim, op, key, 10, c2) for _ in range(15)]
        deadline = time.monotonic() + 10
        while (gauge(self.client, "idemd_waiters"), gauge(c2, "idemd_waiters")) != (15, 15):
            self.assertLess(time.monotonic(), deadline, "the 30 duplicates never all waited")
            time.sleep(0.05)
        jobs_here, jobs_there = (gauge(self.client, "idemd_db_batch_jobs_total"),
                                 gauge(c2, "idemd_db_batch_jobs_total"))
        assert_status(self, self.client.post(self.kurl(op, key, "complete"),
                                             {"attempt": 1, "status": 201, "body": {"n": 40}}), 200)
        for g in here + there:
            r, took = g()
            self.assertEqual(assert_status(self, r, 200)["response"]["body"], {"n": 40})
            self.assertEqual(r.header("idempotent-replayed"), "true")
        # here: the completion, and at most one leader when the notification
        # came before the completion's answer was cached; there: the leader
        # (again if a notification came twice)
        self.assertLessEqual(gauge(self.client, "idemd_db_batch_jobs_total") - jobs_here, 2)
        self.assertLessEqual(gauge(c2, "idemd_db_batch_jobs_total") - jobs_there, 3)

    def test_waiters_hold_no_thread_and_are_bounded(self):
        op = self.put_operation()
        key = uniq("m")
        assert_status(self, self.kclaim(op, key), 201)
        getters = [later(self.kclaim, op, key, 3) for _ in range(20)]
        time.sleep(0.5)
        # 2 HTTP threads, 20 waiting: other requests are still served at once
        t0 = time.monotonic()
        for _ in range(10):
            assert_status(self, self.client.get("/healthz"), 200)
        self.assertLess(time.monotonic() - t0, 1.0)
        # max_waiters is 40, one tenant may hold half: one more gets 409 at once
        t0 = time.monotonic()
        assert_problem(self, self.kclaim(op, key, 3), 409, "request_in_progress")
        self.assertLess(time.monotonic() - t0, 0.5)
        assert_status(self, self.client.post(self.kurl(op, key, "complete"),
                                             {"attempt": 1, "status": 200}), 200)
        statuses = [g()[0].status for g in getters]
        self.assertEqual(statuses, [200] * 20)

    def test_rejected_duplicates_change_nothing_and_422_wins(self):
        op = self.put_operation()
        key = uniq("r")
        j = assert_status(self, self.kclaim(op, key), 201)
        before = assert_status(self, self.client.get(self.kurl(op, key, "")[:-1]), 200)
        other = {"request": {"a": 2}}
        for order in (("same", "other"), ("other", "same")):
            for which in order:
                if which == "same":
                    assert_problem(self, self.kclaim(op, key, 0), 409, "request_in_progress")
                else:
                    r = self.client.post(self.kurl(op, key, "claim"), other,
                                         headers={"Prefer": "wait=2"})
                    # a different request is refused at once, never waits
                    assert_problem(self, r, 422, "fingerprint_mismatch")
                    self.assertIsNone(r.header("preference-applied"))
        after = assert_status(self, self.client.get(self.kurl(op, key, "")[:-1]), 200)
        for f in ("state", "attempt", "lease_expires_at"):
            self.assertEqual(before[f], after[f], f)
        self.assertEqual(j["lease_expires_at"], after["lease_expires_at"])

    def test_waiters_survive_the_notification_connection_being_killed(self):
        op = self.put_operation()
        key = uniq("k")
        assert_status(self, self.kclaim(op, key), 201)
        got = later(self.kclaim, op, key, 10)
        time.sleep(0.4)
        killed = harness.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE datname = '%s' AND query LIKE '%%idemd_records%%'" % self.idemd.db)
        self.assertEqual(killed.strip(), "1", "the LISTEN connection was not found")
        time.sleep(0.2)
        t0 = time.monotonic()
        assert_status(self, self.client.post(self.kurl(op, key, "complete"),
                                             {"attempt": 1, "status": 200}), 200)
        r, _ = got()
        assert_status(self, r, 200)
        # woken by the bounded re-check (or the reconnected LISTEN), not the lease's end
        self.assertLess(time.monotonic() - t0, 2.0)


class WaitingShutdown(IdemdCase):

    def test_sigterm_answers_waiters(self):
        op = self.put_operation()
        key = uniq("s")
        url = "/v1/operations/%s/keys/%s/claim" % (op, key)
        assert_status(self, self.client.post(url, {}), 201)
        got = later(lambda: self.client.post(url, {}, headers={"Prefer": "wait=30"}))
        time.sleep(0.5)
        t0 = time.monotonic()
        rc = self.server.stop()
        self.assertEqual(rc, 0)
        r, _ = got()
        assert_problem(self, r, 409, "request_in_progress")
        self.assertLess(time.monotonic() - t0, 5)


if __name__ == "__main__":
    harness.main()
