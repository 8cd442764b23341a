"""Integration tests: tenants and their API keys from the command line
(tenant create/list/delete, tenant key add/revoke, with revocation seen by
running instances within 10 s, keep-alive connections included), API key ids
given to keys made before migration 0004, and the master key: refusals of
keys rotate, serve and migrate, master-key rotate, and the key supplied by
IDEMD_MASTER_KEY or a systemd credential."""

import http.client
import json
import os
import stat
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import BIN, Idemd, assert_problem, assert_status, psql, uniq  # noqa: E402

REVOKE_WITHIN = 10.0


def lines(p):
    return [json.loads(ln) for ln in p.stdout.splitlines() if ln.strip()]


class KeepAlive:
    """One persistent HTTP connection (the server's per-connection memo)."""

    def __init__(self, port, key):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        self.key = key

    def status(self, path="/v1/operations"):
        self.conn.request("GET", path, headers={"Authorization": "Bearer " + self.key})
        r = self.conn.getresponse()
        r.read()
        return r.status

    def close(self):
        self.conn.close()


def wait_refused(tc, check, what):
    """Polls CHECK() (an HTTP status) until 401; returns seconds taken."""
    t0 = time.monotonic()
    while True:
        st = check()
        if st == 401:
            return time.monotonic() - t0
        tc.assertEqual(st, 200, "%s: unexpected status" % what)
        if time.monotonic() - t0 > REVOKE_WITHIN + 2:
            tc.fail("%s still accepted after %.1f s" % (what, time.monotonic() - t0))
        time.sleep(0.25)


