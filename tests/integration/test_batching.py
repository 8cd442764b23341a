"""Integration tests: group commit. Concurrent claims and completes share
transactions (batches); every element keeps its own outcome, awkward values
survive the trip through one statement, and the metrics show the batches."""

import base64
import os
import re
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Client, IdemdCase, assert_problem, assert_status  # noqa: E402

# subjects that a hand-built array literal or SQL text would get wrong
AWKWARD = ['quo"te', 'back\\slash', '{brace}', 'a,b', 'NULL', ' lead', 'trail ',
           "it's", 'ümlaut-日本', '\\"{,}\\', 'x' * 125]


def run_together(fns):
    """Runs the callables in threads released at once; returns their results."""
    barrier = threading.Barrier(len(fns))
    out = [None] * len(fns)

    def run(i):
        barrier.wait()
        try:
            out[i] = fns[i]()
        except Exception as e:  # a connection error is a result too
            out[i] = e

    ts = [threading.Thread(target=run, args=(i,)) for i in range(len(fns))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


def metric(client, name):
    r = client.get("/metrics")
    m = re.search(r"^%s (\d+)$" % re.escape(name), r.body.decode(), re.M)
    return int(m.group(1)) if m else None


class Batching(IdemdCase):
    extra_config = {"pool_size": 4, "threads": 4}

    def clients(self, n):
        return [Client(self.server.port, self.api_key, timeout=60) for _ in range(n)]

    def test_concurrent_claims_and_completes_batch_and_keep_their_outcomes(self):
        op = self.put_operation()
        rounds, n = 5, 48
        batches0 = metric(self.client, "idemd_db_batches_total")
        jobs0 = metric(self.client, "idemd_db_batch_jobs_total")
        self.assertIsNotNone(batches0)
        clients = self.clients(n)
        for rnd in range(rounds):
            tokens = [self.issue(op, subject=AWKWARD[i % len(AWKWARD)] + str(i))
                      for i in range(n)]
            # one token of the round is claimed twice at once: one of the two
            # wins even when both sit in the same batch
            twice = tokens[0]
            bodies = [{"request": {"i": i, "s": AWKWARD[i % len(AWKWARD)]}} for i in range(n)]
            claims = run_together(
                [lambda i=i: clients[i].post("/v1/tokens/%s/claim" % tokens[i], bodies[i])
                 for i in range(n)] +
                [lambda: self.client.post("/v1/tokens/%s/claim" % twice, bodies[0])])
            for r in claims:
                self.assertNotIsInstance(r, Exception, repr(r))
            first = claims[:n]
            statuses = sorted([first[0].status, claims[n].status])
            self.assertEqual(statuses, [201, 409], [r.describe() for r in (first[0], claims[n])])
            for i in range(1, n):
                j = assert_status(self, first[i], 201)
                self.assertEqual(j["attempt"], 1)
            # completes with JSON and binary bodies and awkward header values
            def complete(i):
                c = clients[i]
                path = "/v1/tokens/%s/complete" % tokens[i]
                headers = {"location": "/orders/%d" % i, "x-note": AWKWARD[i % len(AWKWARD)]}
                if i % 3 == 0:
                    raw = bytes(range(256)) + b'\x00"{},\\'
                    return c.post(path, {"attempt": 1, "status": 201, "headers": headers,
                                         "body_base64": base64.b64encode(raw).decode()})
                return c.post(path, {"attempt": 1, "status": 201, "headers": headers,
                                     "body": {"order": i, "note": AWKWARD[i % len(AWKWARD)]}})
            done = run_together([lambda i=i: complete(i) for i in range(n)] +
                                [lambda: self.complete(tokens[1], 2, body={"x": 1})])
            for r in done:
                self.assertNotIsInstance(r, Exception, repr(r))
            for i in range(n):
                j = assert_status(self, done[i], 200)
                self.assertEqual(j["state"], "completed")
                self.assertEqual(j["response"]["status"], 201)
            # a complete with the wrong attempt was fenced out on its own
            assert_problem(self, done[n], 409, "lease_lost")
            # every record holds exactly what its own complete sent
            for i in range(n):
                r = self.claim(tokens[i], bodies[i])
                j = assert_status(self, r, 200)
                resp = j["response"]
                self.assertEqual(resp["headers"]["x-note"], AWKWARD[i % len(AWKWARD)])
                self.assertEqual(resp["headers"]["location"], "/orders/%d" % i)
                if i % 3 == 0:
                    self.assertEqual(base64.b64decode(resp["body_base64"]),
                                     bytes(range(256)) + b'\x00"{},\\')
                else:
                    self.assertEqual(resp["body"], {"order": i, "note": AWKWARD[i % len(AWKWARD)]})
                # the record row itself holds the subject as sent
                intro = assert_status(self, self.introspect(tokens[i]), 200)
                self.assertEqual(intro["state"], "completed")
                row = harness.psql("SELECT subject FROM records WHERE token_id = "
                                   "decode('%s', 'hex')" % intro["id"], db=self.idemd.db)
                self.assertEqual(row[:-1], AWKWARD[i % len(AWKWARD)] + str(i))
        batches = metric(self.client, "idemd_db_batches_total") - batches0
        jobs = metric(self.client, "idemd_db_batch_jobs_total") - jobs0
        print("\n  %d claims and completes in %d batches (%.1f per batch)" %
              (jobs, batches, jobs / max(batches, 1)))
        self.assertGreaterEqual(jobs, rounds * (2 * n + 2))
        # concurrent requests shared transactions
        self.assertLess(batches, jobs)



class DebugLog(IdemdCase):
    """log_level debug: the batcher's debug lines are written."""
    extra_config = {"log_level": "debug"}

    def test_batches_are_logged_at_debug(self):
        op = self.put_operation()
        token = self.issue(op)
        assert_status(self, self.client.post("/v1/tokens/%s/claim" % token, {}), 201)
        lines = [r for r in self.server.log_records()
                 if isinstance(r, dict) and r.get("level") == "debug"]
        self.assertTrue(any(r.get("msg", "").startswith("batcher: a batch of 1 claims")
                            for r in lines), self.server.stderr_text()[-3000:])


class WarnLog(IdemdCase):
    """log_level warn: no info line (start-up lines, access lines) is written."""
    extra_config = {"log_level": "warn"}

    def test_nothing_below_warn(self):
        op = self.put_operation()
        token = self.issue(op)
        assert_status(self, self.client.post("/v1/tokens/%s/claim" % token, {}), 201)
        levels = {r.get("level") for r in self.server.log_records() if isinstance(r, dict)}
        self.assertFalse(levels & {"debug", "info"}, self.server.stderr_text()[-3000:])


if __name__ == "__main__":
    harness.main()
