"""Helpers for the fault and hostile-input tests (test_faults_*.py,
test_hostile.py, test_security.py): a worker pool that records every
exchange, the duplicate storm shared by the storm and pgbouncer tests, a fake
upstream for gateway routes, and a private pgbouncer. Its storm() (N calls
released together) also serves test_concurrency.py and test_gateway.py.

Everything listens on 127.0.0.1 only and every wait is bounded.
"""

import collections
import http.server
import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time

import harness
from harness import Client, free_port, port_open, psql


# ---------------------------------------------------------------- figures

def percentile(values, p):
    if not values:
        return 0.0
    v = sorted(values)
    k = min(len(v) - 1, max(0, int(round(p / 100.0 * (len(v) - 1)))))
    return v[k]


def latency_line(values):
    """'p50 X ms, p99 Y ms, max Z ms' for durations in seconds."""
    if not values:
        return "no samples"
    return "p50 %.1f ms, p99 %.1f ms, max %.1f ms" % (
        percentile(values, 50) * 1e3, percentile(values, 99) * 1e3, max(values) * 1e3)


def status_figures(responses):
    """Counter of 'STATUS code' (or 'error:Type') over responses/exceptions."""
    c = collections.Counter()
    for r in responses:
        if isinstance(r, BaseException):
            c["error:" + type(r).__name__] += 1
        elif r is None:
            c["none"] += 1
        else:
            code = (r.json or {}).get("code") if r.status >= 400 and isinstance(r.json, dict) else ""
            c[("%d %s" % (r.status, code or "")).strip()] += 1
    return dict(sorted(c.items()))


