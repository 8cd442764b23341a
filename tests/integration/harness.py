"""Shared helpers for the idemd integration tests.

Each test module is one ctest test, run as `python3 test_x.py`. The runner
provides:
  IDEMD_BIN           path of the idemd binary
  IDEMD_SOURCE_DIR    repository root (migrations in $IDEMD_SOURCE_DIR/migrations)
  IDEMD_TEST_PGHOST   unix socket directory of a throwaway PostgreSQL 15 cluster
  IDEMD_TEST_PGUSER   superuser role to connect as
  IDEMD_TEST_PGDATA   data directory of that cluster (database restart test only)
  IDEMD_TEST_PGCTL    command prefix that runs pg_ctl as the cluster's owner
                      (database restart test only)
  IDEMD_TEST_PROXY    optional HOST:PORT of the contract stage's validating
                      proxy (tests/contract/proxy.py): a Client talking to
                      the port of a server started here then sends its
                      requests through a relay in front of that port (raw
                      sockets and other ports are not relayed)
Without a PostgreSQL cluster the modules exit with status 77 (skipped).

Every test class gets a fresh database with a random name, a temporary
directory holding its config file and master key, and (usually) one
`idemd serve` process whose stderr (one JSON object per line) is captured.
"""

import calendar
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE_DIR = os.environ.get("IDEMD_SOURCE_DIR") or os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("IDEMD_BIN") or os.path.join(SOURCE_DIR, "build", "idemd")
PGHOST = os.environ.get("IDEMD_TEST_PGHOST", "")
PGUSER = os.environ.get("IDEMD_TEST_PGUSER", "")
PGDATA = os.environ.get("IDEMD_TEST_PGDATA", "")
PGCTL = os.environ.get("IDEMD_TEST_PGCTL", "")
PSQL = shutil.which("psql") or "/usr/bin/psql"
PG_DUMP = shutil.which("pg_dump") or "/usr/bin/pg_dump"
MIGRATIONS_DIR = os.path.join(SOURCE_DIR, "migrations")

SKIP_EXIT = 77
READY_TIMEOUT = 10.0
STOP_TIMEOUT = 10.0


def main():
    """Runs the calling module's tests; exits 0 on success, 1 on failure."""
    if not PGHOST or not PGUSER:
        print("SKIP: IDEMD_TEST_PGHOST and IDEMD_TEST_PGUSER are not set "
              "(no PostgreSQL cluster to test against)", file=sys.stderr)
        sys.exit(SKIP_EXIT)
    if not os.access(BIN, os.X_OK):
        print("FAIL: idemd binary not found or not executable: %s" % BIN,
              file=sys.stderr)
        sys.exit(1)
    prog = unittest.main(module="__main__", exit=False, verbosity=2)
    sys.exit(0 if prog.result.wasSuccessful() else 1)


def uniq(prefix="x"):
    """A short unique name: lowercase letters, digits and dots only."""
    return "%s.%s" % (prefix, uuid.uuid4().hex[:10])


def parse_time(s):
    """An RFC 3339 UTC time as idemd writes it -> seconds since the epoch."""
    base, _, frac = s.rstrip("Z").partition(".")
    t = calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S"))
    return t + (float("0." + frac) if frac else 0.0)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def rss_kib(pid, field="VmRSS"):
    """FIELD (VmRSS, VmHWM, ...) of process PID's /proc status, in KiB; 0 if absent."""
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith(field + ":"):
                return int(ln.split()[1])
    return 0


def raw_http(port, head, body_after_continue=None, timeout=5.0):
    """Sends HEAD (bytes, through the blank line) on a raw socket.

    If BODY_AFTER_CONTINUE is given, waits for an interim response first and
    sends the body only if it is "100 Continue". Returns (interim, final)
    where each is the raw bytes received (interim is b"" when not asked for).
    """
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(head)
        interim = b""
        if body_after_continue is not None:
            interim = s.recv(65536)
            if interim.startswith(b"HTTP/1.1 100"):
                s.sendall(body_after_continue)
            else:
                return interim, interim
        data = b""
        try:
            while True:
                d = s.recv(65536)
                if not d:
                    break
                data += d
                if b"\r\n\r\n" in data:
                    hdr, _, rest = data.partition(b"\r\n\r\n")
                    m = re.search(rb"(?i)content-length:\s*(\d+)", hdr)
                    if m and len(rest) >= int(m.group(1)):
                        break
        except socket.timeout:
            pass
        return interim, data


