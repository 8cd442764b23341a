"""Security: secrets never reach logs or error bodies; the master key file
is refused when group or others can read it; per-tenant issuance rate
limit; TLS on the listener (tested with curl)."""

import base64
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import (Client, Idemd, IdemdCase, assert_problem, assert_retry_after,  # noqa: E402
                     assert_status, conninfo, port_open, uniq)
import faultkit  # noqa: E402

CURL = shutil.which("curl") or "/usr/bin/curl"
OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"
DB_PASSWORD = "Pw-" + secrets.token_hex(12)
ORIGIN = "https://shop.example"


def fragments(secret, size=20):
    """The secret and overlapping pieces of it, so that a truncated or
    split copy is caught too."""
    out = {secret}
    if len(secret) > size:
        for i in range(0, len(secret) - size + 1, size // 2):
            out.add(secret[i:i + size])
    return out


def token_fragments(token):
    """A token and its pieces that differ from token to token: the random
    id (bytes 14..29, characters 19..39) and the MAC (the last 21
    characters). The head (version, key, tenant, operation) and the
    timestamps are shared by tokens issued together."""
    return {token, token[19:40], token[-21:]}


class SecretsNeverLeak(IdemdCase):
    """Exercises every endpoint (success and error paths, gateway route
    included), then scans every log line, every CLI output and every
    response for the API keys, the tokens, the master key and the database
    password."""

    @classmethod
    def setUpClass(cls):
        cls.up = cls.stop_after_class(faultkit.Upstream(status=201))
        cls.extra_config = {
            "cors_origins": [ORIGIN],
            "max_body_bytes": 65536,
            "routes": [{"method": "POST", "path": "/orders", "tenant": "acme",
                        "operation": "order.create", "upstream": cls.up.url + "/orders"}],
        }
        super().setUpClass()
        # serve again with the database password in the conninfo (the test
        # cluster trusts local connections, so libpq never needs it, but
        # idemd holds it and must never print it)
        cls.server.stop()
        cls.idemd.write_config(database_url=conninfo(cls.idemd.db) + " password=" + DB_PASSWORD)
        cls.server = cls.idemd.start()
        cls.client = Client(cls.server.port, cls.api_key)
        cls.anon = Client(cls.server.port)
        cls.other = Client(cls.server.port, cls.keys["globex"])

    def test_no_secret_in_logs_outputs_or_error_bodies(self):
        responses = []     # every response, for the scan
        tokens = []

        def rec(r):
            responses.append(r)
            return r

        c, o, anon = self.client, self.other, self.anon
        op = self.put_operation()
        vop = self.put_operation(version_key="orders:{subject}", require_version=False)
        for name in ("order.create",):
            rec(c.put("/v1/operations/" + name, harness.DEFAULT_POLICY))
        rec(c.get("/v1/operations/" + op))
        rec(c.get("/v1/operations"))
        rec(c.get("/v1/operations/nope"))

        def issue(operation=op, client=c, **kw):
            r = rec(self.issue_resp(operation, "user-1", client, **kw))
            self.assertEqual(r.status, 201, r.describe())
            if "tokens" in r.json:
                tokens.extend(t["token"] for t in r.json["tokens"])
                return [t["token"] for t in r.json["tokens"]]
            tokens.append(r.json["token"])
            return r.json["token"]

        # token lifecycle, success paths
        t1 = issue()
        batch = issue(count=5)
        rec(self.introspect(t1))
        rec(self.claim(t1, {"request": {"cart": 1}}))
        rec(self.claim(t1, {"request": {"cart": 1}}))                 # 409 in progress
        rec(self.claim(t1, {"request": {"cart": 2}}))                 # 422 fingerprint
        rec(self.complete(t1, 2, 201, body={"x": 1}))                 # 409 lease_lost
        rec(self.complete(t1, 1, 201, {"Location": "/o/1"}, {"order": 1}))
        rec(self.claim(t1, {"request": {"cart": 1}}))                 # replay
        rec(self.introspect(t1))
        t2 = batch[0]
        rec(self.claim(t2))
        rec(self.release(t2, 1))
        rec(self.claim(t2))
        rec(self.complete(t2, 2, 200, body_base64=base64.b64encode(b"\x00\x01").decode()))
        rec(self.revoke(batch[1]))
        rec(self.revoke(batch[1]))
        rec(self.claim(batch[1]))                                     # 410 revoked
        rec(self.revoke(t1))                                          # 409 in use
        rec(self.complete(batch[2], 1, 200, body={}))                 # 409 not in progress
        # version counters and guarded operations
        vt = issue(vop)
        rec(c.get("/v1/versions/orders:user-1"))
        rec(c.post("/v1/versions/orders:user-1", headers={"If-Match": '"0"'}))
        rec(c.post("/v1/versions/orders:user-1", headers={"If-Match": '"0"'}))    # 412
        rec(c.post("/v1/versions/orders:user-1"))                                 # 428
        rec(c.post("/v1/versions/orders:user-1", headers={"If-Match": "7"}))      # 400
        rec(self.claim(vt))                                                       # 412
        # token errors
        rec(self.claim(harness.tamper(t1, 20)))                       # 403 invalid
        rec(self.claim(t1[:-12]))                                     # 400 malformed
        rec(self.claim(t1 + "%00"))
        rec(self.introspect(t1, client=o))                            # 403 scope
        rec(self.claim(batch[3], client=o))
        rec(self.revoke(batch[3], client=o))
        expired_op = self.put_operation(token_ttl_seconds=1)
        et = issue(expired_op)
        # authentication errors, with keys that look real
        wrong_key = "idk_" + base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")
        rec(c.get("/v1/operations", api_key=wrong_key))
        rec(c.get("/v1/operations", api_key=self.api_key[:-1]))
        rec(c.get("/v1/operations", api_key=self.api_key + "x"))
        rec(c.get("/v1/operations", headers={"Authorization": "Basic " + base64.b64encode(
            ("acme:" + self.api_key).encode()).decode()}, api_key=None))
        rec(c.get("/v1/tokens/" + t1, api_key=wrong_key))
        # request errors
        rec(c.post("/v1/tokens", {"operation": op, "subject": "u", "pad": "x" * 70000}))
        rec(c.post("/v1/tokens", b"not json"))
        rec(c.post("/v1/tokens", {"operation": op, "subject": "u"}, content_type="text/plain"))
        rec(c.post("/v1/tokens", {"operation": "nope", "subject": "u"}))
        rec(c.request("PATCH", "/v1/tokens", {}))
        rec(c.get("/v1/nothing/" + t1))
        rec(c.post("/v1/tokens/%s/claim" % t1, b'{"request":' + b"[" * 5000 + b"]" * 5000 + b"}"))
        # unauthenticated endpoints and CORS
        rec(anon.get("/healthz"))
        rec(anon.get("/readyz"))
        rec(anon.request("OPTIONS", "/v1/tokens", headers={
            "Origin": ORIGIN, "Access-Control-Request-Method": "POST"}))
        # the gateway route: forward, replay, errors
        gt = issue("order.create")
        gw = Client(self.server.port, timeout=10)
        for h in ({"Idempotency-Key": gt}, {"Idempotency-Key": gt},
                  {"Idempotency-Key": '"%s"' % gt, "Origin": ORIGIN},
                  {"Idempotency-Key": harness.tamper(gt, 20)},
                  {"Idempotency-Key": batch[4]},
                  {"Idempotency-Key": gt[:-3]}, {}):
            rec(gw.request("POST", "/orders", b'{"sku":1}', headers=h, api_key=None))
        time.sleep(2.1)   # a TTL of 1 s lives less than 2 s
        rec(self.claim(et))                                           # 410 expired
        rec(anon.get("/metrics"))
        # CLI commands, their outputs
        cli = []
        for args in (("check-config",), ("migrate",), ("keys", "rotate"),
                     ("tenant", "create", uniq("t"))):
            p = self.idemd.run(*args)
            self.assertEqual(p.returncode, 0, "%s: %s" % (args, p.stderr))
            # tenant create prints its new key on stdout, by design
            cli.append(("idemd %s (stderr)" % " ".join(args), p.stderr))
            if args[0] != "tenant":
                cli.append(("idemd %s (stdout)" % " ".join(args), p.stdout))
        # failures that print the database URL's neighbourhood
        uri = "postgresql://%s:%s@/%s?host=/nonexistent-socket-dir" % (
            harness.PGUSER, DB_PASSWORD, self.idemd.db)
        bad = Idemd(dict(self.extra_config, database_url=uri, database_wait_seconds=2,
                         master_key_file=self.idemd.master_key_file), db=self.idemd.db)
        try:
            for args in (("migrate",), ("check-config",), ("keys", "rotate"),
                         ("tenant", "create", "x")):
                p = bad.run(*args)
                cli.append(("idemd %s with an unreachable database" % " ".join(args),
                            p.stdout + p.stderr))
            srv = bad.start(wait=False)
            try:
                srv.proc.wait(20)
            except subprocess.TimeoutExpired:
                srv.kill()
            srv._close()
            cli.append(("idemd serve with an unreachable database", srv.stderr_text()))
            # a config error next to the password
            bad.write_config(database_url=uri, listen="bogus", unknown_key=DB_PASSWORD[:3])
            p = bad.run("check-config")
            self.assertEqual(p.returncode, 2, p.stderr)
            cli.append(("idemd check-config with an invalid file", p.stdout + p.stderr))
        finally:
            bad.cleanup()

        # ---- the scan
        with open(self.idemd.master_key_file) as f:
            master = f.read().strip()
        secrets_ = {"API key acme": self.api_key, "API key globex": self.keys["globex"],
                    "wrong API key sent": wrong_key, "master key": master,
                    "database password": DB_PASSWORD}
        for i, t in enumerate(tokens):
            secrets_["token %d" % i] = t
        logs = [("serve log %d" % i, s.stderr_text()) for i, s in enumerate(self.idemd.servers)]
        for s in self.idemd.servers:
            with open(s.out_path, "rb") as f:
                logs.append(("serve stdout", f.read().decode("utf-8", "replace")))
        frags = {name: (token_fragments(v) if name.startswith("token") else fragments(v))
                 for name, v in secrets_.items()}
        found = []
        for where, text in logs + cli:
            for name, value in secrets_.items():
                for frag in frags[name]:
                    if frag in text:
                        found.append("%s in %s" % (name, where))
                        break
        issue_bodies = 0
        for r in responses:
            text = r.body.decode("utf-8", "replace") + "\n" + "\n".join(
                "%s: %s" % kv for kv in r.headers.items())
            own = set()
            if r.method == "POST" and r.path == "/v1/tokens" and r.status == 201:
                own = {t for t in tokens if t in text}     # an issue answer carries its tokens
                issue_bodies += 1
            for name, value in secrets_.items():
                if value in own:
                    continue
                for frag in frags[name]:
                    if frag in text:
                        found.append("%s in the answer to %s %s (%d)"
                                     % (name, r.method, r.path[:40], r.status))
                        break
        # the upstream gets the token id, never the token
        for req in self.up.requests:
            text = json.dumps(req["header_list"]) + req["body"].decode("utf-8", "replace")
            for t in tokens:
                if t in text:
                    found.append("a token in a request to the upstream")
        n_lines = sum(t.count("\n") for _, t in logs + cli)
        statuses = sorted({r.status for r in responses})
        print("\n  scanned %d log/CLI lines, %d responses (statuses %s; %d issue answers "
              "excepted for their own tokens) and %d upstream requests for %d secrets "
              "(%d tokens, 2 API keys and a wrong one sent, master key, database password): %d found"
              % (n_lines, len(responses), statuses, issue_bodies, len(self.up.requests),
                 len(secrets_), len(tokens), len(found)))
        self.assertEqual(found, [], "secrets leaked:\n" + "\n".join(found[:20]))
        self.assertGreaterEqual(len(responses), 60)
        self.assertTrue({200, 201, 204, 400, 401, 403, 404, 405, 409, 410, 412, 413, 415, 422,
                         428}.issubset(set(statuses)), statuses)


class DatabasePasswordChecked(IdemdCase):
    """A database password that is really checked: idemd connects through a
    pgbouncer with auth_type scram-sha-256 (the test cluster itself trusts
    local connections). With the right password it serves; with a wrong one
    it fails with an authentication error; neither password is printed.
    Needs pgbouncer (deploy/deps.sh --test), like test_faults_pgbouncer."""
    start_server = False
    tenant_names = ("acme",)

    def test_password_auth_never_printed(self):
        right, wrong = "Right-" + secrets.token_hex(10), "Wrong-" + secrets.token_hex(10)
        bouncer = faultkit.PgBouncer(pool_size=4, auth_type="scram-sha-256", password=right)
        try:
            bouncer.start()
            texts = []
            self.idemd.write_config(database_url=bouncer.conninfo(self.idemd.db, right),
                                    prepared_statements=False)
            srv = self.idemd.start()
            c = Client(srv.port, self.api_key)
            op = self.put_operation(client=c)
            r = c.post("/v1/tokens", {"operation": op, "subject": "u"})
            self.assertEqual(r.status, 201, r.describe())
            tok = r.json["token"]
            for rr in (c.post("/v1/tokens/%s/claim" % tok, {}), c.get("/v1/tokens/" + tok),
                       c.get("/v1/operations"), Client(srv.port).get("/readyz")):
                self.assertLess(rr.status, 300, rr.describe())
                texts.append(rr.body.decode())
            self.assertEqual(srv.stop(), 0)
            texts.append(srv.stderr_text())
            # the wrong password: refused by pgbouncer, reported without it
            self.idemd.write_config(database_url=bouncer.conninfo(self.idemd.db, wrong),
                                    prepared_statements=False)
            bad = self.idemd.start(wait=False)
            try:
                rc = bad.proc.wait(20)
            except subprocess.TimeoutExpired:
                rc = None
            bad.kill()
            err = bad.stderr_text()
            texts.append(err)
            for args in (("migrate",), ("keys", "rotate"), ("check-config",)):
                p = self.idemd.run(*args)
                texts.append(p.stdout + p.stderr)
            self.assertIsNotNone(rc, "serve kept running without a database")
            self.assertNotEqual(rc, 0)
            self.assertRegex(err, r"(?i)password|authentication", err[-1500:])
            leaked = [name for name, pw in (("right", right), ("wrong", wrong))
                      for frag in fragments(pw, 12) if any(frag in t for t in texts)]
            print("\n  database password checked by pgbouncer (scram-sha-256): served with the "
                  "right one; refused the wrong one (exit %s: %s); password printed: %s"
                  % (rc, [ln for ln in err.splitlines() if "authentication" in ln.lower()][:1] or
                     err.strip().splitlines()[-1][:120], sorted(set(leaked)) or "never"))
            self.assertEqual(leaked, [])
        finally:
            bouncer.stop()


class MasterKeyPermissions(IdemdCase):
    start_server = False
    tenant_names = ("acme",)

    def serve_outcome(self, timeout=15):
        srv = self.idemd.start(wait=False)
        try:
            rc = srv.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        listening = port_open(srv.port)
        srv.kill()
        return rc, listening, srv.stderr_text()

    def test_group_or_world_readable_key_refused(self):
        path = self.idemd.master_key_file
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600, "migrate made it 0600")
        results = {}
        for mode in (0o640, 0o604, 0o644, 0o660, 0o606, 0o666, 0o610, 0o601):
            os.chmod(path, mode)
            rc, listening, err = self.serve_outcome()
            results["%04o" % mode] = rc
            with self.subTest(mode="%04o" % mode):
                self.assertIsNotNone(rc, "serve kept running with a %04o master key" % mode)
                self.assertNotEqual(rc, 0)
                self.assertFalse(listening)
                self.assertIn("chmod", err, err[-1000:])
                self.assertIn(path, err)
        print("\n  serve with the master key file at mode: exit code %s" % results)
        os.chmod(path, 0o400)
        srv = self.idemd.start()
        assert_status(self, Client(srv.port).get("/healthz"), 200)
        self.assertEqual(srv.stop(), 0)
        os.chmod(path, 0o600)

    def test_symlinked_key_refused(self):
        path = self.idemd.master_key_file
        real = path + ".real"
        shutil.copy(path, real)
        os.chmod(real, 0o600)
        saved = path + ".saved"
        os.rename(path, saved)
        os.symlink(real, path)
        try:
            rc, listening, err = self.serve_outcome()
            print("\n  serve with a symlinked master key file: exit code %s" % rc)
            self.assertIsNotNone(rc)
            self.assertNotEqual(rc, 0)
            self.assertFalse(listening)
        finally:
            os.unlink(path)
            os.rename(saved, path)