def run_workers(n, fn, deadline=None):
    """Runs fn(w) in N threads started together; returns (exceptions, elapsed).

    fn(w) is expected to loop over a shared job source itself. An exception
    escaping fn is returned (one per worker at most), not raised."""
    barrier = threading.Barrier(n)
    errors = [None] * n

    def run(w):
        try:
            barrier.wait(timeout=30)
            fn(w)
        except BaseException as e:  # noqa: B902 - reported to the test
            errors[w] = e

    ts = [threading.Thread(target=run, args=(w,), daemon=True) for w in range(n)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join(None if deadline is None else max(0.1, deadline - time.monotonic()))
    hung = sum(1 for t in ts if t.is_alive())
    if hung:
        raise AssertionError("%d worker threads still running at the deadline" % hung)
    return [e for e in errors if e is not None], time.monotonic() - t0


def storm(n, fn):
    """Runs fn(i) in N threads released together; returns (results, elapsed).
    A connection error is a result too."""
    barrier = threading.Barrier(n)
    results = [None] * n

    def run(i):
        try:
            barrier.wait(timeout=30)
            results[i] = fn(i)
        except Exception as e:  # noqa: B902 - reported to the test
            results[i] = e

    ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(n)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return results, time.monotonic() - t0


class JobQueue:
    """A thread-safe list of jobs handed out in order."""

    def __init__(self, jobs):
        self._jobs = list(jobs)
        self._i = 0
        self._lock = threading.Lock()

    def next(self):
        with self._lock:
            if self._i >= len(self._jobs):
                return None
            j = self._jobs[self._i]
            self._i += 1
            return j


# ---------------------------------------------------------------- duplicate storm

def storm_jobs(n_tokens, n_submits, block_tokens, rng):
    """Token indexes, N_SUBMITS in all over N_TOKENS, in blocks of
    BLOCK_TOKENS tokens whose submits are shuffled together, so that many
    duplicates of one token are in flight at once (409s) and later ones
    arrive after the completion (replays)."""
    per = n_submits // n_tokens
    jobs = []
    for start in range(0, n_tokens, block_tokens):
        block = [t for t in range(start, min(n_tokens, start + block_tokens)) for _ in range(per)]
        rng.shuffle(block)
        jobs.extend(block)
    return jobs


def duplicate_storm(tc, ports, api_key, op, n_tokens=100, n_submits=2000, n_workers=64,
                    block_tokens=10, seed=None, label="storm", deadline_s=300):
    """Runs the duplicate storm against the idemd instances on PORTS and
    asserts its guarantees on TC. Returns a dict of figures.

    Each submit claims its token with the same request; on 201 it completes
    (through the other instance) with a response unique to the token; on
    200 it records the replay; on 409 it checks request_in_progress and
    Retry-After. Afterwards: exactly one 201 per token, every replay equal
    to the stored response and byte-identical to every other replay of that
    token, every token completed with attempt 1."""
    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    clients = [Client(p, api_key, timeout=60) for p in ports]
    toks = []
    while len(toks) < n_tokens:
        r = clients[0].post("/v1/tokens", {"operation": op, "subject": "storm-user",
                                           "count": min(100, n_tokens - len(toks))})
        tc.assertEqual(r.status, 201, r.describe())
        toks.extend(t["token"] for t in r.json["tokens"])
    jobs = JobQueue(storm_jobs(n_tokens, n_submits, block_tokens, rng))

    lock = threading.Lock()
    claims = collections.defaultdict(list)      # token index -> [(status, code, instance)]
    winners = collections.defaultdict(list)     # token index -> [completion response]
    replays = collections.defaultdict(list)     # token index -> [(response, raw body)]
    problems = []                               # unexpected exchanges (descriptions)
    claim_lat, complete_lat = [], []
    per_instance = collections.Counter()

    def expected_response(i):
        return {"status": 201, "headers": {"Location": "/orders/%d" % i},
                "body": {"order_id": i, "token_index": i, "note": "storm"}}

    deadline = time.monotonic() + deadline_s

    def worker(w):
        wr = random.Random(seed * 1000 + w)
        while time.monotonic() < deadline:
            i = jobs.next()
            if i is None:
                return
            inst = w % len(clients)
            c = clients[inst]
            r = c.post("/v1/tokens/%s/claim" % toks[i],
                       {"request": {"cart": "c-%d" % i, "amount": 100 + i}})
            code = (r.json or {}).get("code") if r.status >= 400 else None
            with lock:
                claims[i].append((r.status, code, inst))
                claim_lat.append(r.elapsed)
                per_instance[inst] += 1
            if r.status == 201:
                if r.json.get("attempt") != 1:
                    with lock:
                        problems.append("201 with attempt != 1" + r.describe())
                time.sleep(wr.uniform(0, 0.01))   # the backend does the work
                exp = expected_response(i)
                other = clients[(inst + 1) % len(clients)]
                cr = other.post("/v1/tokens/%s/complete" % toks[i],
                                {"attempt": 1, "status": exp["status"],
                                 "headers": exp["headers"], "body": exp["body"]})
                with lock:
                    complete_lat.append(cr.elapsed)
                    if cr.status != 200:
                        problems.append("complete not 200" + cr.describe())
                    else:
                        winners[i].append(exp)
            elif r.status == 200:
                j = r.json or {}
                ok = (j.get("state") == "completed" and
                      r.header("idempotent-replayed") == "true")
                with lock:
                    replays[i].append((j.get("response"), r.body))
                    if not ok:
                        problems.append("replay without state completed / "
                                        "Idempotent-Replayed: true" + r.describe())
            elif r.status == 409:
                ok = (code == "request_in_progress" and
                      (r.header("retry-after") or "").strip().isdigit())
                if not ok:
                    with lock:
                        problems.append("409 without request_in_progress / Retry-After"
                                        + r.describe())
            else:
                with lock:
                    problems.append("unexpected status" + r.describe())

    errors, elapsed = run_workers(n_workers, worker, deadline + 30)

    # figures
    all_claims = [s for v in claims.values() for s in v]
    fig = collections.Counter()
    for status, code, _ in all_claims:
        fig[("%d %s" % (status, code or "")).strip()] += 1
    n_201 = collections.Counter({i: sum(1 for s, _, _ in claims[i] if s == 201)
                                 for i in range(n_tokens)})
    figures = {
        "label": label,
        "seed": seed,
        "submits": len(all_claims),
        "tokens": n_tokens,
        "workers": n_workers,
        "instances": len(ports),
        "statuses": dict(sorted(fig.items())),
        "per_instance": dict(per_instance),
        "tokens_with_one_201": sum(1 for i in range(n_tokens) if n_201[i] == 1),
        "replays_checked": sum(len(v) for v in replays.values()),
        "elapsed_s": round(elapsed, 2),
        "submits_per_s": round(len(all_claims) / elapsed, 1) if elapsed else 0,
        "claim_latency": latency_line(claim_lat),
        "complete_latency": latency_line(complete_lat),
    }
    print("\n  %s: %d submits over %d tokens, %d workers, %d instances (seed %d) in %.2fs "
          "(%.0f submits/s)" % (label, figures["submits"], n_tokens, n_workers, len(ports), seed,
                                elapsed, figures["submits_per_s"]))
    print("  %s: claim outcomes %s; per instance %s" % (label, figures["statuses"],
                                                       figures["per_instance"]))
    print("  %s: claim %s; complete %s" % (label, figures["claim_latency"],
                                           figures["complete_latency"]))

    tc.assertEqual(errors, [], "worker errors (connection failures count): %r" % errors[:5])
    tc.assertEqual(problems, [], "%d unexpected exchanges, first:\n%s"
                   % (len(problems), "\n".join(problems[:3])))
    tc.assertEqual(len(all_claims), n_submits, "not every submit ran")
    bad = {i: n_201[i] for i in range(n_tokens) if n_201[i] != 1}
    tc.assertEqual(bad, {}, "tokens not claimed exactly once (index: number of 201s)")
    for i in range(n_tokens):
        tc.assertEqual(len(winners[i]), 1, "token %d: completion not acknowledged" % i)
        exp = winners[i][0]
        bodies = set()
        for resp, raw in replays[i]:
            tc.assertEqual(resp, exp, "token %d: a replay differs from the stored response" % i)
            bodies.add(raw)
        tc.assertLessEqual(len(bodies), 1, "token %d: replays are not byte-identical" % i)

    # afterwards, from every instance: completed, attempt 1, the same response
    mismatched = []
    for i in range(n_tokens):
        r = clients[i % len(clients)].get("/v1/tokens/%s" % toks[i])
        j = r.json or {}
        if (r.status != 200 or j.get("state") != "completed" or j.get("attempt") != 1 or
                j.get("response") != winners[i][0]):
            mismatched.append(r.describe())
    tc.assertEqual(mismatched, [], "introspection after the storm:\n%s" % "\n".join(mismatched[:3]))
    print("  %s: every token claimed exactly once (%d/%d), %d replays identical to the "
          "stored response, %d x 409 request_in_progress"
          % (label, figures["tokens_with_one_201"], n_tokens, figures["replays_checked"],
             fig.get("409 request_in_progress", 0)))
    return figures


# ---------------------------------------------------------------- fake upstream

class Upstream:
    """A loopback HTTP server standing in for a gateway route's upstream.

    Records every request (method, path, lower-cased headers, body). Dedupes
    on Idempotency-Key the way a careful upstream would: the first request
    with a key "executes" (a new order number), later ones get the same
    answer. With hold set, each request waits (bounded) for release()
    before it is answered, so a test can kill idemd while forwards are in
    flight."""

    def __init__(self, status=201, hold=False, hold_limit=30.0, delay=0.0):
        self.status = status
        self.hold_limit = hold_limit
        self.delay = delay
        self.requests = []
        self.executions = {}          # Idempotency-Key -> (status, body bytes)
        self.answered = 0
        self.write_failures = 0
        self._cond = threading.Condition()
        self._release = threading.Event()
        if not hold:
            self._release.set()
        up = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def _handle(self):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                rec = {"method": self.command, "path": self.path, "body": body,
                       "headers": {k.lower(): v for k, v in self.headers.items()},
                       "header_list": [(k.lower(), v) for k, v in self.headers.items()],
                       "time": time.monotonic()}
                with up._cond:
                    up.requests.append(rec)
                    up._cond.notify_all()
                up._release.wait(up.hold_limit)
                if up.delay:
                    time.sleep(up.delay)
                key = rec["headers"].get("idempotency-key")
                with up._cond:
                    if key is not None and key in up.executions:
                        status, out = up.executions[key]
                        rec["deduped"] = True
                    else:
                        status = up.status
                        out = json.dumps({"order_id": len(up.executions) + 1,
                                          "key": key}).encode()
                        if key is not None:
                            up.executions[key] = (status, out)
                        rec["deduped"] = False
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(out)))
                    self.send_header("Location", "/orders/%s" % (key or "none"))
                    self.end_headers()
                    self.wfile.write(out)
                    self.wfile.flush()
                    with up._cond:
                        up.answered += 1
                except OSError:
                    with up._cond:
                        up.write_failures += 1

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle

        class Server(http.server.ThreadingHTTPServer):
            request_queue_size = 256     # a burst of forwards must not overflow the backlog

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def release(self):
        self._release.set()

    def hold(self):
        self._release.clear()

    def wait_requests(self, n, timeout=10.0):
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.requests) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def by_key(self):
        out = collections.defaultdict(list)
        with self._cond:
            for rec in self.requests:
                out[rec["headers"].get("idempotency-key")].append(rec)
        return out

    def stop(self):
        self._release.set()
        self.server.shutdown()
        self.server.server_close()


