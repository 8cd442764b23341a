"""The high-availability test bed, all on 127.0.0.1 under one temporary
directory: one etcd, two Patroni-managed PostgreSQL 15 nodes (synchronous
mode), the history checker's upstream (tests/checker/upstream.py: it logs
every execution), two idemd nodes with a multi-host database_url,
and HAProxy in front of them (health check GET /readyz).

Cluster.start() brings everything up; Cluster.stop() tears everything down
(also after a failure, from any state: frozen processes are resumed first).
Every process is started by this module and stopped by its own PID; the
postmasters, which Patroni detaches, are found through their postmaster.pid.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PG_BIN = "/usr/lib/postgresql/15/bin"
PG_USER = "postgres"
SCOPE = "idemd-ha"
TTL = 10
DB_PASSWORD = "idemd-ha-test"


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url, timeout=2.0):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read().decode())


def http_status(url, timeout=2.0):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


class Proc:
    """A process this module started, its log file and its PID."""

    def __init__(self, name, argv, logdir, env=None, cwd=None):
        self.name = name
        self.log_path = os.path.join(logdir, name + ".log")
        self._log = open(self.log_path, "ab")
        self.p = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, env=env, cwd=cwd or logdir,
                                  start_new_session=True)
        self.pid = self.p.pid
        # for tests/ha.sh's fallback teardown, should this process be killed
        with open(os.path.join(logdir, "pids"), "a") as f:
            f.write("%d\n" % self.pid)

    def alive(self):
        return self.p.poll() is None

    def send(self, sig):
        if self.alive():
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def stop(self, sig=signal.SIGTERM, wait=15.0):
        if self.alive():
            self.send(signal.SIGCONT)
            self.send(sig)
            try:
                self.p.wait(wait)
            except subprocess.TimeoutExpired:
                self.send(signal.SIGKILL)
                self.p.wait(5)
        self._log.close()

    def tail(self, n=40):
        try:
            with open(self.log_path, "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            return "\n".join(lines[-n:])
        except OSError:
            return ""


class PgNode:
    def __init__(self, cluster, name):
        self.cluster = cluster
        self.name = name
        self.dir = os.path.join(cluster.tmp, name)
        self.data = os.path.join(self.dir, "data")
        self.pg_port = free_port()
        self.rest_port = free_port()
        self.config = os.path.join(self.dir, "patroni.yml")
        self.patroni = None

    def write_config(self, etcd_port):
        os.makedirs(self.dir, exist_ok=True)
        # JSON is YAML: no YAML writer needed
        cfg = {
            "scope": SCOPE,
            "name": self.name,
            "log": {"level": "INFO"},
            "restapi": {"listen": "127.0.0.1:%d" % self.rest_port,
                        "connect_address": "127.0.0.1:%d" % self.rest_port},
            # etcd's v2 API on purpose: Patroni 3.0's etcd3 code renews the
            # leader key without comparing its owner, so a primary frozen in
            # the middle of its loop takes the key back from the new primary
            # when it resumes (seen here: the new primary was demoted and its
            # acknowledged writes discarded); the v2 code compares the owner
            # (prevValue) and the old primary steps down
            "etcd": {"host": "127.0.0.1:%d" % etcd_port},
            "bootstrap": {
                "dcs": {
                    "ttl": TTL, "loop_wait": 2, "retry_timeout": 3,
                    "maximum_lag_on_failover": 1048576,
                    "synchronous_mode": True,
                    "postgresql": {
                        "use_pg_rewind": True,
                        "parameters": {
                            "synchronous_commit": "on",
                            "wal_log_hints": "on",
                            "max_connections": 100,
                            "wal_keep_size": "128MB",
                            "fsync": "on",
                        },
                    },
                },
                "initdb": [{"encoding": "UTF8"}, {"auth-local": "trust"}],
            },
            "postgresql": {
                "listen": "127.0.0.1:%d" % self.pg_port,
                "connect_address": "127.0.0.1:%d" % self.pg_port,
                "data_dir": self.data,
                "bin_dir": PG_BIN,
                "pgpass": os.path.join(self.dir, "pgpass"),
                "authentication": {
                    "superuser": {"username": "postgres", "password": DB_PASSWORD},
                    "replication": {"username": "replicator", "password": DB_PASSWORD},
                    "rewind": {"username": "postgres", "password": DB_PASSWORD},
                },
                "parameters": {"unix_socket_directories": self.dir},
                "pg_hba": [
                    "local all all trust",
                    "host all all 127.0.0.1/32 md5",
                    "host replication replicator 127.0.0.1/32 md5",
                ],
            },
            "tags": {"nofailover": False, "noloadbalance": False, "clonefrom": False},
        }
        with open(self.config, "w") as f:
            json.dump(cfg, f, indent=1)
        subprocess.run(["chown", "-R", "%s:%s" % (PG_USER, PG_USER), self.dir], check=True)
        os.chmod(self.dir, 0o700)

    def start(self):
        self.patroni = Proc("patroni-" + self.name,
                            ["setpriv", "--reuid=" + PG_USER, "--regid=" + PG_USER,
                             "--init-groups", "/usr/bin/patroni", self.config],
                            self.cluster.tmp, env=self.cluster.env_pg(), cwd=self.dir)

    def postmaster_pid(self):
        try:
            with open(os.path.join(self.data, "postmaster.pid")) as f:
                pid = int(f.readline().strip())
            os.kill(pid, 0)
            return pid
        except (OSError, ValueError):
            return None

    def postgres_pids(self):
        """The postmaster and its children (the whole server)."""
        pm = self.postmaster_pid()
        if pm is None:
            return []
        out = subprocess.run(["pgrep", "-P", str(pm)], capture_output=True, text=True)
        return [pm] + [int(x) for x in out.stdout.split()]

    def stop(self):
        if self.patroni is not None:
            for pid in self.postgres_pids():
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
            self.patroni.stop(signal.SIGTERM, wait=20.0)
        pm = self.postmaster_pid()
        if pm is not None:
            try:
                os.kill(pm, signal.SIGCONT)
                os.kill(pm, signal.SIGQUIT)
            except OSError:
                pass
            for _ in range(50):
                if self.postmaster_pid() is None:
                    break
                time.sleep(0.1)
            pm = self.postmaster_pid()
            if pm is not None:
                try:
                    os.kill(pm, signal.SIGKILL)
                except OSError:
                    pass


class Cluster:
    def __init__(self, idemd_bin, ha_dir=HERE):
        self.bin = idemd_bin
        # tests/ha.sh gives a directory (and removes it); alone, one of our own
        self.own_tmp = not os.environ.get("IDEMD_HA_TMP")
        self.tmp = (tempfile.mkdtemp(prefix="idemd-ha.") if self.own_tmp
                    else os.environ["IDEMD_HA_TMP"])
        os.chmod(self.tmp, 0o711)
        self.etcd = None
        self.etcd_port = free_port()
        self.etcd_peer = free_port()
        self.nodes = [PgNode(self, "pg1"), PgNode(self, "pg2")]
        self.upstream = None
        self.upstream_port = None
        self.upstream_log = os.path.join(self.tmp, "upstream.jsonl")
        # gateway routes (tenant and upstream added): set before start()
        self.routes = []
        self.idemd_ports = [free_port(), free_port()]
        self.idemd = [None, None]
        self.haproxy = None
        self.haproxy_port = free_port()
        self.api_key = None
        self.dbname = "idemd"

    def env_pg(self):
        env = dict(os.environ)
        env["HOME"] = self.tmp
        env["PATH"] = PG_BIN + ":" + env.get("PATH", "/usr/bin:/bin")
        env.pop("PGHOST", None)
        env.pop("PGUSER", None)
        return env

    def database_url(self):
        return ("host=127.0.0.1,127.0.0.1 port=%d,%d dbname=%s user=idemd password=%s "
                "target_session_attrs=read-write connect_timeout=1"
                % (self.nodes[0].pg_port, self.nodes[1].pg_port, self.dbname, DB_PASSWORD))

    # ---------------------------------------------------------------- Patroni

    def members(self):
        """Patroni's view: {name: (role, state)}; {} when no node answers."""
        for n in self.nodes:
            try:
                c = http_json("http://127.0.0.1:%d/cluster" % n.rest_port, timeout=1.0)
                return {m["name"]: (m.get("role"), m.get("state")) for m in c.get("members", [])}
            except (OSError, ValueError):
                continue
        return {}

    def leader(self):
        for name, (role, state) in self.members().items():
            if role == "leader" and state == "running":
                return next(n for n in self.nodes if n.name == name)
        return None

    def wait_healthy(self, timeout=90.0):
        """A running leader and a streaming synchronous standby."""
        deadline = time.monotonic() + timeout
        m = {}
        while time.monotonic() < deadline:
            m = self.members()
            roles = sorted(r for r, s in m.values() if s in ("running", "streaming"))
            if roles == ["leader", "sync_standby"]:
                return self.leader()
            time.sleep(0.5)
        raise AssertionError("Patroni cluster not healthy after %.0f s: %r" % (timeout, m))

    def psql(self, sql, db="postgres"):
        leader = self.leader()
        if leader is None:
            raise AssertionError("no leader")
        p = subprocess.run([PG_BIN + "/psql", "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
                            "-h", leader.dir, "-p", str(leader.pg_port), "-U", "postgres",
                            "-d", db, "-c", sql],
                           capture_output=True, text=True, timeout=60,
                           env=self.env_pg(), user=PG_USER)
        if p.returncode != 0:
            raise AssertionError("psql %r: %s" % (sql, p.stderr))
        return p.stdout

    def patronictl(self, *args):
        return subprocess.run(["patronictl", "-c", self.nodes[0].config] + list(args),
                              capture_output=True, text=True, timeout=60, env=self.env_pg())

    # ---------------------------------------------------------------- idemd

    def idemd_config(self, i):
        path = os.path.join(self.tmp, "idemd%d.json" % i)
        cfg = {
            "listen": "127.0.0.1:%d" % self.idemd_ports[i],
            "database_url": self.database_url(),
            "master_key_file": os.path.join(self.tmp, "master.key"),
            "pool_size": 6,
            "threads": 4,
            "database_timeout_ms": 2000,
            "max_body_bytes": 65536,
            # short lives: keys live several lives during the test
            "sweep_interval_seconds": 1,
            "routes": [dict(r, upstream="http://127.0.0.1:%d%s" % (self.upstream_port, r["path"]),
                            tenant="shop") for r in self.routes],
        }
        with open(path, "w") as f:
            json.dump(cfg, f, indent=1)
        return path

    def idemd_run(self, *args):
        p = subprocess.run([self.bin, "--config", self.idemd_config(0)] + list(args),
                           capture_output=True, text=True, timeout=60, cwd=self.tmp)
        if p.returncode != 0:
            raise AssertionError("idemd %s failed (%d): %s" % (args, p.returncode, p.stderr))
        return p.stdout

    def start_idemd(self, i):
        self.idemd[i] = Proc("idemd%d" % i, [self.bin, "--config", self.idemd_config(i), "serve"],
                             self.tmp, cwd=self.tmp)

    def wait_idemd_ready(self, i, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.idemd[i].alive():
                raise AssertionError("idemd%d exited:\n%s" % (i, self.idemd[i].tail()))
            if http_status("http://127.0.0.1:%d/readyz" % self.idemd_ports[i]) == 200:
                return
            time.sleep(0.2)
        raise AssertionError("idemd%d not ready:\n%s" % (i, self.idemd[i].tail()))

    # ---------------------------------------------------------------- HAProxy

    def write_haproxy(self):
        errfile = os.path.join(self.tmp, "503.http")
        body = json.dumps({"type": "https://idemd.dev/problems/unavailable",
                           "title": "Service Unavailable", "status": 503,
                           "detail": "no idemd node is ready; retry shortly",
                           "code": "unavailable"})
        with open(errfile, "w") as f:
            f.write("HTTP/1.1 503 Service Unavailable\r\n"
                    "Content-Type: application/problem+json\r\n"
                    "Retry-After: 1\r\nCache-Control: no-store\r\nConnection: close\r\n"
                    "Content-Length: %d\r\n\r\n%s" % (len(body), body))
        with open(os.path.join(HERE, "haproxy.cfg.in")) as f:
            text = f.read()
        text = (text.replace("@ADMIN_SOCK@", os.path.join(self.tmp, "haproxy.sock"))
                .replace("@ERRORFILE_503@", errfile)
                .replace("@PORT@", str(self.haproxy_port))
                .replace("@IDEMD1@", "127.0.0.1:%d" % self.idemd_ports[0])
                .replace("@IDEMD2@", "127.0.0.1:%d" % self.idemd_ports[1]))
        path = os.path.join(self.tmp, "haproxy.cfg")
        with open(path, "w") as f:
            f.write(text)
        return path

    def haproxy_states(self):
        """{server: status} from the admin socket ('UP', 'DOWN', ...)."""
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(2)
                s.connect(os.path.join(self.tmp, "haproxy.sock"))
                s.sendall(b"show stat\n")
                data = b""
                while True:
                    d = s.recv(65536)
                    if not d:
                        break
                    data += d
        except OSError:
            return {}
        out = {}
        for line in data.decode().splitlines():
            f = line.split(",")
            if len(f) > 17 and f[0] == "idemd" and f[1] not in ("BACKEND",):
                out[f[1]] = f[17]
        return out

    def wait_haproxy_up(self, timeout=20.0):
        deadline = time.monotonic() + timeout
        st = {}
        while time.monotonic() < deadline:
            st = self.haproxy_states()
            if st and all(v == "UP" for v in st.values()):
                return
            time.sleep(0.2)
        raise AssertionError("HAProxy backends not all UP: %r" % st)

    # ---------------------------------------------------------------- all

    def start(self):
        t0 = time.monotonic()
        log("etcd on 127.0.0.1:%d" % self.etcd_port)
        self.etcd = Proc("etcd", [
            "etcd", "--name", "e1", "--data-dir", os.path.join(self.tmp, "etcd"),
            "--listen-client-urls", "http://127.0.0.1:%d" % self.etcd_port,
            "--advertise-client-urls", "http://127.0.0.1:%d" % self.etcd_port,
            "--listen-peer-urls", "http://127.0.0.1:%d" % self.etcd_peer,
            "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % self.etcd_peer,
            "--initial-cluster", "e1=http://127.0.0.1:%d" % self.etcd_peer,
            "--enable-v2=true"],
            self.tmp)
        deadline = time.monotonic() + 20
        while http_status("http://127.0.0.1:%d/health" % self.etcd_port) != 200:
            if time.monotonic() > deadline or not self.etcd.alive():
                raise AssertionError("etcd did not start:\n" + self.etcd.tail())
            time.sleep(0.1)
        for n in self.nodes:
            n.write_config(self.etcd_port)
        log("Patroni pg1 (PostgreSQL 127.0.0.1:%d)" % self.nodes[0].pg_port)
        self.nodes[0].start()
        deadline = time.monotonic() + 60
        while self.leader() is None:
            if time.monotonic() > deadline or not self.nodes[0].patroni.alive():
                raise AssertionError("pg1 did not become leader:\n" + self.nodes[0].patroni.tail())
            time.sleep(0.3)
        log("Patroni pg2 (PostgreSQL 127.0.0.1:%d)" % self.nodes[1].pg_port)
        self.nodes[1].start()
        self.wait_healthy()
        self.psql("CREATE ROLE idemd LOGIN PASSWORD '%s'" % DB_PASSWORD)
        self.psql("CREATE DATABASE %s OWNER idemd" % self.dbname)

        # the history checker's upstream: it logs every execution
        self.upstream = Proc("upstream", [sys.executable, os.path.join(ROOT, "tests", "checker",
                                                                       "upstream.py"),
                                          "--log", self.upstream_log], self.tmp)
        deadline = time.monotonic() + 10
        while self.upstream_port is None:
            for line in open(self.upstream.log_path).read().splitlines():
                if line.startswith("PORT "):
                    self.upstream_port = int(line.split()[1])
            if time.monotonic() > deadline:
                raise AssertionError("upstream did not start:\n" + self.upstream.tail())
            time.sleep(0.05)

        self.idemd_run("migrate")
        out = self.idemd_run("tenant", "create", "shop")
        self.api_key = json.loads([ln for ln in out.splitlines() if ln.strip()][-1])["api_key"]
        for i in (0, 1):
            self.start_idemd(i)
        for i in (0, 1):
            self.wait_idemd_ready(i)
        log("idemd on 127.0.0.1:%d and :%d" % tuple(self.idemd_ports))
        self.haproxy = Proc("haproxy", ["haproxy", "-db", "-f", self.write_haproxy()], self.tmp)
        self.wait_haproxy_up()
        log("HAProxy on 127.0.0.1:%d; the bed is up in %.1f s"
            % (self.haproxy_port, time.monotonic() - t0))

    def stop(self):
        procs = [self.haproxy] + self.idemd + [self.upstream]
        for p in procs:
            if p is not None:
                p.stop(signal.SIGTERM, wait=10.0)
        # the standby first, so that it does not take over from a leader
        # that is stopping
        leader = self.leader() if self.etcd is not None and self.etcd.alive() else None
        for n in sorted(self.nodes, key=lambda n: n is leader):
            n.stop()
        if self.etcd is not None:
            self.etcd.stop(signal.SIGTERM, wait=10.0)

    def dump_logs(self):
        for p in [self.etcd, self.haproxy, self.upstream] + self.idemd + [
                n.patroni for n in self.nodes]:
            if p is not None:
                print("----- %s (last lines)\n%s" % (p.name, p.tail(25)))

    def remove(self):
        if self.own_tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)
