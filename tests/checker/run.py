"""The history checker's run (tests/checker.sh): two idemd instances on one
fresh database, a gateway upstream that logs every execution, several
clients per key against both instances (workload.py), faults injected all
along, then the checker (check.py) over the recorded history.

Faults (one every 2.5-5 s, in turn over the kinds, random parameters):
  sigkill    kill -9 of an idemd, restarted 0.5-1.5 s later
  sigstop    SIGSTOP of an idemd for 1-4 s (longer than most leases), SIGCONT
  terminate  pg_terminate_backend of every connection to the database
  pgcrash    PostgreSQL stopped with pg_ctl stop -m immediate (a crash),
             started again 0.5-1.5 s later (needs IDEMD_TEST_PGCTL)
  pgstall    a transaction holding LOCK TABLE records IN EXCLUSIVE MODE for
             2-4 s: every write waits inside PostgreSQL longer than a lease
  complstall completion statements begun in the next 1.5 s wait 2.5-4 s
             inside PostgreSQL before they reach their rows (a statement
             trigger, as behind another record's lock or in a paused
             backend): holders that stall past their leases while their
             duplicates do not
  batchcut   the records in progress locked for 1.5 s while every statement
             that waits inside idemd.claim (a batch's second statement) is
             terminated: cuts that land between a batch's two statements
  leasechange a PUT on either instance shortening a gateway operation's lease
             below what the routes need: it must be refused (400)
  clockstep  idemd1's clock (libfaketime) steps by 1.5-3 s, back or forth

Beside the faults: ck.short's audit_retention_seconds switches between
AUDIT_SHORT and AUDIT_LONG every 5-12 s, and idemd1 runs with its clock
CHECKER_SKEW seconds off (libfaketime; default +3 or -3 by the seed).

Environment (tests/checker.sh sets it): IDEMD_BIN, IDEMD_TEST_PGHOST,
IDEMD_TEST_PGUSER, IDEMD_TEST_PSQL, IDEMD_TEST_PGCTL, IDEMD_TEST_PGDATA,
CHECKER_DURATION (seconds of workload, default 150), CHECKER_SEED,
CHECKER_OUT (a directory for the history, the logs; default a temporary one).
Prints the checker's report and, last, the line
  checker: N histories, N operations, N faults, N violations
Exits 1 on a violation or when the run could not be made.
"""

import json
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True
import check  # noqa: E402
from history import History  # noqa: E402
from workload import OpSpec, Workload  # noqa: E402

GW_TIMEOUT = 1.5      # seconds: the routes' timeout_ms
MAX_BODY = 65536      # idemd's max_body_bytes: the upstream's big answers pass it
AUDIT_LONG = 900      # seconds: the audit retention of most operations (longer than a run)
AUDIT_SHORT = 5       # ck.short's audit retention switches between this and AUDIT_LONG
# idemd1's clock offset in seconds (libfaketime); default +3 or -3 by the seed
SKEW = os.environ.get("CHECKER_SKEW", "")
FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
SPECS = [
    # the direct API: caller keys whose lives are short (the sweep runs
    # every second), one with its lease longer than its life, and tokens
    OpSpec("ck.short", "ckey", T=2, D=1, R=2, weight=3, audit=AUDIT_LONG),
    OpSpec("ck.lease", "ckey", T=1, D=3, R=2, weight=2, audit=AUDIT_LONG),
    OpSpec("tok.short", "token", T=6, D=1, R=3, weight=2, audit=AUDIT_LONG),
    # batches of caller keys (claims and completions)
    OpSpec("ck.batch", "batch", T=3, D=2, R=2, weight=1.5, audit=AUDIT_LONG),
    # gateway routes: a token key and a header key
    OpSpec("gw.tok", "gwtok", T=8, D=3, R=3, path="/gw/tok", timeout=GW_TIMEOUT, weight=2.5),
    OpSpec("gw.hdr", "gwhdr", T=3, D=3, R=3, path="/gw/hdr", timeout=GW_TIMEOUT, weight=2.5),
]