class IssueRateLimit(IdemdCase):
    extra_config = {"issue_rate_per_second": 2, "issue_burst": 2}

    def test_third_quick_issue_429_others_unaffected(self):
        op = self.put_operation()
        r = self.other.put("/v1/operations/" + op, harness.DEFAULT_POLICY)
        self.assertIn(r.status, (200, 201), r.describe())
        time.sleep(1.1)      # full buckets
        tok = self.issue(op)
        self.issue(op)
        t0 = time.monotonic()
        r = self.issue_resp(op)
        assert_problem(self, r, 429, "rate_limited")
        assert_retry_after(self, r)
        ra = int(r.header("retry-after"))
        self.assertGreaterEqual(ra, 1, r.describe())
        self.assertLessEqual(ra, 2, r.describe())
        # the other tenant is not affected, nor are claims of the limited one
        for _ in range(2):
            assert_status(self, self.issue_resp(op, client=self.other), 201)
        self.claim_ok(tok)
        assert_status(self, self.client.get("/v1/operations/" + op), 200)
        # still limited, then allowed again after Retry-After
        assert_problem(self, self.issue_resp(op), 429, "rate_limited")
        time.sleep(max(0.0, ra - (time.monotonic() - t0)) + 0.05)
        assert_status(self, self.issue_resp(op), 201)
        # sustained: about 2 per second get through
        t1 = time.monotonic()
        got = limited = 0
        while time.monotonic() - t1 < 3.0:
            r = self.issue_resp(op)
            if r.status == 201:
                got += 1
            else:
                assert_problem(self, r, 429, "rate_limited")
                limited += 1
            time.sleep(0.05)
        print("\n  rate 2/s, burst 2: third quick issue 429 with Retry-After %d; other tenant "
              "unaffected; over 3 s of steady requests %d issued, %d limited" % (ra, got, limited))
        self.assertLessEqual(got, 2 * 3 + 2)
        self.assertGreaterEqual(got, 4)


