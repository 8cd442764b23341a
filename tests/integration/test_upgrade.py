"""Integration tests: upgrades and downgrades.

Rolling upgrade: the previous release's binary (PREV_COMMIT, built once
from this repository's own history into build-prev/) migrates and serves a
fresh database; the binary under test migrates it while the old one keeps
serving; the old binary still serves issue, claim, complete and replay on
the new schema, a restarted old binary starts on it, and old and new serve
the same database side by side, each replaying records the other made.
Without the history (no git, a shallow clone) this fails with a message,
it does not skip.

Downgrade refusal: a migration this binary does not know, recorded as
breaking, makes `serve` exit 2 with a message, `migrate --status` exit 1,
and a running instance's /readyz 503; an unknown additive migration lets
serve start with one warning."""

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (BIN, DEFAULT_POLICY, SOURCE_DIR, Client, assert_status,  # noqa: E402
                     conninfo, create_database, drop_database, psql, uniq)

# The previous release: the binary whose users upgrade to this tree.
PREV_COMMIT = "264ed10db86a3caf1202a5f7c1cadd563ce8801a"
PREV_DIR = os.environ.get("IDEMD_PREV_BUILD_DIR") or os.path.join(
    SOURCE_DIR, "build-prev", PREV_COMMIT[:12])
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def git(*args, **kw):
    return subprocess.run(["git", "-C", SOURCE_DIR] + list(args), capture_output=True,
                          timeout=120, **kw)


