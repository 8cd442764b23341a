"""Integration tests: migrations compiled into idemd. `migrate --status` on a
fresh, a migrated, an ahead and a behind database; serve and /readyz with a
schema ahead of the binary (started, one warning, ready) and behind it
(refused, not ready); the recorded checksums being those of the files; and
the binary copied alone elsewhere migrating and serving without its source
tree."""

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import BIN, Client, Idemd, assert_status, psql  # noqa: E402

# a migration no idemd knows, sorting after every real one
FUTURE = "9999_it_future.sql"
TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ"


def migration_files():
    return sorted(f for f in os.listdir(harness.MIGRATIONS_DIR)
                  if re.match(r"^\d{4}_.+\.sql$", f))


def status(idemd):
    """`idemd migrate --status`: (exit code, stdout lines, stderr)."""
    p = idemd.run("migrate", "--status")
    return p.returncode, p.stdout.splitlines(), p.stderr


def warnings(srv, word):
    return [r for r in srv.log_records()
            if isinstance(r, dict) and r.get("level") == "warn" and word in r.get("msg", "")]


class Status(unittest.TestCase):
    def setUp(self):
        self.idemd = Idemd()

    def tearDown(self):
        self.idemd.cleanup()

    def test_fresh_database_all_pending_exit_1(self):
        rc, lines, err = status(self.idemd)
        self.assertEqual(rc, 1, err)
        self.assertEqual(lines, ["pending " + f for f in migration_files()], err)
        self.assertFalse(os.path.exists(self.idemd.master_key_file),
                         "migrate --status made a master key")
        self.assertEqual(psql("SELECT to_regclass('schema_migrations') IS NULL",
                              db=self.idemd.db).strip(), "t", "migrate --status wrote")

    def test_after_migrate_all_applied_exit_0(self):
        self.idemd.migrate()
        rc, lines, err = status(self.idemd)
        self.assertEqual(rc, 0, err)
        files = migration_files()
        self.assertEqual(len(lines), len(files), lines)
        for line, f in zip(lines, files):
            self.assertRegex(line, r"^applied %s %s$" % (re.escape(f), TIME))

    def test_unknown_future_migration_exit_0(self):
        self.idemd.migrate()
        psql("INSERT INTO schema_migrations(name, checksum) VALUES ('%s', '%s')"
             % (FUTURE, "ab" * 32), db=self.idemd.db)
        rc, lines, err = status(self.idemd)
        self.assertEqual(rc, 0, err)
        self.assertRegex(lines[-1], r"^unknown %s %s$" % (re.escape(FUTURE), TIME))
        self.assertEqual([ln.split()[0] for ln in lines[:-1]],
                         ["applied"] * len(migration_files()), lines)
        # migrate leaves it alone and says so
        p = self.idemd.migrate()
        self.assertIn(FUTURE, p.stderr)

    def test_known_migration_missing_exit_1(self):
        self.idemd.migrate()
        last = migration_files()[-1]
        psql("DELETE FROM schema_migrations WHERE name = '%s'" % last, db=self.idemd.db)
        rc, lines, err = status(self.idemd)
        self.assertEqual(rc, 1, err)
        self.assertEqual(lines[-1], "pending " + last)

    def test_changed_migration_exit_1(self):
        self.idemd.migrate()
        first = migration_files()[0]
        psql("UPDATE schema_migrations SET checksum = repeat('0', 64) WHERE name = '%s'" % first,
             db=self.idemd.db)
        rc, lines, err = status(self.idemd)
        self.assertEqual(rc, 1, err)
        self.assertRegex(lines[0], r"^changed %s %s$" % (re.escape(first), TIME))

    def test_unreachable_database_exit_1(self):
        self.idemd.write_config(database_url="host=%s dbname=idemd_it_no_such_db user=%s"
                                % (harness.PGHOST, harness.PGUSER))
        rc, lines, err = status(self.idemd)
        self.assertEqual(rc, 1, err)
        self.assertEqual(lines, [])
        self.assertTrue(err.strip(), "no reason on stderr")

    def test_recorded_checksums_are_those_of_the_files(self):
        # The compiled-in bytes are the files' bytes: BLAKE2b-256 of each file
        # is what migrate records, as the builds that read the files did.
        self.idemd.migrate()
        rows = dict(ln.split("|") for ln in psql(
            "SELECT name || '|' || checksum FROM schema_migrations", db=self.idemd.db).split())
        for f in migration_files():
            with open(os.path.join(harness.MIGRATIONS_DIR, f), "rb") as fh:
                want = hashlib.blake2b(fh.read(), digest_size=32).hexdigest()
            self.assertEqual(rows.get(f), want, f)