class IssueRateLimitBatches(IdemdCase):
    """A batch issue (count N) spends N tokens of the bucket: batches cannot
    get round the configured rate."""
    extra_config = {"issue_rate_per_second": 2, "issue_burst": 2}
    tenant_names = ("acme",)

    def test_batches_count_every_token(self):
        op = self.put_operation()
        time.sleep(1.1)
        assert_status(self, self.issue_resp(op, count=2), 201)
        r = self.issue_resp(op)
        assert_problem(self, r, 429, "rate_limited")
        time.sleep(1.1)
        # a batch larger than the burst is allowed from a full bucket, and
        # what it takes beyond the burst is paid back before the next issue
        assert_status(self, self.issue_resp(op, count=6), 201)
        r = self.issue_resp(op)
        assert_problem(self, r, 429, "rate_limited")
        ra = int(r.header("retry-after"))
        # sustained batches: no more tokens than the rate allows (plus one
        # batch of overshoot)
        time.sleep(1.1)
        t0 = time.monotonic()
        got = 0
        while time.monotonic() - t0 < 4.0:
            r = self.issue_resp(op, count=10)
            if r.status == 201:
                got += len(r.json["tokens"])
            else:
                assert_problem(self, r, 429, "rate_limited")
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        allowed = 2 * elapsed + 2 + 10
        print("\n  rate 2/s, burst 2: after a batch of 6 the next issue waits %d s; batches of 10 "
              "for %.1f s got %d tokens (the rate allows about %d)" % (ra, elapsed, got, allowed))
        self.assertLessEqual(got, allowed, "batches got round the issuance rate")
        self.assertGreaterEqual(ra, 2, "a batch of 6 did not pay for its tokens beyond the burst")


