"""High-availability test: failovers under contending clients, every
request recorded, then the history checker (tests/checker/check.py)
proves from the history alone that nothing acknowledged was lost or
changed and nothing ran twice (run by tests/ha.sh).

The bed (cluster.py): etcd, two Patroni-managed PostgreSQL 15 nodes in
synchronous mode, two idemd nodes with a multi-host database_url behind
HAProxy, the checker's upstream (it logs every execution). The clients
are the checker's (tests/checker/workload.py), all through HAProxy:
several threads per key contend for tokens and caller keys (claim,
complete, release, extend, checkpoint, stale attempts, workers that stall
past their lease and the key's life, introspection, records reads) and
for gateway keys (a token route and a header-key route). Issued tokens
are not writes (issuing stores nothing) and are not counted as such. One
thread bumps a version counter. Faults, one after the other, while the
clients run:
  switchover      patronictl switchover --force
  kill-postmaster kill -9 of the primary's postmaster (Patroni recovers it)
  freeze-primary  SIGSTOP of the primary's Patroni and PostgreSQL for longer
                  than Patroni's ttl (a failover), then SIGCONT (it rejoins);
                  meanwhile duplicates that wait must be woken from the new
                  primary
  kill-idemd      kill -9 of one idemd node (restarted after 5 s)
Then the checker runs over the whole history; its violations are counted
per phase (the phase in which the last request involved ended). Prints a
summary table and the checker's report; exits 0 only with no violation
and no anomaly.

Usage: python3 test_ha.py IDEMD_BIN   (HA_SEED: the clients' seed)
"""

import collections
import os
import random
import signal
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "checker"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import check  # noqa: E402
import cluster as bed  # noqa: E402
import probes  # noqa: E402
from cluster import log  # noqa: E402
from history import History  # noqa: E402
from workload import OpSpec, Workload  # noqa: E402

WARMUP = 4.0        # seconds of clients before the fault
AFTER = 4.0         # seconds of clients after the bed is healthy again
FREEZE = bed.TTL + 10
OP_WAIT = "wait.probe"
WAIT_LEASE = 10
FAULTS = ("switchover", "kill-postmaster", "freeze-primary", "kill-idemd")
GW_TIMEOUT = 1.5
SPECS = [
    OpSpec("ha.key", "ckey", T=3, D=2, R=3, weight=3),
    OpSpec("ha.lease", "ckey", T=1, D=3, R=2, weight=1),
    OpSpec("ha.tok", "token", T=20, D=2, R=5, weight=2),
    OpSpec("ha.gwtok", "gwtok", T=20, D=3, R=5, path="/gw/tok", timeout=GW_TIMEOUT, weight=1.5),
    OpSpec("ha.gwhdr", "gwhdr", T=4, D=3, R=4, path="/gw/hdr", timeout=GW_TIMEOUT, weight=1.5),
]
ROUTES = [
    {"method": "POST", "path": "/gw/tok", "operation": "ha.gwtok",
     "timeout_ms": int(GW_TIMEOUT * 1000), "connect_timeout_ms": 500},
    {"method": "POST", "path": "/gw/hdr", "operation": "ha.gwhdr", "key": "header:Idempotency-Key",
     "scope_headers": [], "timeout_ms": int(GW_TIMEOUT * 1000), "connect_timeout_ms": 500},
]
WRITES = ("claim", "complete", "release", "extend", "checkpoint", "submit")


class Phase:
    def __init__(self, name):
        self.name = name
        self.t_fault = None     # wall clock
        self.t_end = None
        self.window = None
        self.disturbed = None
        self.failures = 0
        self.ops = 0
        self.acked = 0
        self.violations = 0
        self.anomalies = []
        self.waiters = None


