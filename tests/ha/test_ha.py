"""High-availability test: faults injected under a storm, every
acknowledged write checked afterwards (run by tests/ha.sh).

The bed (cluster.py): etcd, two Patroni-managed PostgreSQL 15 nodes in
synchronous mode, two idemd nodes with a multi-host database_url behind
HAProxy. The storm (storm.py) runs through HAProxy. Faults, one after the
other, each under its own storm:
  switchover      patronictl switchover --force
  kill-postmaster kill -9 of the primary's postmaster (Patroni recovers it)
  freeze-primary  SIGSTOP of the primary's Patroni and PostgreSQL for longer
                  than Patroni's ttl (a failover), then SIGCONT (it rejoins)
  kill-idemd      kill -9 of one idemd node (restarted after 5 s)
After each fault, everything acknowledged so far (all phases) is checked:
every issued token is readable, every completed claim (token, caller key,
batch item) and gateway submit replays its stored answer identically, no
key got two 201s (two executions), the upstream never saw a key again after
its answer was acknowledged, version counters equal the acknowledged bumps.
Prints a summary table; exits 0 only when nothing was lost and nothing ran
twice.

Usage: python3 test_ha.py IDEMD_BIN
"""

import concurrent.futures
import json
import os
import signal
import threading
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import cluster as bed  # noqa: E402
import storm  # noqa: E402
from cluster import log  # noqa: E402

WARMUP = 3.0        # seconds of storm before the fault
AFTER = 3.0         # seconds of storm after the bed is healthy again
FREEZE = bed.TTL + 10
OP_WAIT = "wait.probe"
WAIT_LEASE = 10
VERIFY_THREADS = 6
FAULTS = ("switchover", "kill-postmaster", "freeze-primary", "kill-idemd")
PLAN = {"token_worker": 2, "key_worker": 2, "gateway_worker": 2, "batch_worker": 1,
        "bump_worker": 1}


class Phase:
    def __init__(self, name):
        self.name = name
        self.acked = 0
        self.checked = 0
        self.lost = 0
        self.double = 0
        self.redelivered = 0
        self.window = None
        self.disturbed = None
        self.failures = 0
        self.anomalies = []
        self.unresolved = 0
        self.takeovers = 0
        self.waiters = None


def ledger_kinds(L):
    k = {"issued": len(L.issued), "gateway": len(L.gateway),
         "bumps": sum(b["acked"] for b in L.bumps.values())}
    for it in L.completed:
        k[it["kind"]] = k.get(it["kind"], 0) + 1
    return k


def ledger_acks(L):
    n = len(L.issued) + len(L.completed) + len(L.gateway)
    n += sum(b["acked"] for b in L.bumps.values())
    return n


def waiter_probe(c):
    """On each idemd node in turn: a key claimed on the other node, a
    duplicate waiting on this one (Prefer: wait), the key completed on the
    other. Returns [(node, seconds from the complete to the waiter's
    answer, status, waited)]. Notified, the waiter answers at once; a LISTEN
    connection left on the frozen old primary would hear nothing and the
    waiter would answer only when the lease ends (WAIT_LEASE s)."""
    out = []
    for a, b in ((0, 1), (1, 0)):
        ap = storm.Api(c.idemd_ports[a], c.api_key, storm.Log())
        bp = storm.Api(c.idemd_ports[b], c.api_key, storm.Log())
        path = "/v1/operations/%s/keys/w-%s" % (OP_WAIT, os.urandom(8).hex())
        r = ap.until_final("POST", path + "/claim", {})
        if r is None or r.status != 201:
            out.append((b, None, r and r.status, False))
            continue
        got = {}

        def wait():
            got["r"] = bp.send("POST", path + "/claim", {}, {"Prefer": "wait=%d" % (WAIT_LEASE + 5)})
            got["t"] = time.monotonic()

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.5)
        r = ap.until_final("POST", path + "/complete", {"attempt": 1, "status": 200,
                                                        "body": {"probe": True}})
        t_done = time.monotonic()
        t.join(WAIT_LEASE + 10)
        w = got.get("r")
        out.append((b, got.get("t", t_done) - t_done if w is not None else None,
                    w.status if w is not None else None,
                    w is not None and "preference-applied" in w.headers))
    return out


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
            api = storm.Api(c.haproxy_port, c.api_key, storm.Log())
            key = "probe:" + str(time.time())
            probe = None
            while time.monotonic() - t0 < FREEZE - 4:
                r = api.send("POST", "/v1/versions/" + key, headers={"If-Match": '"0"'})
                if r is not None and r.status in (200, 412):
                    log("writes resumed %.1f s into the freeze" % (time.monotonic() - t0))
                    # on a thread: the freeze ends on time whatever it finds
                    probe = threading.Thread(target=lambda: setattr(ph, "waiters",
                                                                    waiter_probe(c)))
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


