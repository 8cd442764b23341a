"""Integration tests: `idemd records` (show, events, list, release), the
on-call engineer's tool: same config and database as serve, no API key."""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import IdemdCase, assert_status, uniq  # noqa: E402


class RecordsCli(IdemdCase):

    def records(self, *args):
        p = self.idemd.run("records", *args, env={"SUDO_USER": "oncall"})
        lines = [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]
        return p.returncode, lines, p

    def test_show_events_list_and_release(self):
        op = self.put_operation(lease_seconds=3600)
        stuck = "/v1/operations/%s/keys/%s" % (op, uniq("stuck"))
        rid = assert_status(self, self.client.post(stuck + "/claim", {}), 201)["id"]
        done = "/v1/operations/%s/keys/%s" % (op, uniq("done"))
        done_id = assert_status(self, self.client.post(done + "/claim", {}), 201)["id"]
        assert_status(self, self.client.post(done + "/complete", {"attempt": 1, "status": 200}),
                      200)

        rc, rows, p = self.records("show", rid)
        self.assertEqual(rc, 0, p.stderr)
        self.assertEqual(len(rows), 1)
        r = rows[0]
        self.assertEqual((r["id"], r["tenant"], r["operation"], r["state"], r["attempt"]),
                         (rid, "acme", op, "in_progress", 1))
        self.assertIn("lease_expires_at", r)

        rc, rows, _ = self.records("events", done_id)
        self.assertEqual([e["event"] for e in rows], ["claimed", "completed"])
        self.assertTrue(rows[0]["by"].startswith("api_key:"))

        rc, rows, _ = self.records("list", "--tenant", "acme", "--operation", op,
                                   "--state", "in_progress")
        self.assertEqual(rc, 0)
        self.assertEqual([x["id"] for x in rows], [rid])
        rc, rows, _ = self.records("list", "--tenant", "acme", "--operation", op,
                                   "--state=in_progress", "--older-than", "3600")
        self.assertEqual(rows, [])

        # fenced: only the holding attempt may be released
        rc, rows, _ = self.records("release", rid, "--attempt", "2")
        self.assertEqual((rc, rows[0]["outcome"]), (1, "lease_lost"))
        rc, rows, p = self.records("release", rid, "--attempt", "1")
        self.assertEqual((rc, rows[0]["outcome"]), (0, "released"), p.stderr)
        rc, rows, _ = self.records("events", rid)
        self.assertEqual(rows[-1]["event"], "released")
        self.assertEqual(rows[-1]["by"], "cli:oncall")
        again = assert_status(self, self.client.post(stuck + "/claim", {}), 201)
        self.assertEqual(again["attempt"], 2)

        p = self.idemd.run("records", "list", "--tenant", "acme", "--format", "table")
        self.assertEqual(p.returncode, 0, p.stderr)
        head = p.stdout.splitlines()[0].split()
        self.assertEqual(head[:4], ["id", "tenant", "operation", "state"])

    def test_refusals(self):
        for args in (("show", "xyz"), ("release", "0" * 32), ("list", "--state", "gone"),
                     ("list", "--older-than", "-1"), ("list", "--format", "yaml"),
                     ("frobnicate",), ()):
            p = self.idemd.run("records", *args)
            self.assertEqual(p.returncode, 2, "%s: %s" % (args, p.stderr))
        p = self.idemd.run("records", "show", "0" * 32)
        self.assertEqual(p.returncode, 1)
        self.assertIn("no live record", p.stderr)
        p = self.idemd.run("tenant", "list", "--tenant", "acme")
        self.assertEqual(p.returncode, 2)


if __name__ == "__main__":
    harness.main()
