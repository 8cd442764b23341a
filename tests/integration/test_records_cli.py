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

    def test_tenant_text_never_drives_the_terminal(self):
        """Issue 38: a subject holding ESC, BEL, CR, LF, DEL and C1 came out
        of `records list/show --format table` raw: it retitled the
        terminal, cleared the screen and forged a row."""
        op = self.put_operation(lease_seconds=3600)
        evil = ("u\x1b]0;pwned\x07\x1b[2J\r\n" + "f" * 32
                + "  acme  forged\x7f\x9b[31m\x85")
        path = "/v1/operations/%s/keys/%s/claim" % (op, uniq("evil"))
        r = self.client.post(path, {"subject": evil})
        rid = assert_status(self, r, 201)["id"]

        def safe(out, what):
            for i, ch in enumerate(out):
                c = ord(ch)
                self.assertFalse((c < 0x20 and ch != "\n") or 0x7f <= c <= 0x9f,
                                 "%s: control U+%04X at %d: %r" % (what, c, i, out))

        for args in (("show", rid, "--format", "table"),
                     ("list", "--tenant", "acme", "--operation", op, "--format", "table")):
            p = self.idemd.run("records", *args)
            self.assertEqual(p.returncode, 0, p.stderr)
            safe(p.stdout, " ".join(args))
            lines = p.stdout.splitlines()
            self.assertEqual(len(lines), 2, "a header and one row, no forged one: %r" % lines)
            self.assertIn("\\e]0;pwned\\x07\\e[2J\\r\\n", lines[1])
            self.assertIn("\\x7f\\u009b[31m\\u0085", lines[1])
        for args in (("show", rid), ("list", "--tenant", "acme", "--operation", op)):
            p = self.idemd.run("records", *args)
            safe(p.stdout, " ".join(args))
            rows = [json.loads(ln) for ln in p.stdout.splitlines()]
            self.assertEqual([x["subject"] for x in rows], [evil], "JSON reads back the same")

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