# ---------------------------------------------------------------- PostgreSQL

def pg_env():
    env = dict(os.environ)
    env["PGHOST"] = PGHOST
    env["PGUSER"] = PGUSER
    env.pop("PGDATABASE", None)
    env.pop("PGPASSWORD", None)
    return env


def psql(sql, db="postgres", check=True):
    """Runs SQL through psql; returns stdout (unaligned, tuples only)."""
    p = subprocess.run([PSQL, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
                        "-d", db, "-c", sql],
                       env=pg_env(), capture_output=True, text=True, timeout=60)
    if check and p.returncode != 0:
        raise AssertionError("psql failed (%d) on %r: %s" % (p.returncode, sql, p.stderr))
    return p.stdout


def pg_dump(db):
    p = subprocess.run([PG_DUMP, "-d", db], env=pg_env(), capture_output=True,
                       text=True, timeout=120)
    if p.returncode != 0:
        raise AssertionError("pg_dump failed: %s" % p.stderr)
    return p.stdout


def create_database():
    name = "idemd_it_" + uuid.uuid4().hex[:12]
    psql('CREATE DATABASE "%s"' % name)
    return name


def drop_database(name):
    psql('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % name, check=False)


def conninfo(db):
    return "host=%s dbname=%s user=%s" % (PGHOST, db, PGUSER)


def pg_ctl(*args):
    """Runs pg_ctl (through IDEMD_TEST_PGCTL) with ARGS; returns CompletedProcess."""
    cmd = shlex.split(PGCTL) + list(args)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------- HTTP

class Response:
    def __init__(self, method, path, req_headers, req_body, status, reason,
                 headers, body, elapsed):
        self.method = method
        self.path = path
        self.req_headers = req_headers
        self.req_body = req_body
        self.status = status
        self.reason = reason
        self.headers = headers      # lower-cased names
        self.body = body            # bytes
        self.elapsed = elapsed      # seconds
        self._json = None
        self._json_done = False

    @property
    def json(self):
        if not self._json_done:
            self._json_done = True
            try:
                self._json = json.loads(self.body.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                self._json = None
        return self._json

    def header(self, name, default=None):
        return self.headers.get(name.lower(), default)

    def describe(self):
        """The exchange, for failure messages and reports."""
        def clip(b):
            if b is None:
                return ""
            if isinstance(b, bytes):
                b = b.decode("utf-8", "replace")
            return b if len(b) <= 600 else b[:600] + "...(%d bytes)" % len(b)
        hdrs = "".join("  %s: %s\n" % kv for kv in sorted(self.headers.items()))
        rq = "".join("  %s: %s\n" % (k, ("Bearer ***" if k.lower() == "authorization" else v))
                     for k, v in self.req_headers.items())
        return ("\n--- request: %s %s\n%s  %s\n--- response: %d %s (%.3fs)\n%s  %s\n"
                % (self.method, self.path, rq, clip(self.req_body), self.status,
                   self.reason, self.elapsed, hdrs, clip(self.body)))

    def __repr__(self):
        return "<Response %s %s -> %d>" % (self.method, self.path, self.status)


_DEFAULT = object()

PROXY = os.environ.get("IDEMD_TEST_PROXY", "")
_relays = {}        # (upstream port, config file) -> relay port
_configs = {}       # port -> config file of the server listening there


def _relay_port(port):
    """The proxy's relay port for PORT (IDEMD_TEST_PROXY), or PORT itself."""
    if not PROXY:
        return port
    key = (port, _configs.get(port))
    if key not in _relays:
        host, _, cport = PROXY.rpartition(":")
        conn = http.client.HTTPConnection(host or "127.0.0.1", int(cport), timeout=10)
        try:
            conn.request("POST", "/register", json.dumps({"upstream": port, "config": key[1]}),
                         {"Content-Type": "application/json"})
            _relays[key] = json.loads(conn.getresponse().read())["port"]
        finally:
            conn.close()
    return _relays[key]


class Client:
    """Minimal HTTP/1.1 client; one connection per request."""

    def __init__(self, port, api_key=None, host="127.0.0.1", timeout=15.0):
        self.port = port
        self.host = host
        self.api_key = api_key
        self.timeout = timeout

    def with_key(self, api_key):
        return Client(self.port, api_key, self.host, self.timeout)

    def request(self, method, path, body=None, headers=None, api_key=_DEFAULT,
                content_type=_DEFAULT, chunked=False):
        hdrs = {}
        key = self.api_key if api_key is _DEFAULT else api_key
        if key is not None:
            hdrs["Authorization"] = "Bearer " + key
        data = None
        if body is not None:
            if isinstance(body, bytes):
                data = body
            elif isinstance(body, str):
                data = body.encode("utf-8")
            else:
                data = json.dumps(body).encode("utf-8")
            ct = "application/json" if content_type is _DEFAULT else content_type
            if ct is not None:
                hdrs["Content-Type"] = ct
        elif content_type is not _DEFAULT and content_type is not None:
            hdrs["Content-Type"] = content_type
        if headers:
            hdrs.update(headers)
        port = self.port
        if PROXY and self.host == "127.0.0.1" and self.port in _configs:
            port = _relay_port(self.port)  # only idemd's ports, not upstreams
        conn = http.client.HTTPConnection(self.host, port, timeout=self.timeout)
        t0 = time.monotonic()
        try:
            if chunked:
                conn.putrequest(method, path)
                for k, v in hdrs.items():
                    conn.putheader(k, v)
                conn.putheader("Transfer-Encoding", "chunked")
                conn.endheaders()
                step = 256
                try:
                    for i in range(0, len(data or b""), step):
                        piece = data[i:i + step]
                        conn.send(b"%x\r\n%s\r\n" % (len(piece), piece))
                    conn.send(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the server may answer and close before reading it all
            else:
                conn.request(method, path, body=data, headers=hdrs)
            resp = conn.getresponse()
            rbody = resp.read()
            rheaders = {}
            for k, v in resp.getheaders():
                k = k.lower()
                rheaders[k] = rheaders[k] + ", " + v if k in rheaders else v
            return Response(method, path, hdrs, data, resp.status, resp.reason,
                            rheaders, rbody, time.monotonic() - t0)
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body, **kw)

    def put(self, path, body=None, **kw):
        return self.request("PUT", path, body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)


# ---------------------------------------------------------------- idemd

class Idemd:
    """A config file, a database and the CLI around them."""

    def __init__(self, extra_config=None, db=None, create_db=True):
        self.tmp = tempfile.mkdtemp(prefix="idemd-it-")
        self.own_db = db is None and create_db
        self.db = db if db is not None else (create_database() if create_db else None)
        self.port = free_port()
        self.master_key_file = os.path.join(self.tmp, "master.key")
        self.config_path = os.path.join(self.tmp, "idemd.json")
        self.extra_config = dict(extra_config or {})
        self.servers = []
        self.write_config()

    def config(self, **extra):
        cfg = {
            "listen": "127.0.0.1:%d" % self.port,
            "database_url": conninfo(self.db) if self.db else "host=/nonexistent dbname=none",
            "master_key_file": self.master_key_file,
            "pool_size": 4,
            "threads": 4,
            # the tests' leases are a second or two: half a second's margin
            # keeps their routes' timeouts short (test_holder_fence runs the
            # default, 1000)
            "forward_margin_ms": 500,
        }
        cfg.update(self.extra_config)
        cfg.update(extra)
        return cfg

    def write_config(self, **extra):
        with open(self.config_path, "w") as f:
            json.dump(self.config(**extra), f, indent=2)
        return self.config_path

    def env(self, extra=None):
        env = dict(os.environ)
        for k in ("IDEMD_LISTEN", "IDEMD_DATABASE_URL", "IDEMD_CONFIG"):
            env.pop(k, None)
        if extra:
            env.update(extra)
        return env

    def run(self, *args, env=None, timeout=60, config=_DEFAULT):
        """Runs `idemd --config FILE ARGS...`; returns CompletedProcess (text)."""
        cfg = self.config_path if config is _DEFAULT else config
        cmd = [BIN] + (["--config", cfg] if cfg is not None else []) + list(args)
        return subprocess.run(cmd, env=self.env(env), capture_output=True,
                              text=True, timeout=timeout, cwd=self.tmp)

    def migrate(self, env=None):
        p = self.run("migrate", env=env)
        if p.returncode != 0:
            raise AssertionError("idemd migrate failed (%d):\nstdout: %s\nstderr: %s"
                                 % (p.returncode, p.stdout, p.stderr))
        return p

    def tenant_create(self, name):
        p = self.run("tenant", "create", name)
        if p.returncode != 0:
            raise AssertionError("idemd tenant create failed (%d): %s"
                                 % (p.returncode, p.stderr))
        line = [ln for ln in p.stdout.splitlines() if ln.strip()][-1]
        obj = json.loads(line)
        return obj["api_key"]

    def keys_rotate(self):
        p = self.run("keys", "rotate")
        if p.returncode != 0:
            raise AssertionError("idemd keys rotate failed (%d): %s"
                                 % (p.returncode, p.stderr))
        line = [ln for ln in p.stdout.splitlines() if ln.strip()][-1]
        return json.loads(line)["key_id"]

    def start(self, env=None, port=None, wait=True):
        """Starts `idemd serve`; waits for /healthz 200 unless WAIT is false.
        A second server while one runs gets a port of its own (on the same
        port it could not listen, and /healthz would reach the first)."""
        if port is None and any(s.port == self.port and s.proc.poll() is None
                                for s in self.servers):
            port = free_port()
        srv = Server(self, env=env, port=port)
        self.servers.append(srv)
        if wait:
            srv.wait_ready()
        return srv

    def cleanup(self):
        for s in self.servers:
            s.kill()
        if self.own_db:
            drop_database(self.db)
        shutil.rmtree(self.tmp, ignore_errors=True)


class Server:
    def __init__(self, idemd, env=None, port=None):
        self.idemd = idemd
        self.port = port or idemd.port
        n = len(idemd.servers)
        self.log_path = os.path.join(idemd.tmp, "serve-%d.stderr" % n)
        self.out_path = os.path.join(idemd.tmp, "serve-%d.stdout" % n)
        env = dict(env or {})
        if port is not None:
            env["IDEMD_LISTEN"] = "127.0.0.1:%d" % port
        _configs[self.port] = idemd.config_path
        admin = str(idemd.config().get("admin_listen", ""))
        if admin.startswith("127.0.0.1:"):
            _configs[int(admin.rpartition(":")[2])] = idemd.config_path
        self._err = open(self.log_path, "wb")
        self._out = open(self.out_path, "wb")
        self.proc = subprocess.Popen([BIN, "--config", idemd.config_path, "serve"],
                                     env=idemd.env(env), stdout=self._out,
                                     stderr=self._err, cwd=idemd.tmp)
        self.returncode = None

    def client(self, api_key=None):
        return Client(self.port, api_key)

    def wait_ready(self, timeout=READY_TIMEOUT):
        deadline = time.monotonic() + timeout
        c = Client(self.port, timeout=2.0)
        last = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("idemd serve exited with %d before it was ready:\n%s"
                                     % (self.proc.returncode, self.stderr_text()))
            try:
                r = c.get("/healthz")
                if r.status == 200 and self.proc.poll() is None:
                    return
                last = r.status
            except OSError as e:
                last = e
            time.sleep(0.05)
        raise AssertionError("idemd serve not ready on port %d after %.0fs (last: %r):\n%s"
                             % (self.port, timeout, last, self.stderr_text()))

    def wait_exit(self, timeout):
        """Waits up to TIMEOUT seconds for a server that is to exit by itself;
        returns its exit code. Past TIMEOUT it is killed and
        subprocess.TimeoutExpired is raised."""
        try:
            return self.proc.wait(timeout)
        except Exception:
            self.kill()
            raise

    def stop(self, timeout=STOP_TIMEOUT):
        """SIGTERM, wait; returns the exit code (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self._close()
                self.returncode = None
                return None
        self._close()
        self.returncode = self.proc.returncode
        return self.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close()

    def _close(self):
        for f in (self._err, self._out):
            if not f.closed:
                f.close()

    def stderr_text(self):
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def log_records(self):
        """Parsed JSON log lines (non-JSON lines are returned as strings)."""
        out = []
        for ln in self.stderr_text().splitlines():
            if not ln.strip():
                continue
            try:
                out.append(json.loads(ln))
            except ValueError:
                out.append(ln)
        return out


def shut_down(idemd):
    """Stops every running server of IDEMD with SIGTERM, then cleans IDEMD up;
    raises AssertionError if a server did not exit 0."""
    rc = 0
    err = ""
    try:
        for s in idemd.servers:
            if s.proc.poll() is None:
                r = s.stop()
                if r != 0:
                    rc = r
                    err = s.stderr_text()[-3000:]
    finally:
        idemd.cleanup()
    if rc != 0:
        raise AssertionError("idemd serve did not exit 0 on SIGTERM (got %r):\n%s" % (rc, err))


# ---------------------------------------------------------------- assertions

RETRY_AFTER_RE = re.compile(r"^\d+$")


def assert_problem(tc, resp, status, code):
    """Checks an RFC 9457 problem with the given status and code."""
    tc.assertEqual(resp.status, status, "expected %d %s" % (status, code) + resp.describe())
    ct = resp.header("content-type", "")
    tc.assertTrue(ct.split(";")[0].strip().lower() == "application/problem+json",
                  "Content-Type %r is not application/problem+json" % ct + resp.describe())
    p = resp.json
    tc.assertIsInstance(p, dict, "problem body is not a JSON object" + resp.describe())
    for field in ("type", "title", "detail", "code"):
        tc.assertIsInstance(p.get(field), str, "problem field %r missing or not a string"
                            % field + resp.describe())
    tc.assertEqual(p.get("status"), status, "problem status" + resp.describe())
    tc.assertEqual(p.get("code"), code, "problem code" + resp.describe())
    return p


def assert_status(tc, resp, status):
    tc.assertEqual(resp.status, status, "expected %d" % status + resp.describe())
    return resp.json


def assert_retry_after(tc, resp):
    ra = resp.header("retry-after")
    tc.assertIsNotNone(ra, "Retry-After missing" + resp.describe())
    tc.assertRegex(ra.strip(), RETRY_AFTER_RE, "Retry-After not delta-seconds" + resp.describe())


# ---------------------------------------------------------------- base class

DEFAULT_POLICY = {"token_ttl_seconds": 3600, "retention_seconds": 86400, "lease_seconds": 30}


class IdemdCase(unittest.TestCase):
    """One database, one migrated schema, tenants and one running server per class."""

    extra_config = {}
    tenant_names = ("acme", "globex")
    start_server = True

    @classmethod
    def setUpClass(cls):
        cls.idemd = Idemd(cls.extra_config)
        try:
            cls.idemd.migrate()
            cls.keys = {n: cls.idemd.tenant_create(n) for n in cls.tenant_names}
            cls.api_key = cls.keys[cls.tenant_names[0]]
            cls.server = cls.idemd.start() if cls.start_server else None
            port = cls.server.port if cls.server else cls.idemd.port
            cls.client = Client(port, cls.api_key)
            cls.anon = Client(port, None)
            cls.other = Client(port, cls.keys[cls.tenant_names[1]]) if len(cls.tenant_names) > 1 else None
        except BaseException:
            cls.idemd.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        shut_down(cls.idemd)

    @classmethod
    def stop_after_class(cls, helper):
        """Has HELPER.stop() called once the class is done: after
        tearDownClass, or when setUpClass fails. Returns HELPER."""
        cls.addClassCleanup(helper.stop)
        return helper

    @classmethod
    def define_operation(cls, name, client=None, **policy):
        """For setUpClass: PUTs operation NAME with DEFAULT_POLICY updated by
        POLICY; anything but 200 or 201 raises AssertionError."""
        r = (client or cls.client).put("/v1/operations/" + name, dict(DEFAULT_POLICY, **policy))
        assert r.status in (200, 201), r.describe()

    # ---- API helpers (all use tenant 0 unless a client is given)

    def put_operation(self, name=None, client=None, expect=None, **policy):
        name = name or uniq("op")
        body = dict(DEFAULT_POLICY)
        body.update(policy)
        body = {k: v for k, v in body.items() if v is not None}
        r = (client or self.client).put("/v1/operations/" + name, body)
        if expect is not None:
            assert_status(self, r, expect)
        else:
            self.assertIn(r.status, (200, 201), r.describe())
        return name

    def issue_resp(self, operation, subject=None, client=None, **kw):
        body = {"operation": operation, "subject": subject or uniq("user")}
        body.update(kw)
        return (client or self.client).post("/v1/tokens", body)

    def issue(self, operation, subject=None, client=None, **kw):
        r = self.issue_resp(operation, subject, client, **kw)
        j = assert_status(self, r, 201)
        self.assertIsInstance(j, dict, r.describe())
        self.assertIsInstance(j.get("token"), str, r.describe())
        return j["token"]

    def claim(self, token, body=None, if_match=None, client=None, headers=None):
        h = dict(headers or {})
        if if_match is not None:
            h["If-Match"] = if_match
        return (client or self.client).post("/v1/tokens/%s/claim" % token,
                                            {} if body is None else body, headers=h)

    def claim_ok(self, token, body=None, if_match=None, attempt=1):
        r = self.claim(token, body, if_match)
        j = assert_status(self, r, 201)
        self.assertEqual(j.get("state"), "in_progress", r.describe())
        self.assertEqual(j.get("attempt"), attempt, r.describe())
        return j

    def complete(self, token, attempt, status=200, headers=None, body=_DEFAULT,
                 body_base64=None, client=None, extra=None):
        b = {"attempt": attempt, "status": status}
        if headers is not None:
            b["headers"] = headers
        if body is not _DEFAULT:
            b["body"] = body
        if body_base64 is not None:
            b["body_base64"] = body_base64
        if extra:
            b.update(extra)
        return (client or self.client).post("/v1/tokens/%s/complete" % token, b)

    def release(self, token, attempt, client=None):
        return (client or self.client).post("/v1/tokens/%s/release" % token, {"attempt": attempt})

    def introspect(self, token, client=None):
        return (client or self.client).get("/v1/tokens/%s" % token)

    def revoke(self, token, client=None):
        return (client or self.client).delete("/v1/tokens/%s" % token)

    def version(self, key, client=None):
        r = (client or self.client).get("/v1/versions/%s" % key)
        j = assert_status(self, r, 200)
        return j["version"]


class MigratedCase(unittest.TestCase):
    """One config and one migrated database per class, no tenant and no
    server: each test starts what it needs."""

    @classmethod
    def setUpClass(cls):
        cls.idemd = Idemd()
        cls.idemd.migrate()

    @classmethod
    def tearDownClass(cls):
        cls.idemd.cleanup()


def tamper(token, index):
    """TOKEN with the base64url character at INDEX replaced by another one."""
    c = token[index]
    repl = "A" if c != "A" else "B"
    return token[:index] + repl + token[index + 1:]