def prev_binary():
    """The previous release's idemd, built once (Release, -j2, the idemd
    target only) from `git archive PREV_COMMIT` and kept in PREV_DIR.
    Raises AssertionError naming what is missing when it cannot be built."""
    binary = os.path.join(PREV_DIR, "idemd")
    os.makedirs(PREV_DIR, exist_ok=True)
    with open(os.path.join(PREV_DIR, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if os.access(binary, os.X_OK):
            return binary
        if shutil.which("git") is None:
            raise AssertionError("the upgrade test builds the previous release (%s) from "
                                 "the repository's history, and git is not installed"
                                 % PREV_COMMIT[:7])
        p = git("cat-file", "-e", PREV_COMMIT + "^{commit}")
        if p.returncode != 0:
            raise AssertionError(
                "the upgrade test needs commit %s (the previous release) in the git history "
                "of %s, and it is not there (%s); run the tests from a full clone "
                "(git fetch --unshallow) or set IDEMD_PREV_BUILD_DIR to a directory holding "
                "that release's idemd" % (PREV_COMMIT[:7], SOURCE_DIR,
                                          p.stderr.decode(errors="replace").strip()))
        src = tempfile.mkdtemp(prefix="idemd-prev-", dir=PREV_DIR)
        try:
            with subprocess.Popen(["git", "-C", SOURCE_DIR, "archive", PREV_COMMIT],
                                  stdout=subprocess.PIPE) as arc:
                tar = subprocess.run(["tar", "-x", "-C", src], stdin=arc.stdout,
                                     capture_output=True, timeout=120)
                arc.stdout.close()
                if arc.wait(timeout=120) != 0 or tar.returncode != 0:
                    raise AssertionError("git archive %s failed: %s"
                                         % (PREV_COMMIT[:7], tar.stderr.decode()))
            build = os.path.join(src, "build")
            for cmd in (["cmake", "-S", src, "-B", build, "-DCMAKE_BUILD_TYPE=Release"],
                        ["cmake", "--build", build, "-j2", "--target", "idemd"]):
                p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
                if p.returncode != 0:
                    raise AssertionError("building the previous release (%s) failed: %s\n%s"
                                         % (PREV_COMMIT[:7], " ".join(cmd),
                                            (p.stdout + p.stderr)[-3000:]))
            os.replace(os.path.join(build, "idemd"), binary + ".new")
            os.replace(binary + ".new", binary)
        finally:
            shutil.rmtree(src, ignore_errors=True)
        return binary


class Node:
    """One binary (old or new) with its own config on a shared database."""

    def __init__(self, binary, tmp, db, name):
        self.binary = binary
        self.tmp = tmp
        self.port = harness.free_port()
        self.config = os.path.join(tmp, name + ".json")
        self.log = os.path.join(tmp, name + ".stderr")
        with open(self.config, "w") as f:
            json.dump({"listen": "127.0.0.1:%d" % self.port, "database_url": conninfo(db),
                       "master_key_file": os.path.join(tmp, "master.key"),
                       "pool_size": 4, "threads": 4}, f)
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("IDEMD_") and k != "CREDENTIALS_DIRECTORY"}
        self.proc = None
        self._err = None

    def run(self, *args):
        return subprocess.run([self.binary, "--config", self.config] + list(args),
                              env=self.env, cwd=self.tmp, capture_output=True, text=True,
                              timeout=120)

    def start(self):
        self._err = open(self.log, "wb")
        self.proc = subprocess.Popen([self.binary, "--config", self.config, "serve"],
                                     env=self.env, cwd=self.tmp, stdout=subprocess.DEVNULL,
                                     stderr=self._err)
        return self

    def wait_ready(self, tc):
        c = Client(self.port)
        deadline = time.time() + harness.READY_TIMEOUT
        while time.time() < deadline:
            if self.proc.poll() is not None:
                tc.fail("%s serve exited %d:\n%s" % (self.binary, self.proc.returncode,
                                                     self.stderr()))
            if harness.port_open(self.port) and c.get("/readyz").status == 200:
                return
            time.sleep(0.05)
        tc.fail("%s serve not ready:\n%s" % (self.binary, self.stderr()))

    def stop(self):
        """SIGTERM, then the exit code (None when it had to be killed)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=harness.STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.kill()
                return None
        self._close()
        return self.proc.returncode

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close()

    def _close(self):
        if self._err is not None:
            self._err.close()
            self._err = None

    def stderr(self):
        with open(self.log, errors="replace") as f:
            return f.read()

    def warnings(self, word):
        out = []
        for line in self.stderr().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # every log line is JSON; anything else is not a warning
            if isinstance(rec, dict) and rec.get("level") == "warn" and word in rec.get("msg", ""):
                out.append(rec)
        return out


def status_lines(node):
    p = node.run("migrate", "--status")
    return p.returncode, p.stdout.splitlines(), p.stderr


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="idemd-upgrade-")
        self.db = create_database()
        self.nodes = []

    def tearDown(self):
        for n in self.nodes:
            n.kill()
        drop_database(self.db)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def node(self, binary, name):
        n = Node(binary, self.tmp, self.db, name)
        self.nodes.append(n)
        return n

    def ok(self, node, *args):
        p = node.run(*args)
        self.assertEqual(p.returncode, 0, "%s %s: %s%s" % (node.binary, " ".join(args),
                                                           p.stdout, p.stderr))
        return p


class RollingUpgrade(Base):
    @classmethod
    def setUpClass(cls):
        cls.prev = prev_binary()

    def cycle(self, c, op, body):
        """issue, claim, complete on C; returns the token."""
        tok = assert_status(self, c.post("/v1/tokens", {"operation": op,
                                                        "subject": uniq("u")}), 201)["token"]
        j = assert_status(self, c.post("/v1/tokens/%s/claim" % tok, {}), 201)
        self.assertEqual(j.get("attempt"), 1, j)
        assert_status(self, c.post("/v1/tokens/%s/complete" % tok,
                                   {"attempt": 1, "status": 201, "body": body}), 200)
        return tok

    def assert_replays(self, c, tok, body, who):
        r = c.post("/v1/tokens/%s/claim" % tok, {})
        j = assert_status(self, r, 200)
        self.assertEqual(r.header("Idempotent-Replayed"), "true", "%s: %s" % (who, r.describe()))
        self.assertEqual(j.get("state"), "completed", who)
        self.assertEqual(j["response"]["status"], 201, who)
        self.assertEqual(j["response"]["body"], body, who)

    def test_old_binary_serves_the_new_schema_beside_the_new_binary(self):
        old = self.node(self.prev, "old")
        new = self.node(BIN, "new")
        # the previous release in production: its schema, its tenant, its records
        self.ok(old, "migrate")
        key = json.loads(self.ok(old, "tenant", "create", "acme").stdout.splitlines()[-1])["api_key"]
        old.start().wait_ready(self)
        co = Client(old.port, key)
        assert_status(self, co.put("/v1/operations/up.op", DEFAULT_POLICY), 201)
        t_before = self.cycle(co, "up.op", {"made": "old, before"})
        self.assert_replays(co, t_before, {"made": "old, before"}, "old before the upgrade")

        # step 1: the new binary migrates while the old one serves
        _, old_lines, _ = status_lines(old)
        old_names = {ln.split()[1] for ln in old_lines}
        self.ok(new, "migrate")
        rc, new_lines, err = status_lines(new)
        self.assertEqual(rc, 0, err)
        self.assertTrue(all(ln.startswith("applied ") for ln in new_lines), new_lines)
        added = sorted({ln.split()[1] for ln in new_lines} - old_names)
        self.assertFalse(old_names - {ln.split()[1] for ln in new_lines},
                         "the new binary dropped migrations the old one applied")
        rc, lines, err = status_lines(old)
        self.assertEqual(rc, 0, "the old binary takes the new schema for unusable:\n"
                         + "\n".join(lines) + err)
        self.assertEqual([ln.split()[1] for ln in lines if ln.startswith("unknown ")], added,
                         lines)
        for ln in lines:
            if ln.startswith("unknown "):
                self.assertRegex(ln, r"^unknown \S+ %s$" % TIME)  # none breaking
        print("new migrations since %s: %s" % (PREV_COMMIT[:7], ", ".join(added) or "none"),
              file=sys.stderr)

        # the old instance keeps serving on the new schema
        assert_status(self, Client(old.port).get("/readyz"), 200)
        self.assert_replays(co, t_before, {"made": "old, before"}, "old after the migration")
        t_old = self.cycle(co, "up.op", {"made": "old, after"})
        self.assert_replays(co, t_old, {"made": "old, after"}, "old on the new schema")

        # step 2: a new instance beside the old one, on the same database
        new.start().wait_ready(self)
        cn = Client(new.port, key)
        self.assert_replays(cn, t_before, {"made": "old, before"}, "new replaying old's")
        self.assert_replays(cn, t_old, {"made": "old, after"}, "new replaying old's")
        t_new = self.cycle(cn, "up.op", {"made": "new"})
        self.assert_replays(co, t_new, {"made": "new"}, "old replaying new's")
        # one record, two binaries: issued by new, claimed by old, completed by new
        tok = assert_status(self, cn.post("/v1/tokens", {"operation": "up.op",
                                                         "subject": uniq("u")}), 201)["token"]
        assert_status(self, co.post("/v1/tokens/%s/claim" % tok, {}), 201)
        assert_status(self, cn.post("/v1/tokens/%s/claim" % tok, {}), 409)
        assert_status(self, cn.post("/v1/tokens/%s/complete" % tok,
                                    {"attempt": 1, "status": 201, "body": {"made": "both"}}),
                      200)
        self.assert_replays(co, tok, {"made": "both"}, "old replaying a shared record")
        self.assert_replays(cn, tok, {"made": "both"}, "new replaying a shared record")
        # an old instance restarted now (a rollback) starts on the new schema,
        # with one warning when the schema holds migrations it does not know
        again = self.node(self.prev, "old-again")
        again.start().wait_ready(self)
        self.assert_replays(Client(again.port, key), t_new, {"made": "new"},
                            "restarted old replaying new's")
        self.assertEqual(len(again.warnings("ahead of this idemd")), 1 if added else 0,
                         again.stderr())
        self.assertEqual(len(old.warnings("ahead of this idemd")), 0, old.stderr())

        # old instances stop cleanly; the new one serves on
        self.assertEqual(old.stop(), 0, old.stderr())
        self.assertEqual(again.stop(), 0, again.stderr())
        self.assert_replays(cn, t_old, {"made": "old, after"}, "new after the old stopped")
        self.assertEqual(new.stop(), 0, new.stderr())


class Downgrade(Base):
    FUTURE = "9999_it_future.sql"

    def future(self, breaking):
        psql("INSERT INTO schema_migrations(name, checksum, breaking) VALUES ('%s', '%s', %s)"
             % (self.FUTURE, "ab" * 32, "true" if breaking else "false"), db=self.db)

    def test_migrate_records_the_breaking_column(self):
        n = self.node(BIN, "new")
        self.ok(n, "migrate")
        rows = psql("SELECT count(*), count(*) FILTER (WHERE breaking) FROM schema_migrations",
                    db=self.db).strip()
        total, breaking = rows.split("|")
        self.assertGreater(int(total), 0)
        marked = 0
        for f in os.listdir(harness.MIGRATIONS_DIR):
            if f.endswith(".sql"):
                with open(os.path.join(harness.MIGRATIONS_DIR, f), "rb") as fh:
                    first = fh.readline().rstrip(b"\r\n").rstrip(b" \t")
                marked += first == b"-- idemd: breaking"
        self.assertEqual(int(breaking), marked)

    def test_unknown_breaking_migration_refuses_serve_with_exit_2(self):
        n = self.node(BIN, "new")
        self.ok(n, "migrate")
        running = self.node(BIN, "running")
        running.start().wait_ready(self)
        self.future(breaking=True)

        n.start()
        try:
            n.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.fail("serve started on a schema with a breaking migration it does not know")
        rc = n.stop()
        err = n.stderr()
        self.assertEqual(rc, 2, err)
        self.assertIn("refusing to start: the database holds %s, applied by a newer idemd "
                      "and marked breaking" % self.FUTURE, err)
        self.assertIn("run the newer idemd", err)
        self.assertFalse(harness.port_open(n.port))

        rc, lines, err = status_lines(n)
        self.assertEqual(rc, 1, err)
        self.assertRegex(lines[-1], r"^unknown %s %s breaking$" % (re.escape(self.FUTURE), TIME))
        # an instance already running stops being ready
        r = Client(running.port).get("/readyz")
        j = assert_status(self, r, 503)
        self.assertEqual(j.get("reason"), "schema too new (breaking migration)", r.describe())
        # migrate changes nothing and says why this binary cannot serve
        p = n.run("migrate")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("not backward-compatible", p.stderr)
        self.assertEqual(running.stop(), 0, running.stderr())

    def test_unknown_additive_migration_serves_with_one_warning(self):
        n = self.node(BIN, "new")
        self.ok(n, "migrate")
        self.future(breaking=False)
        rc, lines, err = status_lines(n)
        self.assertEqual(rc, 0, err)
        self.assertRegex(lines[-1], r"^unknown %s %s$" % (re.escape(self.FUTURE), TIME))
        n.start().wait_ready(self)
        w = n.warnings("ahead of this idemd")
        self.assertEqual(len(w), 1, n.stderr())
        self.assertIn(self.FUTURE, w[0]["msg"])
        self.assertEqual(n.stop(), 0, n.stderr())


if __name__ == "__main__":
    harness.main()