class IssueRateLimitTenantSlots(IdemdCase):
    """Two tenants whose ids fall into the same bucket slot of the rate
    limiter (ids 1 and 1025) keep separate limits."""
    extra_config = {"issue_rate_per_second": 2, "issue_burst": 2}
    tenant_names = ("acme",)

    def test_tenants_sharing_a_slot_both_limited(self):
        first = int(harness.psql("SELECT id FROM tenants WHERE name = 'acme'",
                                 db=self.idemd.db).strip())
        harness.psql("SELECT setval('tenants_id_seq', %d)" % (first + 1023), db=self.idemd.db)
        other_key = self.idemd.tenant_create("initech")
        second = int(harness.psql("SELECT id FROM tenants WHERE name = 'initech'",
                                  db=self.idemd.db).strip())
        self.assertEqual(second % 1024, first % 1024)
        other = Client(self.server.port, other_key)
        op = self.put_operation()
        self.put_operation(op, client=other)
        time.sleep(1.1)
        got = {"acme": 0, "initech": 0}
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.0:
            for name, c in (("acme", self.client), ("initech", other)):
                r = self.issue_resp(op, client=c)
                if r.status == 201:
                    got[name] += 1
                else:
                    assert_problem(self, r, 429, "rate_limited")
            time.sleep(0.05)
        elapsed = time.monotonic() - t0
        print("\n  tenants %d and %d (same limiter slot), alternating issues for %.1f s at rate "
              "2/s, burst 2: issued %s" % (first, second, elapsed, got))
        for name, n in got.items():
            self.assertLessEqual(n, 2 * elapsed + 2 + 1, "%s got round the limit" % name)