def inject(c, name, ph):
    if name == "switchover":
        old = c.leader()
        p = c.patronictl("switchover", "--force")
        log("patronictl switchover --force (leader was %s): rc %d %s"
            % (old.name, p.returncode, p.stdout.strip().splitlines()[-1:] or p.stderr))
        if p.returncode != 0:
            raise AssertionError("switchover failed: %s %s" % (p.stdout, p.stderr))
    elif name == "kill-postmaster":
        leader = c.leader()
        pm = leader.postmaster_pid()
        log("kill -9 postmaster %d of %s" % (pm, leader.name))
        os.kill(pm, signal.SIGKILL)
    elif name == "freeze-primary":
        leader = c.leader()
        pids = [leader.patroni.pid] + leader.postgres_pids()
        log("SIGSTOP %s (Patroni and %d PostgreSQL processes) for %d s"
            % (leader.name, len(pids) - 1, FREEZE))
        t0 = time.monotonic()
        probe = None
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
        try:
            # the standby is promoted while the old primary is still frozen:
            # waiting duplicates must be notified from the new primary now,
            # not when the old one comes back
            api = probes.Api(c.haproxy_port, c.api_key)
            key = "probe:" + str(time.time())
            while time.monotonic() - t0 < FREEZE - 4:
                r = api.send("POST", "/v1/versions/" + key, headers={"If-Match": '"0"'})
                if r is not None and r.status in (200, 412):
                    log("writes resumed %.1f s into the freeze" % (time.monotonic() - t0))
                    probe = threading.Thread(target=lambda: setattr(
                        ph, "waiters", probes.waiter_probe(c.idemd_ports, c.api_key, OP_WAIT,
                                                           WAIT_LEASE)))
                    probe.start()
                    break
                time.sleep(0.2)
            else:
                ph.anomalies.append("no write succeeded during the freeze (no failover?)")
            time.sleep(max(0.0, FREEZE - (time.monotonic() - t0)))
        finally:
            for pid in reversed(pids):
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
        log("SIGCONT %s" % leader.name)
        if probe is not None:
            probe.join(2 * WAIT_LEASE + 10)
    elif name == "kill-idemd":
        log("kill -9 idemd0 (pid %d)" % c.idemd[0].pid)
        c.idemd[0].send(signal.SIGKILL)
        c.idemd[0].p.wait(5)
        time.sleep(5)
        log("restarting idemd0")
        c.start_idemd(0)
    else:
        raise ValueError(name)


def wait_bed(c):
    c.wait_healthy(timeout=120)
    for i in (0, 1):
        c.wait_idemd_ready(i, timeout=60)
    c.wait_haproxy_up(timeout=30)


def windows(ph, ops):
    """The phase's unavailability: from the first write request that failed
    (no answer, 503) after the fault to the first acknowledged write after
    it."""
    ev = [o for o in ops if o["f"] in WRITES and o["w1"] >= ph.t_fault and o["w0"] < ph.t_end]
    fails = [o for o in ev if o["status"] is None or o["status"] == 503]
    ph.failures = len(fails)
    if not fails:
        return
    first_fail = min(o["w0"] for o in fails)
    first_fail_end = min(o["w1"] for o in fails)
    # answered: a write the database acknowledged (a replay from the
    # replay cache needs no database and proves nothing here)
    oks = sorted(o["w1"] for o in ev if acknowledged(o) and o["w0"] >= first_fail_end)
    ph.window = (oks[0] - first_fail) if oks else float("inf")
    ph.disturbed = max(o["w1"] for o in fails) - first_fail


def acknowledged(o):
    """A write the server acknowledged: a grant, an accepted complete,
    release, extend or checkpoint, a gateway answer stored (a replay is not,
    nor is an issue)."""
    if o["status"] is None or not 200 <= o["status"] < 300:
        return False
    if o["f"] == "claim":
        return o["status"] == 201
    if o["f"] == "submit":
        return o.get("replayed") == "false"
    return o["f"] in WRITES


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    t0 = time.monotonic()
    # timeout(1) sends SIGTERM: tear the bed down before going
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    seed = int(os.environ.get("HA_SEED") or random.randrange(1 << 30))
    c = bed.Cluster(os.path.abspath(sys.argv[1]))
    c.routes = ROUTES
    phases = []
    ok = False
    ch = None
    bumps = None
    wl = None
    try:
        c.start()
        api = probes.Api(c.haproxy_port, c.api_key)
        for s in SPECS + [OpSpec(OP_WAIT, "ckey", T=3600, D=WAIT_LEASE, R=86400)]:
            r = api.send("PUT", "/v1/operations/" + s.name, s.policy())
            if r is None or r.status not in (200, 201):
                raise AssertionError("PUT operation %s: %r" % (s.name, r and r.body))
        time.sleep(1.5)   # the operation caches reload every second
        hpath = os.path.join(c.tmp, "history.jsonl")
        h = History(hpath)
        h.meta(binary=c.bin, seed=seed, ops={s.name: s.meta() for s in SPECS},
               nodes=[c.haproxy_port], ha=True)
        log("clients on (seed %d): %d keys at a time, 3 clients each, through HAProxy"
            % (seed, 5))
        wl = Workload(h, [c.haproxy_port], c.api_key, SPECS, 3600, seed, slots=5, clients=3,
                      stall_p=0.15, tag="h", big_answer=65536 + 4096)
        wt = threading.Thread(target=wl.run, daemon=True)
        wt.start()
        bumps = probes.Bumps(api)
        bumps.thread.start()
        for name in FAULTS:
            ph = Phase(name)
            phases.append(ph)
            wait_bed(c)
            time.sleep(WARMUP)
            ph.t_fault = time.time()
            log("phase %s: fault" % name)
            inject(c, name, ph)
            wait_bed(c)
            time.sleep(AFTER)
            ph.t_end = time.time()
            h.fault(name, ph.t_fault, ph.t_end, detail="until the bed was healthy again")
            log("phase %s: bed healthy again" % name)
        log("ending the clients (stalled workers finish their writes)")
        wl.end = time.monotonic()
        bumps.stop.set()
        wt.join(90)
        if wt.is_alive():
            phases[-1].anomalies.append("client threads did not end")
        bumps.thread.join(20)
        for e in wl.errors[:5]:
            phases[-1].anomalies.append("client error: %s" % e)
        problem = bumps.verify()
        if problem:
            phases[-1].anomalies.append(problem)
        h.close()
        log("checking the history (%d operations)" % h.ops)
        ch = check.check_files(hpath, c.upstream_log)
        account(phases, ch)
        ok = all(p.violations == 0 and not p.anomalies for p in phases) and not ch.violations
    except BaseException as e:
        log("HA test aborted: %r" % (e,))
        c.dump_logs()
        raise
    finally:
        if wl is not None:
            wl.stop.set()
        if bumps is not None:
            bumps.stop.set()
        log("tearing the bed down")
        c.stop()
        if ok:
            c.remove()
        else:
            print("logs and history kept in %s" % c.tmp)
        print_summary(phases, ch, bumps, time.monotonic() - t0)
    return 0 if ok else 1