class Tenants(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.idemd = Idemd()
        cls.idemd.migrate()
        cls.a = cls.idemd.start()
        cls.b = cls.idemd.start(port=harness.free_port())

    @classmethod
    def tearDownClass(cls):
        for s in cls.idemd.servers:
            s.stop()
        cls.idemd.cleanup()

    def create(self, name):
        p = self.idemd.run("tenant", "create", name)
        self.assertEqual(p.returncode, 0, p.stderr)
        (obj,) = lines(p)
        self.assertEqual(set(obj), {"tenant", "api_key", "key_id"})
        return obj

    def listing(self):
        p = self.idemd.run("tenant", "list")
        self.assertEqual(p.returncode, 0, p.stderr)
        return {o["tenant"]: o for o in lines(p)}

    def test_create_list_key_add(self):
        name = uniq("shop")
        t = self.create(name)
        self.assertIsInstance(t["key_id"], int)
        got = self.listing()[name]
        self.assertEqual(set(got), {"tenant", "created_at", "key_ids"})
        self.assertRegex(got["created_at"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual(got["key_ids"], [t["key_id"]])

        p = self.idemd.run("tenant", "key", "add", name)
        self.assertEqual(p.returncode, 0, p.stderr)
        (k2,) = lines(p)
        self.assertEqual(set(k2), {"tenant", "api_key", "key_id"})
        self.assertEqual(k2["tenant"], name)
        self.assertNotEqual(k2["api_key"], t["api_key"])
        self.assertGreater(k2["key_id"], t["key_id"])
        self.assertEqual(self.listing()[name]["key_ids"], [t["key_id"], k2["key_id"]])
        # both keys are the same tenant
        op = uniq("op")
        assert_status(self, self.a.client(t["api_key"]).put("/v1/operations/" + op,
                                                              harness.DEFAULT_POLICY), 201)
        r = self.b.client(k2["api_key"]).get("/v1/operations/" + op)
        assert_status(self, r, 200)

    def test_list_is_json_lines_sorted(self):
        names = sorted(uniq("l") for _ in range(3))
        for n in reversed(names):
            self.create(n)
        p = self.idemd.run("tenant", "list")
        self.assertEqual(p.returncode, 0, p.stderr)
        got = [o["tenant"] for o in lines(p)]
        self.assertEqual(got, sorted(got))
        for n in names:
            self.assertIn(n, got)

    def test_revoke_refused_by_every_instance_within_10s(self):
        name = uniq("rev")
        t = self.create(name)
        p = self.idemd.run("tenant", "key", "add", name)
        (k2,) = lines(p)
        # warm every cache: both instances, fresh and keep-alive connections
        conns = [KeepAlive(s.port, t["api_key"]) for s in (self.a, self.b)]
        try:
            for c in conns:
                self.assertEqual(c.status(), 200)
                self.assertEqual(c.status(), 200)
            for s in (self.a, self.b):
                assert_status(self, s.client(t["api_key"]).get("/v1/operations"), 200)
            p = self.idemd.run("tenant", "key", "revoke", name, str(t["key_id"]))
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(lines(p), [{"tenant": name, "key_id": t["key_id"],
                                         "revoked": True}])
            for s, c in zip((self.a, self.b), conns):
                took = wait_refused(self, c.status, "keep-alive connection on :%d" % s.port)
                self.assertLess(took, REVOKE_WITHIN)
                r = s.client(t["api_key"]).get("/v1/operations")
                assert_problem(self, r, 401, "unauthorized")
        finally:
            for c in conns:
                c.close()
        # the tenant's other key keeps working
        for s in (self.a, self.b):
            assert_status(self, s.client(k2["api_key"]).get("/v1/operations"), 200)
        self.assertEqual(self.listing()[name]["key_ids"], [k2["key_id"]])
        # revoking it again: no such key
        p = self.idemd.run("tenant", "key", "revoke", name, str(t["key_id"]))
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("tenant '%s' has no API key %d" % (name, t["key_id"]), p.stderr)

    def test_revoke_refusals(self):
        a, b = self.create(uniq("ra")), self.create(uniq("rb"))
        # another tenant's key id
        p = self.idemd.run("tenant", "key", "revoke", a["tenant"], str(b["key_id"]))
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("has no API key %d" % b["key_id"], p.stderr)
        self.assertEqual(self.listing()[b["tenant"]]["key_ids"], [b["key_id"]])
        # a tenant that does not exist
        p = self.idemd.run("tenant", "key", "revoke", "no.such.tenant", "1")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("no tenant named 'no.such.tenant'", p.stderr)
        # KEY_ID not a number: a usage error
        for bad in ("x", "0", "1.5", "99999999999", "+1"):
            with self.subTest(key_id=bad):
                p = self.idemd.run("tenant", "key", "revoke", a["tenant"], bad)
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                self.assertIn("KEY_ID must be a positive integer", p.stderr)
                self.assertIn("usage: idemd", p.stderr)
        p = self.idemd.run("tenant", "key", "add", "no.such.tenant")
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("no tenant named 'no.such.tenant'", p.stderr)
        self.assertEqual(p.stdout, "")

    def test_delete_removes_everything_of_the_tenant(self):
        name, other = uniq("del"), uniq("keep")
        t, o = self.create(name), self.create(other)
        ca, co = self.a.client(t["api_key"]), self.a.client(o["api_key"])
        op = uniq("op")
        for c in (ca, co):
            assert_status(self, c.put("/v1/operations/" + op,
                                      dict(harness.DEFAULT_POLICY,
                                           version_key="orders:{subject}")), 201)
            tok = assert_status(self, c.post("/v1/tokens", {"operation": op,
                                                            "subject": "u1"}), 201)["token"]
            assert_status(self, c.post("/v1/tokens/%s/claim" % tok, {}), 201)
        keep = KeepAlive(self.b.port, t["api_key"])
        try:
            self.assertEqual(keep.status(), 200)
            tid = int(psql("SELECT id FROM tenants WHERE name = '%s'" % name, db=self.idemd.db))

            def counts(tenant_id):
                return [int(psql("SELECT count(*) FROM %s WHERE tenant_id = %d"
                                 % (tbl, tenant_id), db=self.idemd.db))
                        for tbl in ("records", "versions", "operations", "api_keys")]

            self.assertEqual(counts(tid), [1, 1, 1, 1])
            p = self.idemd.run("tenant", "delete", name)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(lines(p), [{"tenant": name, "deleted": True}])
            self.assertEqual(counts(tid), [0, 0, 0, 0])
            self.assertNotIn(name, self.listing())
            took = wait_refused(self, keep.status, "a deleted tenant's keep-alive connection")
            self.assertLess(took, REVOKE_WITHIN)
            assert_problem(self, ca.get("/v1/operations"), 401, "unauthorized")
        finally:
            keep.close()
        # the other tenant is untouched
        assert_status(self, co.get("/v1/operations/" + op), 200)
        oid = int(psql("SELECT id FROM tenants WHERE name = '%s'" % other, db=self.idemd.db))
        self.assertEqual(counts(oid), [1, 1, 1, 1])
        # a name that does not exist (any more)
        p = self.idemd.run("tenant", "delete", name)
        self.assertEqual(p.returncode, 1, p.stdout + p.stderr)
        self.assertIn("no tenant named '%s'" % name, p.stderr)
        self.assertEqual(p.stdout, "")


class KeyIdsForOldKeys(unittest.TestCase):
    """Keys made before migration 0004 get ids, in the order they were made."""

    def setUp(self):
        self.idemd = Idemd()

    def tearDown(self):
        self.idemd.cleanup()

    def test_existing_keys_get_ids(self):
        files = sorted(f for f in os.listdir(harness.MIGRATIONS_DIR) if f.endswith(".sql"))
        before = [f for f in files if f < "0004"]
        # an idemd before 0004: its migrations applied, two tenants, three keys
        self.idemd.migrate()
        db = self.idemd.db
        psql("DROP TABLE api_keys, tenants CASCADE; "
             "CREATE TABLE tenants (id serial PRIMARY KEY, name text NOT NULL UNIQUE, "
             "created_at timestamptz NOT NULL DEFAULT now()); "
             "CREATE TABLE api_keys (key_hash bytea PRIMARY KEY, tenant_id int NOT NULL "
             "REFERENCES tenants (id) ON DELETE CASCADE, created_at timestamptz NOT NULL "
             "DEFAULT now()); "
             "INSERT INTO tenants(name) VALUES ('one'), ('two'); "
             "INSERT INTO api_keys VALUES (decode(repeat('bb', 32), 'hex'), 1, "
             "'2020-01-02'), (decode(repeat('aa', 32), 'hex'), 2, '2020-01-03'), "
             "(decode(repeat('cc', 32), 'hex'), 1, '2020-01-01'); "
             "DROP FUNCTION idemd_tenant_delete(text); "
             "DROP FUNCTION idemd_reseal_keys(int[], bytea[], bytea[]); "
             "DELETE FROM schema_migrations WHERE name LIKE '0004%'", db=db)
        self.assertTrue(before)
        p = self.idemd.migrate()
        self.assertIn("0004", p.stdout + p.stderr)
        got = psql("SELECT encode(key_hash, 'hex') || ' ' || id FROM api_keys ORDER BY id",
                   db=db).split()
        self.assertEqual(got, ["cc" * 32, "1", "bb" * 32, "2", "aa" * 32, "3"])
        p = self.idemd.run("tenant", "key", "add", "one")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(lines(p)[0]["key_id"], 4)
        p = self.idemd.run("tenant", "list")
        self.assertEqual([(o["tenant"], o["key_ids"]) for o in lines(p)],
                         [("one", [1, 2, 4]), ("two", [3])])


def read(path):
    with open(path) as f:
        return f.read()


def write_key(path, hexkey=None):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write((hexkey or os.urandom(32).hex()) + "\n")
    return path


class MasterKey(unittest.TestCase):
    def setUp(self):
        self.idemd = Idemd()
        self.idemd.migrate()

    def tearDown(self):
        for s in self.idemd.servers:
            s.kill()
        self.idemd.cleanup()

    def signing_keys(self):
        return psql("SELECT id || ':' || encode(sealed, 'hex') FROM signing_keys ORDER BY id",
                    db=self.idemd.db)

    def serve_once(self, env=None):
        return subprocess.run([BIN, "--config", self.idemd.config_path, "serve"],
                              env=self.idemd.env(env), capture_output=True, text=True,
                              timeout=20, cwd=self.idemd.tmp)

    def other_key_config(self):
        path = write_key(os.path.join(self.idemd.tmp, "other.key"))
        self.idemd.write_config(master_key_file=path)
        return path

    def test_keys_rotate_refuses_wrong_master_key(self):
        before = self.signing_keys()
        path = self.other_key_config()
        p = self.idemd.run("keys", "rotate")
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("the master key file %s cannot open the active signing key" % path,
                      p.stderr)
        self.assertEqual(p.stdout, "")
        self.assertEqual(self.signing_keys(), before, "keys rotate wrote a key")

    def test_serve_refuses_wrong_master_key(self):
        path = self.other_key_config()
        p = self.serve_once()
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("the master key file %s cannot open" % path, p.stderr)
        self.assertIn("serve: refusing to start", p.stderr)

    def test_migrate_refuses_wrong_master_key(self):
        before = self.signing_keys()
        path = self.other_key_config()
        p = self.idemd.run("migrate")
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("the master key file %s cannot open" % path, p.stderr)
        self.assertEqual(self.signing_keys(), before)

    def test_migrate_never_makes_a_master_key_next_to_signing_keys(self):
        before = self.signing_keys()
        missing = os.path.join(self.idemd.tmp, "new-instance.key")
        self.idemd.write_config(master_key_file=missing)
        p = self.idemd.run("migrate")
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("the master key file %s is missing" % missing, p.stderr)
        self.assertIn("every instance must use the same one", p.stderr)
        self.assertFalse(os.path.exists(missing), "migrate created a master key file")
        self.assertEqual(self.signing_keys(), before)
        # keys rotate and serve say the same file is missing
        p = self.idemd.run("keys", "rotate")
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(missing, p.stderr)
        self.assertFalse(os.path.exists(missing))

    def test_master_key_rotate(self):
        key = self.idemd.tenant_create(uniq("mk"))
        srv = self.idemd.start()
        c = srv.client(key)
        op = uniq("op")
        assert_status(self, c.put("/v1/operations/" + op, harness.DEFAULT_POLICY), 201)
        old_tok = assert_status(self, c.post("/v1/tokens", {"operation": op,
                                                           "subject": "u"}), 201)["token"]
        self.idemd.keys_rotate()  # two signing keys, one retired
        self.assertEqual(srv.stop(), 0)
        before = self.signing_keys().split()
        old_master = read(self.idemd.master_key_file)

        new = os.path.join(self.idemd.tmp, "master-2.key")
        p = self.idemd.run("master-key", "rotate", "--new", new)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(lines(p), [{"resealed": 2, "master_key_file": new}])
        self.assertEqual(stat.S_IMODE(os.stat(new).st_mode), 0o600)
        self.assertRegex(read(new), r"^[0-9a-f]{64}\n$")
        after = self.signing_keys().split()
        self.assertEqual([r.split(":")[0] for r in after], [r.split(":")[0] for r in before])
        for b, a in zip(before, after):
            self.assertNotEqual(a, b, "a signing key was not re-sealed")
        # nothing else written: the old file and the config are as they were
        self.assertEqual(read(self.idemd.master_key_file), old_master)
        self.assertEqual(json.loads(read(self.idemd.config_path))["master_key_file"],
                         self.idemd.master_key_file)
        # the old master key opens nothing any more
        p = self.idemd.run("keys", "rotate")
        self.assertEqual(p.returncode, 2, p.stderr)
        p = self.idemd.run("master-key", "rotate", "--new", new)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertEqual(self.signing_keys().split(), after)
        # with the new one, tokens signed before the rotation still verify
        self.idemd.write_config(master_key_file=new)
        srv = self.idemd.start()
        c = srv.client(key)
        assert_status(self, c.post("/v1/tokens/%s/claim" % old_tok, {}), 201)
        tok = assert_status(self, c.post("/v1/tokens", {"operation": op,
                                                       "subject": "u"}), 201)["token"]
        assert_status(self, c.post("/v1/tokens/%s/claim" % tok, {}), 201)
        self.assertEqual(srv.stop(), 0)
        # a FILE holding the current key is refused; an existing FILE is used
        p = self.idemd.run("master-key", "rotate", "--new", new)
        self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
        self.assertIn("holds the current master key", p.stderr)
        third = write_key(os.path.join(self.idemd.tmp, "master-3.key"))
        p = self.idemd.run("master-key", "rotate", "--new=" + third)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(lines(p)[0]["resealed"], 2)

    def test_master_key_rotate_usage(self):
        for args, msg in ((["master-key", "rotate"], "master-key rotate needs --new FILE"),
                          (["master-key"], "master-key needs a command"),
                          (["master-key", "rotate", "--new"], "--new needs a FILE"),
                          (["keys", "rotate", "--new", "x"],
                           "--new goes only with master-key rotate")):
            with self.subTest(args=args):
                p = self.idemd.run(*args)
                self.assertEqual(p.returncode, 2, p.stdout + p.stderr)
                self.assertIn(msg, p.stderr)
                self.assertIn("usage: idemd", p.stderr)

    def test_master_key_from_environment(self):
        hexkey = read(self.idemd.master_key_file).strip()
        key = self.idemd.tenant_create(uniq("env"))
        os.rename(self.idemd.master_key_file, self.idemd.master_key_file + ".away")
        env = {"IDEMD_MASTER_KEY": hexkey}
        p = self.idemd.run("keys", "rotate", env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        srv = self.idemd.start(env=env)
        c = srv.client(key)
        op = uniq("op")
        assert_status(self, c.put("/v1/operations/" + op, harness.DEFAULT_POLICY), 201)
        assert_status(self, c.post("/v1/tokens", {"operation": op, "subject": "u"}), 201)
        self.assertEqual(srv.stop(), 0)
        # migrate with the variable set creates no file
        p = self.idemd.run("migrate", env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertFalse(os.path.exists(self.idemd.master_key_file))
        # a wrong or malformed key in the variable is named
        p = self.idemd.run("keys", "rotate", env={"IDEMD_MASTER_KEY": os.urandom(32).hex()})
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("IDEMD_MASTER_KEY", p.stderr)
        p = self.idemd.run("keys", "rotate", env={"IDEMD_MASTER_KEY": "abc"})
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("IDEMD_MASTER_KEY must hold 64 hex characters", p.stderr)

    def test_master_key_from_systemd_credential(self):
        creds = os.path.join(self.idemd.tmp, "credentials")
        os.mkdir(creds, 0o700)
        os.rename(self.idemd.master_key_file, os.path.join(creds, "master.key"))
        os.chmod(os.path.join(creds, "master.key"), 0o400)
        env = {"CREDENTIALS_DIRECTORY": creds}
        p = self.idemd.run("keys", "rotate", env=env)
        self.assertEqual(p.returncode, 0, p.stderr)
        srv = self.idemd.start(env=env)
        self.assertEqual(srv.stop(), 0)
        self.assertFalse(os.path.exists(self.idemd.master_key_file))
        # without master.key there, master_key_file is used again
        p = self.idemd.run("keys", "rotate", env={"CREDENTIALS_DIRECTORY": self.idemd.tmp})
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("the master key file %s does not exist" % self.idemd.master_key_file,
                      p.stderr)


if __name__ == "__main__":
    harness.main()
