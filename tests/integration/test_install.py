"""Integration test: `cmake --install` into a scratch DESTDIR (the build tree
of the idemd under test), then that installed binary's migrate, tenant
create and serve against the test cluster, run from a directory with no
source tree; the installed systemd unit passes `systemd-analyze verify`
where that tool exists."""

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
from harness import Client, assert_status, create_database, drop_database  # noqa: E402

BUILD_DIR = os.path.dirname(os.path.abspath(harness.BIN))


def cache_value(name):
    with open(os.path.join(BUILD_DIR, "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(r"^%s:[A-Z]+=(.*)$" % re.escape(name), line)
            if m:
                return m.group(1)
    return None


@unittest.skipUnless(shutil.which("cmake") and
                     os.path.exists(os.path.join(BUILD_DIR, "CMakeCache.txt")),
                     "no cmake or no CMake build tree next to IDEMD_BIN")
class Install(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="idemd-install-")
        self.dest = os.path.join(self.tmp, "root")
        self.db = create_database()
        self.srv = None

    def tearDown(self):
        if self.srv is not None and self.srv.poll() is None:
            self.srv.kill()
            self.srv.wait()
        drop_database(self.db)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_install_then_migrate_and_serve(self):
        env = dict(os.environ, DESTDIR=self.dest)
        p = subprocess.run(["cmake", "--install", BUILD_DIR], env=env, capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        prefix = cache_value("CMAKE_INSTALL_PREFIX") or "/usr/local"
        root = self.dest + prefix
        binary = os.path.join(root, "bin", "idemd")
        self.assertTrue(os.access(binary, os.X_OK), p.stdout)
        unit = os.path.join(root, "lib", "systemd", "system", "idemd.service")
        with open(unit) as f:
            unit_text = f.read()
        self.assertIn("ExecStart=%s/bin/idemd --config " % prefix, unit_text)
        for word in ("Type=simple", "User=idemd", "NoNewPrivileges=yes",
                     "ProtectSystem=strict", "PrivateTmp=yes", "CapabilityBoundingSet=\n"):
            self.assertIn(word, unit_text)
        self.assertTrue(os.path.exists(os.path.join(root, "lib", "sysusers.d", "idemd.conf")))
        etc = "/etc/idemd" if prefix == "/usr" else prefix + "/etc/idemd"
        conf = self.dest + etc + "/idemd.json"
        with open(conf) as f:
            cfg = json.load(f)
        self.assertEqual(cfg["master_key_file"], etc + "/master.key")
        # an operator's edited config survives a second install
        with open(conf, "a") as f:
            f.write(" ")
        p = subprocess.run(["cmake", "--install", BUILD_DIR], env=env, capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        with open(conf) as f:
            self.assertTrue(f.read().endswith(" "), "install overwrote idemd.json")

        # the installed binary alone, run where there is no source tree
        work = os.path.join(self.tmp, "work")
        os.mkdir(work)
        port = harness.free_port()
        cfg.update(listen="127.0.0.1:%d" % port, database_url=harness.conninfo(self.db),
                   master_key_file=os.path.join(work, "master.key"))
        path = os.path.join(work, "idemd.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        run_env = {k: v for k, v in os.environ.items()
                   if not k.startswith("IDEMD_") and k != "CREDENTIALS_DIRECTORY"}

        def run(*args):
            return subprocess.run([binary, "--config", path] + list(args), env=run_env,
                                  cwd=work, capture_output=True, text=True, timeout=60)

        p = run("migrate")
        self.assertEqual(p.returncode, 0, p.stderr)
        p = run("migrate", "--status")
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        p = run("tenant", "create", "installed")
        self.assertEqual(p.returncode, 0, p.stderr)
        key = json.loads(p.stdout)["api_key"]
        self.srv = subprocess.Popen([binary, "--config", path, "serve"], env=run_env, cwd=work,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        c = Client(port, key)
        for _ in range(100):
            if harness.port_open(port) or self.srv.poll() is not None:
                break
            time.sleep(0.1)
        assert_status(self, c.get("/readyz"), 200)
        assert_status(self, c.put("/v1/operations/inst.op", harness.DEFAULT_POLICY), 201)
        assert_status(self, c.post("/v1/tokens", {"operation": "inst.op", "subject": "u"}), 201)
        self.srv.terminate()
        self.assertEqual(self.srv.wait(timeout=20), 0)
        self.srv.stderr.close()

        # systemd's own check of the unit, with ExecStart pointing at the
        # installed binary (the unit names where it will be, not DESTDIR)
        sa = shutil.which("systemd-analyze")
        if sa:
            copy = os.path.join(self.tmp, "idemd.service")
            with open(copy, "w") as f:
                f.write(unit_text.replace("%s/bin/idemd" % prefix, binary))
            p = subprocess.run([sa, "verify", copy], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            self.assertEqual(p.stderr.strip(), "", p.stderr)


if __name__ == "__main__":
    harness.main()