class ServeAndReadiness(unittest.TestCase):
    def setUp(self):
        self.idemd = Idemd()
        self.idemd.migrate()
        self.key = self.idemd.tenant_create("mig")

    def tearDown(self):
        for s in self.idemd.servers:
            s.kill()
        self.idemd.cleanup()

    def test_schema_ahead_serves_with_one_warning(self):
        psql("INSERT INTO schema_migrations(name, checksum) VALUES ('%s', '%s')"
             % (FUTURE, "ab" * 32), db=self.idemd.db)
        srv = self.idemd.start()
        c = srv.client(self.key)
        r = c.get("/readyz")
        assert_status(self, r, 200)
        assert_status(self, c.get("/readyz"), 200)
        assert_status(self, c.put("/v1/operations/mig.op", harness.DEFAULT_POLICY), 201)
        r = c.post("/v1/tokens", {"operation": "mig.op", "subject": "u1"})
        assert_status(self, r, 201)
        self.assertEqual(srv.stop(), 0, srv.stderr_text())
        warned = warnings(srv, FUTURE)
        self.assertEqual(len(warned), 1, srv.stderr_text())
        self.assertIn("ahead", warned[0]["msg"])
        self.assertEqual(len(warnings(srv, "schema")), 1, srv.stderr_text())

    def test_readyz_follows_the_schema(self):
        last = migration_files()[-1]
        row = psql("SELECT checksum || '|' || applied_at FROM schema_migrations "
                   "WHERE name = '%s'" % last, db=self.idemd.db).strip().split("|")
        srv = self.idemd.start()
        c = srv.client()
        assert_status(self, c.get("/readyz"), 200)
        psql("DELETE FROM schema_migrations WHERE name = '%s'" % last, db=self.idemd.db)
        r = c.get("/readyz")
        j = assert_status(self, r, 503)
        self.assertEqual((j["status"], j["reason"]), ("not_ready", "schema not current"))
        self.assertIsNotNone(r.header("retry-after"), r.describe())
        # a future migration does not make up for a missing one
        psql("INSERT INTO schema_migrations(name, checksum) VALUES ('%s', '%s')"
             % (FUTURE, "ab" * 32), db=self.idemd.db)
        assert_status(self, c.get("/readyz"), 503)
        psql("INSERT INTO schema_migrations(name, checksum, applied_at) VALUES ('%s', '%s', '%s')"
             % (last, row[0], row[1]), db=self.idemd.db)
        assert_status(self, c.get("/readyz"), 200)
        psql("UPDATE schema_migrations SET checksum = repeat('0', 64) WHERE name = '%s'" % last,
             db=self.idemd.db)
        assert_status(self, c.get("/readyz"), 503)
        self.assertEqual(srv.stop(), 0, srv.stderr_text())

    def test_schema_behind_refused_naming_the_migration(self):
        last = migration_files()[-1]
        psql("DELETE FROM schema_migrations WHERE name = '%s'" % last, db=self.idemd.db)
        rc, lines, _ = status(self.idemd)
        self.assertEqual((rc, lines[-1]), (1, "pending " + last))
        p = self.idemd.run("serve", timeout=20)
        self.assertNotEqual(p.returncode, 0, "serve started with a pending migration")
        self.assertIn("serve: the database schema is behind: %s not applied; "
                      "run 'idemd migrate'" % last, p.stderr)
        for f in migration_files()[:-1]:
            self.assertNotIn(f, p.stderr, "serve names an applied migration")