# ---------------------------------------------------------------- pgbouncer

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
PGBOUNCER_MISSING = ("pgbouncer is not installed: install Debian's package "
                     "(apt-get install pgbouncer; deploy/deps.sh --test should list it)")


class PgBouncer:
    """A private pgbouncer in transaction pooling mode on a loopback port,
    in front of the test cluster's unix socket. Under root it runs as the
    owner of the cluster's socket directory (pgbouncer refuses root)."""

    def __init__(self, pool_size=4, max_client_conn=400, auth_type="trust", password=""):
        if not os.access(PGBOUNCER, os.X_OK):
            raise AssertionError(PGBOUNCER_MISSING)
        self.tmp = tempfile.mkdtemp(prefix="idemd-pgb-")
        self.port = free_port()
        self.user = None
        if os.geteuid() == 0:
            owner = os.stat(harness.PGHOST).st_uid
            if owner != 0:
                self.user = pwd.getpwuid(owner).pw_name
                os.chown(self.tmp, owner, -1)
        os.chmod(self.tmp, 0o700)
        self.ini = os.path.join(self.tmp, "pgbouncer.ini")
        self.log = os.path.join(self.tmp, "pgbouncer.log")
        userlist = os.path.join(self.tmp, "userlist.txt")
        with open(userlist, "w") as f:
            f.write('"%s" "%s"\n' % (harness.PGUSER, password))
        with open(self.ini, "w") as f:
            f.write("""[databases]
* = host=%(host)s port=5432

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %(port)d
unix_socket_dir =
auth_type = %(auth)s
auth_file = %(userlist)s
admin_users = %(user)s
pool_mode = transaction
default_pool_size = %(pool)d
min_pool_size = 0
reserve_pool_size = 0
max_client_conn = %(maxc)d
server_reset_query =
server_check_delay = 0
ignore_startup_parameters = extra_float_digits
logfile = %(log)s
pidfile = %(tmp)s/pgbouncer.pid
""" % {"host": harness.PGHOST, "port": self.port, "userlist": userlist,
       "user": harness.PGUSER, "pool": pool_size, "auth": auth_type, "maxc": max_client_conn,
       "log": self.log, "tmp": self.tmp})
        if self.user:
            for p in (self.ini, userlist):
                os.chown(p, os.stat(self.tmp).st_uid, -1)
        self.proc = None

    def start(self, timeout=10.0):
        cmd = [PGBOUNCER] + (["-u", self.user] if self.user else []) + [self.ini]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     cwd=self.tmp)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("pgbouncer exited with %d: %s\n%s" % (
                    self.proc.returncode, self.proc.stderr.read().decode("utf-8", "replace"),
                    self.log_text()))
            if port_open(self.port):
                return
            time.sleep(0.05)
        raise AssertionError("pgbouncer not listening on %d after %.0fs:\n%s"
                             % (self.port, timeout, self.log_text()))

    def conninfo(self, db, password=None):
        ci = "host=127.0.0.1 port=%d dbname=%s user=%s" % (self.port, db, harness.PGUSER)
        return ci + (" password=%s" % password if password is not None else "")

    def show(self, what):
        """Rows of SHOW WHAT on the admin console (list of lists)."""
        p = subprocess.run([harness.PSQL, "-X", "-At", "-F", "|", "-h", "127.0.0.1",
                            "-p", str(self.port), "-U", harness.PGUSER, "-d", "pgbouncer",
                            "-c", "SHOW %s" % what],
                           capture_output=True, text=True, timeout=20)
        if p.returncode != 0:
            raise AssertionError("SHOW %s on pgbouncer failed: %s" % (what, p.stderr))
        return [ln.split("|") for ln in p.stdout.splitlines() if ln]

    def log_text(self):
        try:
            with open(self.log, "rb") as f:
                return f.read().decode("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stderr:
            self.proc.stderr.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


# ---------------------------------------------------------------- misc

def wait_port_closed(port, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not port_open(port):
            return True
        time.sleep(0.05)
    return False


def psql_rows(sql, db):
    return [ln.split("|") for ln in psql(sql, db=db).splitlines() if ln]


def recv_until_closed(sock, timeout):
    """Reads until the peer closes; returns (bytes, seconds, closed)."""
    sock.settimeout(0.2)
    t0 = time.monotonic()
    data = b""
    while time.monotonic() - t0 < timeout:
        try:
            d = sock.recv(65536)
        except socket.timeout:
            continue
        except (ConnectionResetError, OSError):
            return data, time.monotonic() - t0, True
        if not d:
            return data, time.monotonic() - t0, True
        data += d
    return data, time.monotonic() - t0, False