def make_cert(tmp):
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    p = subprocess.run([OPENSSL, "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-keyout", key, "-out", cert, "-days", "2", "-subj", "/CN=127.0.0.1",
                        "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise AssertionError("openssl req failed: %s" % p.stderr)
    os.chmod(key, 0o600)
    return cert, key


def curl(*args, timeout=10):
    p = subprocess.run([CURL, "-sS", "--max-time", str(timeout), "-o", "-",
                        "-w", "\n%{http_code}"] + list(args),
                       capture_output=True, text=True, timeout=timeout + 5)
    body, _, code = p.stdout.rpartition("\n")
    return p.returncode, int(code or 0), body, p.stderr


class Tls(unittest.TestCase):
    """tls_cert_file / tls_key_file: HTTPS with curl --cacert; plain HTTP
    to the TLS port fails."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="idemd-tls-")
        cls.cert, cls.key = make_cert(cls.tmp)
        cls.idemd = Idemd({"tls_cert_file": cls.cert, "tls_key_file": cls.key})
        try:
            cls.idemd.migrate()
            cls.api_key = cls.idemd.tenant_create("acme")
            cls.server = cls.idemd.start(wait=False)
            cls.base = "https://127.0.0.1:%d" % cls.server.port
            deadline = time.monotonic() + 15
            last = None
            while time.monotonic() < deadline:
                if cls.server.proc.poll() is not None:
                    raise AssertionError("idemd serve with TLS exited with %d:\n%s"
                                         % (cls.server.proc.returncode,
                                            cls.server.stderr_text()[-2000:]))
                last = curl("--cacert", cls.cert, cls.base + "/healthz", timeout=2)
                if last[1] == 200:
                    break
                time.sleep(0.1)
            else:
                raise AssertionError("no HTTPS answer on %s within 15 s (last curl: %r):\n%s"
                                     % (cls.base, last, cls.server.stderr_text()[-2000:]))
        except BaseException:
            cls.idemd.cleanup()
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            rc = cls.server.stop()
        finally:
            cls.idemd.cleanup()
            shutil.rmtree(cls.tmp, ignore_errors=True)
        if rc != 0:
            raise AssertionError("idemd serve with TLS did not exit 0 on SIGTERM: %r" % rc)

    def test_https_with_curl(self):
        rc, code, body, err = curl("--cacert", self.cert, self.base + "/healthz")
        self.assertEqual((rc, code), (0, 200), err)
        self.assertEqual(json.loads(body), {"status": "ok"})
        # the API works over TLS
        auth = ["-H", "Authorization: Bearer " + self.api_key,
                "-H", "Content-Type: application/json"]
        rc, code, body, err = curl("--cacert", self.cert, "-X", "PUT", *auth, "--data",
                                   json.dumps(harness.DEFAULT_POLICY),
                                   self.base + "/v1/operations/order.create")
        self.assertIn(code, (200, 201), body + err)
        rc, code, body, err = curl("--cacert", self.cert, *auth, "--data",
                                   '{"operation":"order.create","subject":"u"}',
                                   self.base + "/v1/tokens")
        self.assertEqual(code, 201, body + err)
        tok = json.loads(body)["token"]
        rc, code, body, err = curl("--cacert", self.cert, *auth, "--data", "{}",
                                   self.base + "/v1/tokens/%s/claim" % tok)
        self.assertEqual(code, 201, body + err)
        # by name, as the certificate says
        rc, code, body, err = curl("--cacert", self.cert, "--resolve",
                                   "localhost:%d:127.0.0.1" % self.server.port,
                                   "https://localhost:%d/healthz" % self.server.port)
        self.assertEqual(code, 200, err)
        print("\n  HTTPS: curl --cacert /healthz 200; PUT operation, issue, claim over TLS")

    def test_untrusted_certificate_refused_by_curl(self):
        rc, code, body, err = curl(self.base + "/healthz")
        self.assertNotEqual(rc, 0, "curl accepted a self-signed certificate without --cacert")

    def test_plain_http_to_tls_port_fails(self):
        t0 = time.monotonic()
        rc, code, body, err = curl("http://127.0.0.1:%d/healthz" % self.server.port, timeout=8)
        took = time.monotonic() - t0
        print("\n  plain HTTP to the TLS port: curl exit %d, HTTP code %d, after %.2fs (%s)"
              % (rc, code, took, err.strip()[:80]))
        self.assertNotEqual(code, 200)
        self.assertNotEqual(rc, 0)
        self.assertLess(took, 8, "plain HTTP to the TLS port hung until curl gave up")
        # and the listener still serves HTTPS
        rc, code, body, err = curl("--cacert", self.cert, self.base + "/healthz")
        self.assertEqual(code, 200, err)

    def test_key_material_not_logged(self):
        with open(self.key) as f:
            pem = f.read()
        body = "".join(ln for ln in pem.splitlines() if "-----" not in ln)
        log = self.server.stderr_text()
        for frag in fragments(body, 32):
            self.assertNotIn(frag, log)
        self.assertIn("https", log, "the startup line does not say https")


class TlsConfigErrors(unittest.TestCase):
    def test_cert_without_key_and_missing_files(self):
        tmp = tempfile.mkdtemp(prefix="idemd-tls-")
        cert, key = make_cert(tmp)
        d = Idemd({"tls_cert_file": cert})
        try:
            p = d.run("check-config")
            self.assertEqual(p.returncode, 2, p.stderr)
            self.assertIn("tls_key_file", p.stderr)
            d.write_config(tls_cert_file=cert, tls_key_file=os.path.join(tmp, "missing.pem"))
            d.migrate()
            srv = d.start(wait=False)
            try:
                rc = srv.proc.wait(15)
            except subprocess.TimeoutExpired:
                rc = None
            srv.kill()
            self.assertIsNotNone(rc, "serve ran without its TLS key")
            self.assertNotEqual(rc, 0)
            self.assertIn("missing.pem", srv.stderr_text())
        finally:
            d.cleanup()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    harness.main()