def upstream_calls(c):
    with urllib.request.urlopen("http://127.0.0.1:%d/_requests" % c.upstream_port,
                                timeout=10) as r:
        reqs = json.loads(r.read().decode())
    calls = {}
    for q in reqs:
        calls.setdefault(q["key"], []).append(q["time"])
    return calls


def verify(c, ledgers, ph):
    """Checks every acknowledged write of LEDGERS; fills PH's counts.
    Caller keys are replayed in batches (a batch claim answers each
    completed key with its stored response); tokens and gateway submits
    one by one, from VERIFY_THREADS threads."""
    api = storm.Api(c.haproxy_port, c.api_key, storm.Log())
    lost = []
    lock = threading.Lock()

    def final(method, path, body=None, headers=None):
        r = api.until_final(method, path, body, headers)
        if r is None:
            raise AssertionError("no answer for %s %s while verifying" % (method, path))
        return r

    def check_issued(it):
        r = final("GET", "/v1/tokens/" + it["token"])
        if r.status != 200 or r.json.get("state") != "issued":
            return "issued token: %d %s" % (r.status, r.body[:200])
        return None

    def check_token(it):
        r = final("POST", it["path"] + "/claim", it["claim_body"])
        resp = r.json.get("response") if isinstance(r.json, dict) else None
        if (r.status != 200 or r.headers.get("idempotent-replayed") != "true" or
                not isinstance(resp, dict) or resp.get("status") != it["response"]["status"] or
                resp.get("body") != it["response"]["body"]):
            return ("%s %s: replay %d %s, expected %r"
                    % (it["kind"], it["path"], r.status, r.body[:200], it["response"]))
        return None

    def check_gateway(it):
        r = final("POST", "/orders", it["req"], {"Idempotency-Key": it["token"]})
        if (r.status != it["status"] or r.body != it["body"] or
                r.headers.get("idempotent-replayed") != "true"):
            return ("gateway %s: replay %d %s, acknowledged %d %s"
                    % (it["id"], r.status, r.body[:200], it["status"], it["body"][:200]))
        return None

    def check_keys(op, items):
        body = {"items": [dict({"key": it["key"]}, **it["claim_body"]) for it in items]}
        r = final("POST", "/v1/operations/%s/claims" % op, body)
        if r.status != 200:
            return ["batch replay %s: %d %s" % (op, r.status, r.body[:200])]
        out = []
        got = {i.get("key"): i for i in r.json.get("items", [])}
        for it in items:
            g = got.get(it["key"], {})
            resp = g.get("response")
            if (g.get("status") != 200 or not isinstance(resp, dict) or
                    resp.get("status") != it["response"]["status"] or
                    resp.get("body") != it["response"]["body"]):
                out.append("%s key %s: replay %r, expected %r"
                           % (it["kind"], it["key"], g, it["response"]))
        return out

    jobs = []
    by_op = {}
    for L in ledgers:
        jobs += [(check_issued, it) for it in L.issued]
        jobs += [(check_gateway, it) for it in L.gateway]
        for it in L.completed:
            if it["kind"] == "token":
                jobs.append((check_token, it))
            else:
                by_op.setdefault(it["path"].split("/")[3], []).append(it)
    for op, items in by_op.items():
        for i in range(0, len(items), 200):
            jobs.append((lambda chunk, op=op: check_keys(op, chunk), items[i:i + 200]))

    def run(job):
        fn, arg = job
        res = fn(arg)
        n = len(arg) if isinstance(arg, list) else 1
        with lock:
            ph.checked += n
            if isinstance(res, list):
                lost.extend(res)
            elif res is not None:
                lost.append(res)

    with concurrent.futures.ThreadPoolExecutor(VERIFY_THREADS) as ex:
        for f in [ex.submit(run, j) for j in jobs]:
            f.result()

    for L in ledgers:
        for key, b in L.bumps.items():
            r = final("GET", "/v1/versions/" + key)
            ph.checked += b["acked"]
            v = r.json.get("version") if isinstance(r.json, dict) else None
            # each acknowledged bump is in the counter; a bump whose answer
            # was lost (503, no answer) may or may not have committed
            if not isinstance(v, int) or v < b["last"] or not (
                    b["acked"] <= v <= b["acked"] + b["ambiguous"]):
                lost.append("version %s: %r, acknowledged %d bumps (last %d), %d ambiguous"
                            % (key, v, b["acked"], b["last"], b["ambiguous"]))
        for key, n in L.executions.items():
            if n > 1:
                ph.double += 1
                ph.anomalies.append("%s executed %d times (two 201s)" % (key, n))
    calls = upstream_calls(c)
    for L in ledgers:
        for it in L.gateway:
            times = calls.get(it["id"], [])
            if not times:
                lost.append("gateway %s acknowledged but the upstream never saw it" % it["id"])
            if any(t > it["t_ack"] for t in times):
                ph.double += 1
                ph.anomalies.append("gateway %s forwarded again after its answer was "
                                    "acknowledged" % it["id"])
            if len(times) > 1 and L is ledgers[-1]:
                ph.redelivered += 1
    ph.lost = len(lost)
    ph.anomalies.extend(lost[:20])