def log(msg):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), msg), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Bed:
    def __init__(self, out, binary, skew=0.0):
        self.out = out
        self.bin = binary
        self.pghost = os.environ["IDEMD_TEST_PGHOST"]
        self.pguser = os.environ["IDEMD_TEST_PGUSER"]
        self.psql_bin = os.environ.get("IDEMD_TEST_PSQL") or "psql"
        self.pgctl = shlex.split(os.environ.get("IDEMD_TEST_PGCTL", ""))
        self.pgdata = os.environ.get("IDEMD_TEST_PGDATA", "")
        self.db = "idemd_checker_" + os.urandom(5).hex()
        self.ports = [free_port(), free_port()]
        self.procs = [None, None]
        self.logs = [None, None]
        self.upstream = None
        self.upstream_port = None
        self.upstream_log = os.path.join(out, "upstream.jsonl")
        self.api_key = None
        self.skew = 0.0
        # idemd1's clock offset, read by libfaketime from this file on
        # every reading, so that it can step while idemd1 runs
        self.skew_file = os.path.join(out, "faketime")
        if skew != 0:
            if os.path.exists(FAKETIME_LIB):
                self.skew = skew
            else:
                print("no %s (libfaketime): both clocks agree" % FAKETIME_LIB, flush=True)

    def psql(self, sql, db=None, timeout=60):
        env = dict(os.environ, PGHOST=self.pghost, PGUSER=self.pguser)
        return subprocess.run([self.psql_bin, "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
                               "-d", db or self.db, "-c", sql],
                              capture_output=True, text=True, timeout=timeout, env=env)

    def config(self, i):
        path = os.path.join(self.out, "idemd%d.json" % i)
        up = "http://127.0.0.1:%d" % self.upstream_port
        cfg = {"listen": "127.0.0.1:%d" % self.ports[i],
               "database_url": "host=%s dbname=%s user=%s" % (self.pghost, self.db, self.pguser),
               "master_key_file": os.path.join(self.out, "master.key"),
               "pool_size": 4, "threads": 4, "sweep_interval_seconds": 1,
               "database_timeout_ms": 8000, "log_level": "warn", "max_body_bytes": MAX_BODY,
               "routes": [
                   {"method": "POST", "path": "/gw/tok", "tenant": "shop",
                    "operation": "gw.tok", "upstream": up + "/tok",
                    "timeout_ms": int(GW_TIMEOUT * 1000), "connect_timeout_ms": 500},
                   {"method": "POST", "path": "/gw/hdr", "tenant": "shop",
                    "operation": "gw.hdr", "upstream": up + "/hdr", "key": "header:Idempotency-Key",
                    "scope_headers": [], "timeout_ms": int(GW_TIMEOUT * 1000),
                    "connect_timeout_ms": 500}]}
        with open(path, "w") as f:
            json.dump(cfg, f, indent=1)
        return path

    def run_idemd(self, *args):
        p = subprocess.run([self.bin, "--config", self.config(0)] + list(args),
                           capture_output=True, text=True, timeout=60, cwd=self.out)
        if p.returncode != 0:
            raise RuntimeError("idemd %s: %s" % (" ".join(args), p.stderr.strip()))
        return p.stdout

    def start_idemd(self, i):
        self.logs[i] = open(os.path.join(self.out, "idemd%d.log" % i), "ab")
        env = None
        if i == 1 and self.skew:
            # this instance's clock is off by SKEW seconds (libfaketime)
            with open(self.skew_file, "w") as f:
                f.write("%+g\n" % self.skew)
            env = dict(os.environ, LD_PRELOAD=FAKETIME_LIB, FAKETIME_TIMESTAMP_FILE=self.skew_file,
                       FAKETIME_NO_CACHE="1", FAKETIME_DONT_FAKE_MONOTONIC="1")
        self.procs[i] = subprocess.Popen([self.bin, "--config", self.config(i), "serve"],
                                         stdout=self.logs[i], stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.out, env=env)

    def ready(self, i, timeout=30.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.procs[i].poll() is not None:
                raise RuntimeError("idemd%d exited (%s)" % (i, self.procs[i].returncode))
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/readyz" % self.ports[i],
                                            timeout=1) as r:
                    if r.status == 200:
                        return True
            except OSError:
                pass
            time.sleep(0.1)
        return False

    def start(self):
        p = self.psql('CREATE DATABASE "%s"' % self.db, db="postgres")
        if p.returncode != 0:
            raise RuntimeError("CREATE DATABASE: " + p.stderr)
        self.upstream = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "upstream.py"), "--log", self.upstream_log],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True)
        line = self.upstream.stdout.readline()
        if not line.startswith("PORT "):
            raise RuntimeError("upstream did not start")
        self.upstream_port = int(line.split()[1])
        self.run_idemd("migrate")
        # complstall's one-shot stall of the next completion statement
        p = self.psql("CREATE TABLE checker_stall (until timestamptz, seconds float8); "
                      "CREATE FUNCTION checker_stall() RETURNS trigger LANGUAGE plpgsql AS $$ "
                      "DECLARE d float8; BEGIN IF current_query() LIKE '%state = ''completed''%' "
                      "THEN SELECT seconds INTO d FROM checker_stall "
                      "WHERE until > clock_timestamp(); "
                      "IF d IS NOT NULL THEN PERFORM pg_sleep(d); END IF; END IF; RETURN NULL; "
                      "END $$; CREATE TRIGGER checker_stall BEFORE UPDATE ON records "
                      "FOR EACH STATEMENT EXECUTE FUNCTION checker_stall()")
        if p.returncode != 0:
            raise RuntimeError("the completion stall: " + p.stderr)
        out = self.run_idemd("tenant", "create", "shop")
        self.api_key = json.loads(out.strip().splitlines()[-1])["api_key"]
        for i in (0, 1):
            self.start_idemd(i)
        for i in (0, 1):
            if not self.ready(i):
                raise RuntimeError("idemd%d not ready" % i)
        for s in SPECS:
            req = urllib.request.Request(
                "http://127.0.0.1:%d/v1/operations/%s" % (self.ports[0], s.name),
                data=json.dumps(s.policy()).encode(), method="PUT",
                headers={"Authorization": "Bearer " + self.api_key,
                         "Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as r:
                if r.status not in (200, 201):
                    raise RuntimeError("PUT operation %s: %d" % (s.name, r.status))
        # the other instance's operation cache reloads every second
        time.sleep(1.5)

    def date_offset(self):
        """idemd1's Date header minus idemd0's, in seconds."""
        import email.utils
        d = []
        try:
            for i in (0, 1):
                with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % self.ports[i],
                                            timeout=5) as r:
                    d.append(email.utils.parsedate_to_datetime(r.headers["Date"]).timestamp())
        except (OSError, TypeError, ValueError):
            return float("nan")
        return d[1] - d[0]

    def stop(self):
        for i, p in enumerate(self.procs):
            if p is not None and p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.terminate()
                    p.wait(10)
                except (OSError, subprocess.TimeoutExpired):
                    p.kill()
                    p.wait(5)
            if self.logs[i] is not None:
                self.logs[i].close()
        if self.upstream is not None and self.upstream.poll() is None:
            self.upstream.terminate()
            try:
                self.upstream.wait(5)
            except subprocess.TimeoutExpired:
                self.upstream.kill()
        # a crash-restart cut short (SIGTERM) must not leave the cluster down
        # for whoever uses it next
        if self.pgctl and self.pgdata and self.pg_ctl("status", "-D", self.pgdata).returncode != 0:
            self.pg_ctl("start", "-w", "-D", self.pgdata, "-l",
                        os.path.join(self.pgdata, "restart.log"))
        self.psql('DROP DATABASE IF EXISTS "%s" WITH (FORCE)' % self.db, db="postgres")

    # ------------------------------------------------------------ faults

    def pg_ctl(self, *args):
        return subprocess.run(self.pgctl + list(args), capture_output=True, text=True, timeout=90)


class Nemesis:
    def __init__(self, bed, history, rng, kinds):
        self.bed = bed
        self.h = history
        self.rng = rng
        self.kinds = kinds
        self.stop = threading.Event()
        self.counts = {}
        self.errors = []

    def fault(self, kind):
        b, rng = self.bed, self.rng
        node = rng.randrange(2)
        w0 = time.time()
        detail = ""
        if kind == "sigkill":
            b.procs[node].kill()
            b.procs[node].wait(10)
            time.sleep(rng.uniform(0.5, 1.5))
            b.logs[node].close()
            b.start_idemd(node)
            w1 = time.time()
            if not b.ready(node, 30):
                self.errors.append("idemd%d not ready after its restart" % node)
            detail = "restarted"
        elif kind == "sigstop":
            d = rng.uniform(1.0, 4.0)
            b.procs[node].send_signal(signal.SIGSTOP)
            try:
                time.sleep(d)
            finally:
                b.procs[node].send_signal(signal.SIGCONT)
            w1 = time.time()
            detail = "%.1f s" % d
        elif kind == "terminate":
            node = None
            p = b.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
            w1 = time.time()
            detail = "%s connections" % p.stdout.strip()
        elif kind == "pgcrash":
            node = None
            p = b.pg_ctl("stop", "-m", "immediate", "-w", "-D", b.pgdata)
            down = rng.uniform(0.5, 1.5)
            time.sleep(down)
            q = b.pg_ctl("start", "-w", "-D", b.pgdata, "-l",
                         os.path.join(b.pgdata, "restart.log"))
            w1 = time.time()
            if p.returncode != 0 or q.returncode != 0:
                self.errors.append("pg_ctl: %s %s" % (p.stderr.strip(), q.stderr.strip()))
            detail = "down %.1f s" % down
        elif kind == "pgstall":
            node = None
            d = rng.uniform(2.0, 4.0)
            p = b.psql("BEGIN; LOCK TABLE records IN EXCLUSIVE MODE; SELECT pg_sleep(%.2f); "
                       "COMMIT;" % d, timeout=30)
            w1 = time.time()
            if p.returncode != 0:
                self.errors.append("stall: " + p.stderr.strip())
            detail = "records locked %.1f s" % d
        elif kind in ("complstall", "batchcut", "leasechange", "clockstep"):
            node, w1, detail = getattr(self, kind)(node)
        else:
            raise ValueError(kind)
        self.h.fault(kind, w0, w1, node, detail)
        self.counts[kind] = self.counts.get(kind, 0) + 1

    def complstall(self, node):
        d = self.rng.uniform(2.5, 4.0)
        p = self.bed.psql("INSERT INTO checker_stall VALUES (clock_timestamp() + "
                          "interval '1.5 s', %.2f)" % d)
        if p.returncode != 0:
            self.errors.append("complstall: " + p.stderr.strip())
        time.sleep(1.5 + d)
        self.bed.psql("DELETE FROM checker_stall")
        return None, time.time(), "completions begun in 1.5 s wait %.1f s" % d

    def batchcut(self, node):
        # the records in progress locked: a batch's first statement (fresh
        # keys, replays) passes, its second waits on them and is cut there
        locker = threading.Thread(target=self.bed.psql, args=(
            "BEGIN; SELECT count(*) FROM (SELECT 1 FROM records WHERE lease_expires_at IS NOT "
            "NULL FOR UPDATE) l; SELECT pg_sleep(1.5); COMMIT;",), kwargs={"timeout": 30})
        locker.start()
        cut, until = 0, time.monotonic() + 1.6
        while time.monotonic() < until:
            p = self.bed.psql("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE datname = current_database() AND wait_event_type = 'Lock' "
                              "AND query LIKE '%idemd.claim(%'")
            cut += int(p.stdout.strip() or 0)
            time.sleep(0.05)
        locker.join(30)
        self.counts["batch statements cut"] = self.counts.get("batch statements cut", 0) + cut
        return None, time.time(), "%d second statements cut" % cut

    def leasechange(self, node):
        spec = self.rng.choice([s for s in SPECS if s.kind.startswith("gw")])
        req = urllib.request.Request(
            "http://127.0.0.1:%d/v1/operations/%s" % (self.bed.ports[node], spec.name),
            data=json.dumps(dict(spec.policy(), lease_seconds=2)).encode(), method="PUT",
            headers={"Authorization": "Bearer " + self.bed.api_key,
                     "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                status = r.status
        except urllib.error.HTTPError as e:
            status = e.code
        except OSError as e:
            return node, time.time(), "not answered (%s)" % e
        if 200 <= status < 300:
            self.errors.append("leasechange: a 2 s lease under %.1f s routes was accepted (%d)"
                               % (GW_TIMEOUT, status))
            self.bed.psql("UPDATE operations SET lease_seconds = %d WHERE name = '%s'"
                          % (spec.D, spec.name))
        return node, time.time(), "%s lease 2 s: %d" % (spec.name, status)

    def clockstep(self, node):
        if not self.bed.skew:
            return 1, time.time(), "no libfaketime"
        step = self.rng.uniform(1.5, 3.0) * self.rng.choice((-1, 1))
        new = max(-5.0, min(5.0, self.bed.skew + step))
        with open(self.bed.skew_file, "w") as f:
            f.write("%+g\n" % new)
        detail = "idemd1 %+g s -> %+g s" % (self.bed.skew, new)
        self.bed.skew = new
        return 1, time.time(), detail

    def run(self, until):
        order = []
        while not self.stop.is_set() and time.monotonic() < until - 3:
            if not order:
                order = list(self.kinds)
                self.rng.shuffle(order)
            self.stop.wait(self.rng.uniform(2.5, 5.0))
            if self.stop.is_set() or time.monotonic() >= until - 3:
                break
            try:
                self.fault(order.pop())
            except Exception as e:  # noqa: B902 - reported, the run goes on
                self.errors.append("fault: %r" % (e,))


def retention_changer(bed, history, rng, until, stop, counts):
    """Switches ck.short's audit_retention_seconds between AUDIT_SHORT and
    AUDIT_LONG every 5-12 s (PUT /v1/operations, recorded as f policy):
    every event keeps the retention it was given when it happened."""
    from history import Client
    c = Client(history, "policy", bed.ports, bed.api_key)
    spec = [s for s in SPECS if s.name == "ck.short"][0]
    cur = spec.audit
    while not stop.is_set() and time.monotonic() < until - 3:
        stop.wait(rng.uniform(5.0, 12.0))
        if stop.is_set() or time.monotonic() >= until - 3:
            break
        new = AUDIT_SHORT if cur != AUDIT_SHORT else AUDIT_LONG
        r, _ = c.call(rng.randrange(2), "PUT", "/v1/operations/" + spec.name, spec.policy(new),
                      kind="policy", op=spec.name, f="policy")
        if r is not None and r.status in (200, 201):
            cur = new
            counts["retention"] = counts.get("retention", 0) + 1
        # an unanswered change may or may not have happened: the checker
        # takes both values as possible from then on


def main():
    # timeout(1) sends SIGTERM: stop what this run started before going
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    binary = os.path.abspath(os.environ.get("IDEMD_BIN", "build/idemd"))
    duration = float(os.environ.get("CHECKER_DURATION", "150"))
    seed = int(os.environ.get("CHECKER_SEED") or random.randrange(1 << 30))
    out = os.environ.get("CHECKER_OUT") or tempfile.mkdtemp(prefix="idemd-checker.")
    os.makedirs(out, exist_ok=True)
    rng = random.Random(seed)
    kinds = ["sigkill", "sigstop", "terminate", "pgstall", "complstall", "complstall",
             "batchcut", "leasechange", "clockstep"]
    if os.environ.get("IDEMD_TEST_PGCTL") and os.environ.get("IDEMD_TEST_PGDATA"):
        kinds.append("pgcrash")
    else:
        log("no IDEMD_TEST_PGCTL/IDEMD_TEST_PGDATA: PostgreSQL crash-restarts left out")
    log("idemd %s, workload %.0f s, seed %d, output in %s" % (binary, duration, seed, out))
    skew = float(SKEW) if SKEW else (3.0 if seed % 2 else -3.0)
    bed = Bed(out, binary, skew)
    hpath = os.path.join(out, "history.jsonl")
    h = History(hpath)
    ok = False
    nem = None
    wl = None
    t0 = time.monotonic()
    try:
        bed.start()
        h.meta(binary=binary, seed=seed, duration=duration, nodes=bed.ports,
               ops={s.name: s.meta() for s in SPECS}, sweep_interval_seconds=1,
               skew={"node": 1, "seconds": bed.skew})
        if bed.skew:
            log("idemd1 runs with its clock %+g s off (libfaketime): its Date header is %+.0f s "
                "from idemd0's" % (bed.skew, bed.date_offset()))
        log("two idemd on one database (ports %d, %d), upstream on %d"
            % (bed.ports[0], bed.ports[1], bed.upstream_port))
        wl = Workload(h, bed.ports, bed.api_key, SPECS, duration, seed, slots=6, clients=3,
                      stall_p=0.2, big_answer=MAX_BODY + 4096, wait_p=0.2)
        nem = Nemesis(bed, h, random.Random(seed + 1), kinds)
        until = time.monotonic() + duration
        nt = threading.Thread(target=nem.run, args=(until,), daemon=True)
        nt.start()
        rt = threading.Thread(target=retention_changer, args=(
            bed, h, random.Random(seed + 2), until, nem.stop, nem.counts), daemon=True)
        rt.start()
        done = wl.run()
        nem.stop.set()
        nt.join(60)
        rt.join(30)
        log("workload over in %.0f s: %d keys, %d operations, %d faults (%s)"
            % (time.monotonic() - t0, wl.keys, h.ops, h.faults,
               ", ".join("%s %d" % kv for kv in sorted(nem.counts.items()))))
        if not done:
            log("some client threads did not end")
        for e in wl.errors[:5] + nem.errors[:5]:
            log("error: %s" % e)
        ok = done and not wl.errors
    finally:
        if nem is not None:
            nem.stop.set()
        bed.stop()
        h.close()
    ch = check.check_files(hpath, bed.upstream_log)
    print(check.last_line(ch), flush=True)
    if not ok:
        log("the run itself had errors (see above)")
    return 0 if ok and not ch.violations else 1


if __name__ == "__main__":
    sys.exit(main())