class WithoutSourceTree(unittest.TestCase):
    """The binary alone in a folder, run from another: migrate and serve."""

    def setUp(self):
        self.idemd = Idemd()
        self.bindir = tempfile.mkdtemp(prefix="idemd-it-bin-")
        self.cwd = tempfile.mkdtemp(prefix="idemd-it-cwd-")
        self.bin = os.path.join(self.bindir, "idemd")
        shutil.copy2(BIN, self.bin)
        self.proc = None

    def tearDown(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.bindir, ignore_errors=True)
        shutil.rmtree(self.cwd, ignore_errors=True)
        self.idemd.cleanup()

    def env(self):
        env = self.idemd.env()
        for k in list(env):
            if k.startswith("IDEMD_") or k.startswith("PG"):
                del env[k]
        return env

    def run_bin(self, *args, prefix=()):
        env = self.env()
        if prefix:
            # LeakSanitizer cannot run under ptrace: in the sanitizer build the
            # traced run checks what it opens, not what it leaks
            env["ASAN_OPTIONS"] = (env.get("ASAN_OPTIONS", "") + ":detect_leaks=0").lstrip(":")
        return subprocess.run(list(prefix) + [self.bin, "--config", self.idemd.config_path]
                              + list(args), env=env, cwd=self.cwd,
                              capture_output=True, text=True, timeout=60)

    def test_migrate_and_serve(self):
        p = self.run_bin("migrate", "--status")
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertEqual(p.stdout.splitlines(), ["pending " + f for f in migration_files()])
        # Under strace when it can run here: no .sql file is opened.
        trace = os.path.join(self.cwd, "strace.out")
        prefix = ()
        tracer = shutil.which("strace")
        if tracer and subprocess.run([tracer, "-o", os.devnull, "true"],
                                     capture_output=True).returncode == 0:
            prefix = (tracer, "-f", "-e", "trace=open,openat,stat,newfstatat,access",
                      "-o", trace)
        p = self.run_bin("migrate", prefix=prefix)
        self.assertEqual(p.returncode, 0, p.stderr)
        if prefix:
            with open(trace) as f:
                sql = [ln for ln in f if ".sql" in ln or "migrations" in ln]
            self.assertEqual(sql, [], "migrate looked for migration files")
        else:
            print("\n  strace cannot run here: not checking which files migrate opens",
                  file=sys.stderr)
        p = self.run_bin("migrate", "--status")
        self.assertEqual(p.returncode, 0, p.stderr)
        p = self.run_bin("tenant", "create", "alone")
        self.assertEqual(p.returncode, 0, p.stderr)
        key = json.loads(p.stdout.strip().splitlines()[-1])["api_key"]
        log = open(os.path.join(self.cwd, "serve.stderr"), "wb")
        try:
            self.proc = subprocess.Popen([self.bin, "--config", self.idemd.config_path, "serve"],
                                         env=self.env(), cwd=self.cwd, stdout=subprocess.DEVNULL,
                                         stderr=log)
        finally:
            log.close()
        c = Client(self.idemd.port, key)
        deadline = time.monotonic() + harness.READY_TIMEOUT
        r = None
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                r = c.get("/readyz")
                if r.status == 200:
                    break
            except OSError:
                pass
            time.sleep(0.05)
        with open(os.path.join(self.cwd, "serve.stderr")) as f:
            serve_log = f.read()
        self.assertIsNotNone(r, "serve never answered:\n" + serve_log)
        assert_status(self, r, 200)
        assert_status(self, c.put("/v1/operations/alone.op", harness.DEFAULT_POLICY), 201)
        self.proc.terminate()
        self.assertEqual(self.proc.wait(10), 0)


if __name__ == "__main__":
    harness.main()
