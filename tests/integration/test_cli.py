"""Integration tests: the idemd command line (help, version, check-config,
environment overrides, migrate, serve refusing a stale schema, tenant create,
and the messages of usage errors and of check-config).

The migrations are compiled into idemd, so these tests never point it at other
files: a changed or missing migration is made by editing schema_migrations,
and the binary under test runs with exactly the migrations it ships with.
(test_migrations.py covers `migrate --status`, a schema ahead of the binary
and a binary run without its source tree.)"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (BIN, Client, Idemd, MigratedCase, assert_status, conninfo, psql,  # noqa: E402
                     uniq)


def read(path):
    with open(path) as f:
        return f.read()


def migration_files(d=harness.MIGRATIONS_DIR):
    return sorted(f for f in os.listdir(d) if f.endswith(".sql"))


class HelpVersion(unittest.TestCase):
    def test_help_exits_0(self):
        p = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        out = p.stdout + p.stderr
        for word in ("serve", "migrate", "--status", "tenant", "keys", "check-config",
                     "--config"):
            self.assertIn(word, out, "--help does not mention %s" % word)
        # the exit codes of migrate --status
        self.assertRegex(out, r"exit 0 when current or ahead, 1 when any pending")

    def test_version_exits_0(self):
        p = subprocess.run([BIN, "--version"], capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertRegex(p.stdout, r"\d+\.\d+\.\d+")

    def test_unknown_subcommand_exits_2(self):
        p = subprocess.run([BIN, "frobnicate"], capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)

    def test_usage_errors_name_what_is_wrong(self):
        # each: the arguments, what stderr must say; all exit 2 with the usage lines
        cases = [
            ([], "idemd: no command given"),
            (["bogus"], "idemd: unknown command 'bogus'"),
            (["tenant"], "idemd: tenant needs a command: create, list, delete or key"),
            (["tenant", "frob"], "idemd: unknown tenant command 'frob'"),
            (["tenant", "create"], "idemd: tenant create needs a NAME"),
            (["tenant", "create", "a", "b"],
             "idemd: tenant create NAME takes no more arguments, got 'b'"),
            (["tenant", "delete"], "idemd: tenant delete needs a NAME"),
            (["tenant", "list", "x"], "idemd: tenant list takes no more arguments, got 'x'"),
            (["tenant", "key"], "idemd: tenant key needs a command: add or revoke"),
            (["tenant", "key", "add"], "idemd: tenant key add needs a NAME"),
            (["tenant", "key", "revoke", "a"],
             "idemd: tenant key revoke needs a NAME and a KEY_ID"),
            (["tenant", "key", "revoke", "a", "x"], "idemd: KEY_ID must be a positive integer"),
            (["keys"], "idemd: keys needs a command: rotate"),
            (["keys", "spin"], "idemd: unknown keys command 'spin'"),
            (["serve", "now"], "idemd: serve takes no more arguments, got 'now'"),
            (["serve", "--frob"], "idemd: unknown option '--frob'"),
            (["serve", "--config"], "idemd: --config needs a FILE"),
            (["serve", "--status"], "idemd: --status goes only with migrate, alone"),
        ]
        for args, msg in cases:
            with self.subTest(args=args):
                p = subprocess.run([BIN] + args, capture_output=True, text=True, timeout=10)
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                self.assertEqual(p.stdout, "")
                self.assertTrue(p.stderr.startswith(msg), p.stderr)
                self.assertIn("\nusage: idemd [--config FILE] serve", p.stderr)
                self.assertIn("tenant key revoke NAME KEY_ID", p.stderr)

    def test_help_lists_every_command(self):
        p = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=10)
        for words in ("tenant list", "tenant delete NAME", "tenant key add NAME",
                      "tenant key revoke NAME KEY_ID", "master-key rotate --new FILE",
                      "IDEMD_MASTER_KEY", "CREDENTIALS_DIRECTORY"):
            self.assertIn(words, p.stdout)

    def test_status_only_with_migrate_alone(self):
        for args in (["serve", "--status"], ["migrate", "--status", "now"],
                     ["tenant", "create", "x", "--status"], ["migrate", "--stat"]):
            p = subprocess.run([BIN] + args, capture_output=True, text=True, timeout=10)
            self.assertEqual(p.returncode, 2, "%r: %s" % (args, p.stdout + p.stderr))


class CheckConfig(unittest.TestCase):
    """check-config validates the file only (no database needed)."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="idemd-it-cfg-")
        self.path = os.path.join(self.tmp, "idemd.json")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def check(self, text, env=None):
        with open(self.path, "w") as f:
            f.write(text if isinstance(text, str) else json.dumps(text))
        e = dict(os.environ)
        e.pop("IDEMD_DATABASE_URL", None)
        e.pop("IDEMD_LISTEN", None)
        if env:
            e.update(env)
        return subprocess.run([BIN, "--config", self.path, "check-config"], env=e,
                              capture_output=True, text=True, timeout=10)

    def valid(self):
        return {"listen": "127.0.0.1:18080", "database_url": "host=/tmp dbname=x",
                "master_key_file": os.path.join(self.tmp, "k")}

    def test_valid_file_exits_0(self):
        p = self.check(self.valid())
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("idemd: config file %s (from --config) is valid" % self.path, p.stderr)

    def test_says_which_file_it_read(self):
        with open(self.path, "w") as f:
            json.dump(self.valid(), f)
        e = dict(os.environ, IDEMD_CONFIG=self.path)
        p = subprocess.run([BIN, "check-config"], env=e, cwd=self.tmp,
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("config file %s (from $IDEMD_CONFIG) is valid" % self.path, p.stderr)
        e.pop("IDEMD_CONFIG")
        p = subprocess.run([BIN, "check-config"], env=e, cwd=self.tmp,
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("config file idemd.json (from ./idemd.json) is valid", p.stderr)

    def test_says_no_config_file_was_found(self):
        empty = os.path.join(self.tmp, "empty")
        os.mkdir(empty)
        e = {k: v for k, v in os.environ.items()
             if k not in ("IDEMD_CONFIG", "IDEMD_DATABASE_URL", "IDEMD_LISTEN")}
        where = ("no config file found (looked for --config FILE, $IDEMD_CONFIG, ./idemd.json "
                 "and ./.idemd/idemd.json (the quick start's))")
        p = subprocess.run([BIN, "check-config"], env=e, cwd=empty,
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(where, p.stderr)
        self.assertIn("database_url", p.stderr)
        e["IDEMD_DATABASE_URL"] = "host=/tmp dbname=x"
        p = subprocess.run([BIN, "check-config"], env=e, cwd=empty,
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(where, p.stderr)

    def test_finds_the_quick_starts_config(self):
        os.mkdir(os.path.join(self.tmp, ".idemd"))
        with open(os.path.join(self.tmp, ".idemd", "idemd.json"), "w") as f:
            json.dump(self.valid(), f)
        e = {k: v for k, v in os.environ.items()
             if k not in ("IDEMD_CONFIG", "IDEMD_DATABASE_URL", "IDEMD_LISTEN")}
        p = subprocess.run([BIN, "check-config"], env=e, cwd=self.tmp,
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("config file .idemd/idemd.json (from ./.idemd/idemd.json, the quick "
                      "start's) is valid", p.stderr)

    def test_routes_tenant_unchecked_without_database(self):
        cfg = self.valid()
        cfg["routes"] = [{"method": "POST", "path": "/orders", "tenant": "acme",
                          "operation": "order.create", "upstream": "http://127.0.0.1:9/"}]
        p = self.check(cfg)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("the database could not be read (unreachable or not migrated): the "
                      "routes' tenants were not checked", p.stderr)

    def test_valid_full_file_exits_0(self):
        cfg = self.valid()
        cfg.update({"pool_size": 4, "threads": 2, "max_body_bytes": 4096,
                    "sweep_interval_seconds": 5, "cors_origins": ["http://localhost:3000"],
                    "routes": [{"method": "POST", "path": "/orders", "tenant": "acme",
                                "operation": "order.create",
                                "upstream": "http://127.0.0.1:9/",
                                "store_headers": ["location"],
                                "connect_timeout_ms": 500, "timeout_ms": 2000}]})
        p = self.check(cfg)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_config_after_subcommand(self):
        with open(self.path, "w") as f:
            json.dump(self.valid(), f)
        p = subprocess.run([BIN, "check-config", "--config", self.path],
                           capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_unknown_key_exits_2_and_names_it(self):
        cfg = self.valid()
        cfg["frobnication_level"] = 3
        p = self.check(cfg)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("frobnication_level", p.stderr)

    def test_mistyped_value_exits_2_and_names_key(self):
        cfg = self.valid()
        cfg["pool_size"] = "eight"
        p = self.check(cfg)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("pool_size", p.stderr)

    def test_out_of_range_value_exits_2(self):
        cfg = self.valid()
        cfg["max_body_bytes"] = 1
        p = self.check(cfg)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("max_body_bytes", p.stderr)

    def test_invalid_json_exits_2(self):
        p = self.check('{"listen": "127.0.0.1:1", "database_url": ')
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertTrue(p.stderr.strip(), "no message on stderr")

    def test_missing_database_url_exits_2(self):
        cfg = self.valid()
        del cfg["database_url"]
        p = self.check(cfg)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("database_url", p.stderr)

    def test_missing_database_url_supplied_by_env(self):
        cfg = self.valid()
        del cfg["database_url"]
        p = self.check(cfg, env={"IDEMD_DATABASE_URL": "host=/tmp dbname=y"})
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_bad_route_exits_2(self):
        cfg = self.valid()
        cfg["routes"] = [{"method": "POST", "path": "/orders", "tenant": "acme",
                          "operation": "order.create", "upstream": "http://x/", "bogus": 1}]
        p = self.check(cfg)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("bogus", p.stderr)

    def test_nonexistent_file_exits_2(self):
        p = subprocess.run([BIN, "--config", os.path.join(self.tmp, "nope.json"),
                            "check-config"], capture_output=True, text=True, timeout=10)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)


class EnvOverrides(unittest.TestCase):
    def setUp(self):
        self.idemd = Idemd()

    def tearDown(self):
        for s in self.idemd.servers:
            s.stop()
        self.idemd.cleanup()

    def test_database_url_and_listen_overrides(self):
        # The file names a database that does not exist; the environment fixes it.
        good_url = harness.conninfo(self.idemd.db)
        self.idemd.write_config(database_url="host=%s dbname=idemd_it_does_not_exist user=%s"
                                % (harness.PGHOST, harness.PGUSER))
        env = {"IDEMD_DATABASE_URL": good_url}
        p = self.idemd.run("migrate", env=env)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        p = self.idemd.run("tenant", "create", "envco", env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        key = json.loads(p.stdout.strip().splitlines()[-1])["api_key"]

        other_port = harness.free_port()
        srv = self.idemd.start(env={"IDEMD_DATABASE_URL": good_url,
                                    "IDEMD_LISTEN": "127.0.0.1:%d" % other_port},
                               port=other_port)
        self.assertFalse(harness.port_open(self.idemd.port),
                         "serve listens on the file's port despite IDEMD_LISTEN")
        c = Client(other_port, key)
        r = c.get("/readyz")
        assert_status(self, r, 200)
        r = c.put("/v1/operations/env.check", harness.DEFAULT_POLICY)
        assert_status(self, r, 201)
        self.assertEqual(srv.stop(), 0, srv.stderr_text())


class Migrate(unittest.TestCase):
    def setUp(self):
        self.idemd = Idemd()

    def tearDown(self):
        for s in self.idemd.servers:
            s.kill()
        self.idemd.cleanup()

    def applied(self):
        out = psql("SELECT name || '|' || applied_at FROM schema_migrations ORDER BY name",
                   db=self.idemd.db)
        return out.splitlines()

    def test_migrate_creates_master_key_0600(self):
        self.assertFalse(os.path.exists(self.idemd.master_key_file))
        self.idemd.migrate()
        st = os.stat(self.idemd.master_key_file)
        self.assertEqual(st.st_mode & 0o777, 0o600)
        with open(self.idemd.master_key_file) as f:
            self.assertRegex(f.read(), r"^[0-9a-f]{64}\n?$")

    def test_migrate_twice_is_noop(self):
        self.idemd.migrate()
        first = self.applied()
        self.assertEqual(len(first), len(migration_files()))
        keys1 = psql("SELECT count(*) FROM signing_keys", db=self.idemd.db).strip()
        mk1 = read(self.idemd.master_key_file)
        p = self.idemd.migrate()
        self.assertEqual(self.applied(), first, "second migrate changed schema_migrations")
        self.assertEqual(psql("SELECT count(*) FROM signing_keys", db=self.idemd.db).strip(), keys1)
        self.assertEqual(read(self.idemd.master_key_file), mk1,
                         "second migrate rewrote the master key")
        self.assertEqual(p.returncode, 0)

    @staticmethod
    def concurrent_migrate(idemd, n=2):
        results = [None] * n

        def run(i):
            results[i] = idemd.run("migrate")

        ts = [threading.Thread(target=run, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return results

    def test_concurrent_migrates(self):
        for p in self.concurrent_migrate(self.idemd):
            self.assertEqual(p.returncode, 0, "stdout: %s\nstderr: %s" % (p.stdout, p.stderr))
        rows = self.applied()
        names = [r.split("|")[0] for r in rows]
        files = migration_files()
        self.assertEqual(len(names), len(files), rows)
        for n, f in zip(names, files):
            self.assertIn(n, (f, f[:-4]), rows)
        # The master key on disk must be the one the signing keys are sealed
        # under: a server must be able to issue and verify tokens.
        key = self.idemd.tenant_create("conc")
        srv = self.idemd.start()
        c = srv.client(key)
        assert_status(self, c.put("/v1/operations/conc.op", harness.DEFAULT_POLICY), 201)
        r = c.post("/v1/tokens", {"operation": "conc.op", "subject": "u1"})
        tok = assert_status(self, r, 201)["token"]
        assert_status(self, c.post("/v1/tokens/%s/claim" % tok, {}), 201)
        self.assertEqual(srv.stop(), 0)

    def test_concurrent_migrates_create_one_signing_key(self):
        counts = []
        for _ in range(8):
            inst = Idemd()
            try:
                for p in self.concurrent_migrate(inst, 3):
                    self.assertEqual(p.returncode, 0, p.stderr)
                counts.append(int(psql("SELECT count(*) FROM signing_keys", db=inst.db)))
            finally:
                inst.cleanup()
        self.assertEqual(counts, [1] * 8,
                         "signing keys after three concurrent migrates on a fresh database "
                         "(8 trials): %r" % counts)

    def serve_once(self):
        """Runs `idemd serve`, expected to refuse; returns CompletedProcess."""
        return subprocess.run([BIN, "--config", self.idemd.config_path, "serve"],
                              env=self.idemd.env(), capture_output=True, text=True,
                              timeout=20, cwd=self.idemd.tmp)

    def test_changed_applied_migration_is_refused(self):
        # The database says LAST was applied with other contents than the
        # binary holds (an applied file edited and rebuilt looks the same).
        self.idemd.migrate()
        last = migration_files()[-1]
        psql("UPDATE schema_migrations SET checksum = repeat('0', 64) WHERE name = '%s'" % last,
             db=self.idemd.db)
        p = self.idemd.run("migrate")
        self.assertNotEqual(p.returncode, 0, "changed migration accepted:\n" + p.stdout + p.stderr)
        self.assertIn(last, p.stdout + p.stderr)
        p = self.serve_once()
        self.assertNotEqual(p.returncode, 0, "serve started with a changed migration")
        self.assertIn("%s applied with other contents" % last, p.stderr)

    def test_only_pending_migrations_are_applied(self):
        # Every migration but the last applied by hand, as an earlier idemd
        # would have: migrate applies the last one only, and takes the
        # recorded checksums (BLAKE2b-256 of the file) as its own.
        files = migration_files()
        psql("CREATE TABLE schema_migrations (name text PRIMARY KEY, checksum text NOT NULL, "
             "applied_at timestamptz NOT NULL DEFAULT now())", db=self.idemd.db)
        for f in files[:-1]:
            with open(os.path.join(harness.MIGRATIONS_DIR, f), "rb") as fh:
                data = fh.read()
            p = subprocess.run([harness.PSQL, "-X", "-q", "-1", "-v", "ON_ERROR_STOP=1",
                                "-d", self.idemd.db, "-f", "-"], input=data,
                               env=harness.pg_env(), capture_output=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
            psql("INSERT INTO schema_migrations(name, checksum, applied_at) "
                 "VALUES ('%s', '%s', '2020-01-01T00:00:00Z')"
                 % (f, hashlib.blake2b(data, digest_size=32).hexdigest()), db=self.idemd.db)
        before = self.applied()
        p = self.idemd.migrate()
        out = p.stdout + p.stderr
        self.assertIn("applied %s" % files[-1], out)
        for f in files[:-1]:
            self.assertNotIn("applied %s" % f, out)
        after = self.applied()
        self.assertEqual(after[:len(before)], before, "migrate touched the applied rows")
        self.assertEqual([r.split("|")[0] for r in after], files)

    def test_serve_refuses_unmigrated_database(self):
        p = subprocess.run([BIN, "--config", self.idemd.config_path, "serve"],
                           env=self.idemd.env(), capture_output=True, text=True, timeout=20,
                           cwd=self.idemd.tmp)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("migrate", (p.stdout + p.stderr).lower())

    def test_serve_refuses_unmigrated_database_naming_every_migration(self):
        # a master key, so that serve gets as far as the schema
        fd = os.open(self.idemd.master_key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        p = self.serve_once()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("the database schema is behind: %s not applied; run 'idemd migrate'"
                      % ", ".join(migration_files()), p.stderr)

    def test_serve_refuses_schema_behind(self):
        # The binary knows a migration the database lacks: its row is gone.
        self.idemd.migrate()
        last = migration_files()[-1]
        psql("DELETE FROM schema_migrations WHERE name = '%s'" % last, db=self.idemd.db)
        p = self.serve_once()
        self.assertNotEqual(p.returncode, 0, "serve started with a pending migration")
        self.assertIn("serve: the database schema is behind: %s not applied; "
                      "run 'idemd migrate'" % last, p.stderr)


class TenantCreate(MigratedCase):
    def test_check_config_refuses_a_route_of_an_unknown_tenant(self):
        name = uniq("tenant")
        self.idemd.tenant_create(name)
        path = os.path.join(self.idemd.tmp, "routes.json")
        for tenant, rc in ((name, 0), (uniq("nosuch"), 2)):
            with open(path, "w") as f:
                json.dump({"database_url": conninfo(self.idemd.db),
                           "routes": [{"method": "POST", "path": "/orders", "tenant": tenant,
                                       "operation": "order.create",
                                       "upstream": "http://127.0.0.1:9/"}]}, f)
            p = subprocess.run([BIN, "--config", path, "check-config"], capture_output=True,
                               text=True, timeout=10)
            self.assertEqual(p.returncode, rc, p.stderr)
        self.assertIn('routes[0] (POST /orders) names tenant "%s", which does not exist'
                      % tenant, p.stderr)

    def test_prints_tenant_and_api_key(self):
        name = uniq("tenant")
        p = self.idemd.run("tenant", "create", name)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = [ln for ln in p.stdout.splitlines() if ln.strip()]
        self.assertEqual(len(lines), 1, p.stdout)
        obj = json.loads(lines[0])
        self.assertEqual(set(obj), {"tenant", "api_key", "key_id"})
        self.assertIsInstance(obj["key_id"], int)
        self.assertEqual(obj["tenant"], name)
        self.assertIsInstance(obj["api_key"], str)
        self.assertGreaterEqual(len(obj["api_key"]), 32)
        self.assertTrue(obj["api_key"].startswith("idk_"), obj["api_key"])

    def test_duplicate_name_fails(self):
        name = uniq("dup")
        self.idemd.tenant_create(name)
        p = self.idemd.run("tenant", "create", name)
        self.assertNotEqual(p.returncode, 0, p.stdout)
        self.assertNotIn("api_key", p.stdout)

    def test_api_key_not_stored_in_clear(self):
        key = self.idemd.tenant_create(uniq("clear"))
        rows = psql("SELECT row_to_json(a)::text FROM api_keys a", db=self.idemd.db)
        self.assertTrue(rows.strip(), "api_keys is empty")
        secret = key[4:] if key.startswith("idk_") else key
        dump = harness.pg_dump(self.idemd.db)
        for hay, what in ((rows, "api_keys rows"), (dump, "pg_dump of the database")):
            self.assertNotIn(key, hay, "API key in clear in %s" % what)
            self.assertNotIn(secret, hay, "API key secret part in clear in %s" % what)
            self.assertNotIn(key.encode().hex(), hay, "API key hex-encoded in %s" % what)

    def test_keys_rotate_prints_key_id(self):
        p = self.idemd.run("keys", "rotate")
        self.assertEqual(p.returncode, 0, p.stderr)
        obj = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertIsInstance(obj.get("key_id"), int)
        k2 = self.idemd.keys_rotate()
        self.assertGreater(k2, obj["key_id"])


if __name__ == "__main__":
    harness.main()