def run_phase(c, name, ledgers):
    ph = Phase(name)
    wait_bed(c)
    L = storm.Ledger()
    ledgers.append(L)
    lg = storm.Log()
    st = storm.Storm(c.haproxy_port, c.api_key, L, lg)
    log("phase %s: storm on" % name)
    st.start(PLAN)
    time.sleep(WARMUP)
    t_fault = time.monotonic()
    inject(c, name, ph)
    wait_bed(c)
    time.sleep(AFTER)
    log("phase %s: bed healthy again; ending the storm" % name)
    if not st.finish():
        ph.anomalies.append("storm threads did not finish")
    first_fail, first_ok, last_fail, nfail = lg.window(t_fault)
    ph.failures = nfail
    with open(os.path.join(c.tmp, "events-%s.json" % name), "w") as f:
        json.dump({"fault_at": t_fault, "events": lg.events}, f)
    if first_fail is not None:
        ph.window = (first_ok - first_fail) if first_ok is not None else float("inf")
        ph.disturbed = last_fail - first_fail
    for node, dt, status, waited in ph.waiters or []:
        log("phase %s: waiter on idemd%d answered %s %.2f s after the complete%s"
            % (name, node, status, dt if dt is not None else -1,
               "" if waited else " (did not wait)"))
        if status != 200 or dt is None or dt > 3.0 or not waited:
            ph.anomalies.append("waiting duplicate on idemd%d: %s after %s s (waited: %s)"
                                % (node, status, dt, waited))
    ph.acked = ledger_acks(L)
    ph.kinds = ledger_kinds(L)
    ph.unresolved = L.unresolved
    ph.takeovers = L.redelivered_claims
    ph.anomalies.extend(L.anomalies[:20])
    if lg.retry_after_missing:
        ph.anomalies.append("%d 503 answers without Retry-After" % lg.retry_after_missing)
    for b in lg.bad_statuses[:5]:
        ph.anomalies.append("unexpected 5xx: %r" % (b,))
    log("phase %s: verifying everything acknowledged so far" % name)
    verify(c, ledgers, ph)
    ph.bad_statuses = len(lg.bad_statuses)
    return ph