def account(phases, ch):
    """Per phase: operations, acknowledged writes, windows, violations (a
    violation belongs to the phase in which its last request ended)."""
    bounds = [p.t_fault for p in phases[1:]] + [float("inf")]
    start = float("-inf")
    for p, end in zip(phases, bounds):
        ops = [o for o in ch.ops if start <= o["w0"] < end]
        p.ops = len(ops)
        p.acked = sum(1 for o in ops if acknowledged(o))
        windows(p, ch.ops)
        start = end
        for node, dt, status, waited in p.waiters or []:
            log("phase %s: waiter on idemd%d answered %s %.2f s after the complete%s"
                % (p.name, node, status, dt if dt is not None else -1,
                   "" if waited else " (did not wait)"))
            if status != 200 or dt is None or dt > 3.0 or not waited:
                p.anomalies.append("waiting duplicate on idemd%d: %s after %s s (waited: %s)"
                                   % (node, status, dt, waited))
    for v in ch.violations:
        t = max([ch.byid[i]["w1"] for i in v["ops"]] + [e["u"] for e in v["execs"]])
        idx = max([0] + [i for i, p in enumerate(phases) if p.t_fault <= t])
        phases[idx].violations += 1


def fmt_s(x):
    if x is None:
        return "-"
    if x == float("inf"):
        return "never"
    return "%.1f s" % x


def print_summary(phases, ch, bumps, elapsed):
    print()
    print("HA summary (2 Patroni PostgreSQL 15 nodes, synchronous_mode; 2 idemd nodes behind "
          "HAProxy; 5 keys at a time, 3 contending clients per key, through every fault)")
    hdr = ("fault", "requests", "acknowledged writes", "violations", "failed req.", "window",
           "disturbed")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "|".join("---" for _ in hdr) + "|")
    for p in phases:
        print("| %s | %d | %d | %d | %d | %s | %s |"
              % (p.name, p.ops, p.acked, p.violations, p.failures, fmt_s(p.window),
                 fmt_s(p.disturbed)))
    print("requests: recorded requests sent during the phase (from its fault to the next "
          "one's; the first phase from the start); acknowledged writes: 201 grants, accepted "
          "completes, releases, extends and checkpoints, gateway answers stored (not replays; "
          "token issues are not writes); violations: the history checker's "
          "(tests/checker/check.py); window: first failed write request (no answer or 503) to "
          "the first acknowledged write after it; disturbed: first to last failed one")
    if bumps is not None:
        print("version counter: %d bumps acknowledged, %d ambiguous (no answer or 5xx)"
              % (bumps.acked, bumps.ambiguous))
    for p in phases:
        for a in p.anomalies:
            print("  %s: %s" % (p.name, a))
    if ch is not None:
        print("checker: %d histories, %d operations, %d faults, %d violations"
              % (ch.histories, len(ch.ops), len(ch.faults), len(ch.violations)))
    print("HA stage: %d of %d faults, %.0f s, %s" % (
        len(phases), len(FAULTS), elapsed,
        "ok" if ch is not None and len(phases) == len(FAULTS) and not ch.violations and all(
            p.violations == 0 and not p.anomalies for p in phases) else "FAILED"))


if __name__ == "__main__":
    sys.exit(main())