def fmt_s(x):
    if x is None:
        return "-"
    if x == float("inf"):
        return "never"
    return "%.1f s" % x


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    t0 = time.monotonic()
    # timeout(1) sends SIGTERM: tear the bed down before going
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    c = bed.Cluster(os.path.abspath(sys.argv[1]))
    phases = []
    ok = False
    try:
        c.start()
        api = storm.Api(c.haproxy_port, c.api_key, storm.Log())
        for op, lease in ((storm.OP_DIRECT, storm.LEASE), (storm.OP_BATCH, storm.LEASE),
                          (storm.OP_GATEWAY, storm.LEASE), (OP_WAIT, WAIT_LEASE)):
            r = api.send("PUT", "/v1/operations/" + op,
                         {"token_ttl_seconds": 3600, "retention_seconds": 86400,
                          "lease_seconds": lease})
            if r is None or r.status not in (200, 201):
                raise AssertionError("PUT operation %s: %r" % (op, r and r.body))
        ledgers = []
        for name in FAULTS:
            phases.append(run_phase(c, name, ledgers))
            p = phases[-1]
            log("phase %s: %d acknowledged, %d checked, %d lost, %d double, window %s"
                % (name, p.acked, p.checked, p.lost, p.double, fmt_s(p.window)))
        ok = all(p.lost == 0 and p.double == 0 and p.unresolved == 0 and
                 not p.anomalies for p in phases)
    except BaseException as e:
        log("HA test aborted: %r" % (e,))
        c.dump_logs()
        raise
    finally:
        log("tearing the bed down")
        c.stop()
        if ok:
            c.remove()
        else:
            print("logs kept in %s" % c.tmp)
        print_summary(phases, time.monotonic() - t0)
    return 0 if ok else 1


def print_summary(phases, elapsed):
    print()
    print("HA summary (2 Patroni PostgreSQL 15 nodes, synchronous_mode; 2 idemd nodes "
          "behind HAProxy; storm of %d client threads)" % sum(PLAN.values()))
    hdr = ("fault", "acked", "checked", "lost", "double", "redeliv.", "takeovers",
           "failed req.", "window", "disturbed")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "|".join("---" for _ in hdr) + "|")
    for p in phases:
        print("| %s | %d | %d | %d | %d | %d | %d | %d | %s | %s |"
              % (p.name, p.acked, p.checked, p.lost, p.double, p.redelivered, p.takeovers,
                 p.failures, fmt_s(p.window), fmt_s(p.disturbed)))
    print("acked: 2xx writes acknowledged during the phase; checked: acknowledged writes "
          "(all phases so far) read back and replayed after the fault; window: first "
          "failed write request to the first successful one after it; disturbed: first "
          "to last failed write; redeliv.: gateway keys the upstream saw more than once, "
          "all before any answer was acknowledged; takeovers: claims that found their own "
          "unacknowledged earlier try committed and took over after its lease")
    print("acknowledged per kind: " + "; ".join(
        "%s: %s" % (p.name, ", ".join("%s %d" % kv for kv in sorted(getattr(p, "kinds", {}).items())))
        for p in phases))
    print("(issued: tokens issued and left unclaimed; token, key, batch: claims completed by "
          "token, caller key, batch; gateway: gateway submits; bumps: version bumps)")
    for p in phases:
        for a in p.anomalies:
            print("  %s: %s" % (p.name, a))
        if p.unresolved:
            print("  %s: %d keys never got a final answer" % (p.name, p.unresolved))
    print("HA stage: %d of %d faults, %.0f s, %s" % (len(phases), len(FAULTS), elapsed,
          "ok" if len(phases) == len(FAULTS) and all(
              p.lost == 0 and p.double == 0 and p.unresolved == 0 and not p.anomalies
              for p in phases) else "FAILED"))


if __name__ == "__main__":
    sys.exit(main())
