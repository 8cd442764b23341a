#!/usr/bin/env python3
"""Fairness between tenants: one tenant's claim latency while another client
attacks, for two idemd binaries side by side (issue 27).

    python3 bench/fairness.py --before BIN --after BIN [--rounds 3]
        [--duration 8] [--quota-rate N] [--before-name TEXT] [--after-name TEXT]
        [--scenarios baseline,batch,unknown,body] [--out FILE] [--raw FILE] [--keep]

Starts a private PostgreSQL 15 cluster with deploy/pg.sh in a temporary
folder, gives each binary a fresh database (migrate, tenants A and B, their
operations), and for each round, scenario and binary starts a fresh idemd,
starts the attack, waits RAMP seconds, then measures tenant B for --duration
seconds: 4 client threads, each on its own keep-alive connection bound to
127.0.0.2, claiming fresh caller keys (POST /v1/operations/b.claim/keys/KEY/
claim with a body of about 1 KiB) back to back. Scenarios:

  baseline  no attack
  batch     tenant A: 500-item batch claims of fresh keys from 32 connections
  unknown   GET /v1/operations/b.claim/keys/k with a fresh well-formed but
            unknown API key each request (idk_ + 43 base64url characters),
            8 keep-alive connections, as fast as they are answered
  unknown-cold  the same, but B's key has not been used since idemd started
            (every other scenario makes one claim of B's before the attack)
  body      64 connections from 127.0.0.1 to a gateway route keyed by the
            caller's Idempotency-Key (tenant A), each sending headers with
            Content-Length: 1048576 and no body byte; a connection that is
            answered or closed is opened again after 0.2 s;
            max_inflight_body_bytes 16777216 for this scenario
  batch+quota  (--quota-rate N, the second binary only) the batch flood with
            claim_rate_per_second N for every tenant
  listing   tenant A: 16 keep-alive connections listing
            GET /v1/records?subject=nobody&limit=500 back to back, over
            --listing-records records of A's (300,000 by default, made
            once per binary with batch claims before its first listing
            run; each listing reads all of them, about 0.4 s)

Rounds are interleaved (every scenario of both binaries once per round, the
binaries' order alternating) and each figure is the median over the rounds.
The load generator is the Python standard library: each attack runs in a
process of its own (so that its threads do not share the measuring process's
interpreter lock), the measuring process has 4 threads.

Writes the markdown report to --out (default bench/results/fairness.md) and
the raw per-run figures as JSON beside it (--raw, default not written).
"""
import argparse
import base64
import datetime
import http.client
import json
import multiprocessing as mp
import os
import platform
import selectors
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PG_SH = os.path.join(ROOT, "deploy", "pg.sh")
B_CLIENTS = 4
BATCH_CONNS = 32
BATCH_ITEMS = 500
UNKNOWN_CONNS = 8
BODY_CONNS = 64
BODY_BUDGET = 16777216
RAMP = 1.5
B_SOURCE = "127.0.0.2"
B_PAYLOAD = {"request": {"sku": "B-1", "qty": 1, "note": "x" * 1000}}
LIST_CONNS = 16
LIST_RECORDS = 300000
SCENARIOS = ["baseline", "batch", "unknown", "unknown-cold", "body", "listing"]


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def pct(values, q):
    if not values:
        return None
    v = sorted(values)
    i = min(len(v) - 1, max(0, int(round(q * len(v) + 0.5)) - 1))
    return v[i]


def loadavg():
    with open("/proc/loadavg") as f:
        return f.read().split()[0:3]


# --------------------------------------------------------------- PostgreSQL
class Cluster:
    def __init__(self, work):
        self.dir = os.path.join(work, "pg")

    def pg(self, *args, capture=False):
        r = subprocess.run(["bash", PG_SH, *args], check=True,
                           stdout=subprocess.PIPE if capture else subprocess.DEVNULL)
        return r.stdout.decode().strip() if capture else None

    def start(self):
        self.pg("init", self.dir)
        self.pg("start", self.dir)

    def stop(self):
        try:
            self.pg("stop", self.dir)
        except Exception:
            pass

    def createdb(self, name):
        self.pg("createdb", self.dir, name)
        return self.pg("conninfo", self.dir, name, capture=True)

    def scalar(self, db, q):
        return self.pg("psql", self.dir, "-d", db, "-qAt", "-c", q, capture=True)


# ----------------------------------------------------------------- one idemd
class Target:
    """One binary with its own database, config and master key."""

    def __init__(self, label, binary, work, cluster):
        self.label, self.binary, self.cluster = label, binary, cluster
        self.dir = os.path.join(work, label)
        os.makedirs(self.dir)
        self.db = "fair_" + label
        self.conninfo = cluster.createdb(self.db)
        self.conf = os.path.join(self.dir, "idemd.json")
        self.logf = os.path.join(self.dir, "idemd.log")
        self.port = None
        self.proc = None

    def write_config(self, extra=None):
        self.port = free_port()
        cfg = {"listen": "127.0.0.1:%d" % self.port, "database_url": self.conninfo,
               "master_key_file": os.path.join(self.dir, "master.key"),
               "sweep_interval_seconds": 86400, "log_level": "warn",
               "routes": [{"method": "POST", "path": "/a/orders", "tenant": "a",
                           "operation": "a.gw", "key": "header:Idempotency-Key",
                           "upstream": "http://127.0.0.1:%d" % self.upstream_port}]}
        cfg.update(extra or {})
        with open(self.conf, "w") as f:
            json.dump(cfg, f, indent=2)

    def cli(self, *args):
        r = subprocess.run([self.binary, "--config", self.conf, *args], check=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        return r.stdout.decode()

    def setup(self):
        self.upstream_port = free_port()  # nothing listens: no forward is ever made
        self.write_config()
        self.cli("migrate")
        self.keys = {t: json.loads(self.cli("tenant", "create", t))["api_key"] for t in "ab"}
        self.start()
        for t, op in (("a", "a.claim"), ("a", "a.gw"), ("b", "b.claim")):
            st, body = request(self.port, "PUT", "/v1/operations/" + op, self.keys[t],
                               {"token_ttl_seconds": 3600, "retention_seconds": 86400,
                                "lease_seconds": 60})
            if st not in (200, 201):
                raise SystemExit("PUT /v1/operations/%s on %s: %s %s" % (op, self.label, st, body))
        self.stop()

    def start(self, extra=None):
        self.write_config(extra)
        lf = open(self.logf, "a")
        self.proc = subprocess.Popen([self.binary, "--config", self.conf, "serve"],
                                     stdout=lf, stderr=lf)
        lf.close()
        for _ in range(200):
            try:
                st, _ = request(self.port, "GET", "/healthz")
                if st == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise SystemExit("idemd %s did not start; see its log" % self.label)

    def stop(self):
        if not self.proc:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(40)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def xacts(self):
        return int(self.cluster.scalar(self.db, "SELECT xact_commit + xact_rollback FROM "
                                       "pg_stat_database WHERE datname = current_database()"))


def request(port, method, path, key=None, body=None, timeout=5):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    h = {}
    if key:
        h["Authorization"] = "Bearer " + key
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        h["Content-Type"] = "application/json"
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    out = r.read()
    c.close()
    return r.status, out


# -------------------------------------------------------------- tenant B
def measure_b(port, key, duration, tag, q):
    body = json.dumps(B_PAYLOAD).encode()
    hdr = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    results = [[] for _ in range(B_CLIENTS)]
    end = time.monotonic() + duration
    start = time.perf_counter()

    def client(i):
        conn = None
        n = 0
        out = results[i]
        while time.monotonic() < end:
            n += 1
            path = "/v1/operations/b.claim/keys/%s-%d-%d/claim" % (tag, i, n)
            t0 = time.perf_counter()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30,
                                                      source_address=(B_SOURCE, 0))
                conn.request("POST", path, body=body, headers=hdr)
                r = conn.getresponse()
                r.read()
                st = r.status
                if r.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                st = 0
                if conn:
                    conn.close()
                conn = None
            t1 = time.perf_counter()
            out.append((st, t1 - t0, t1 - start))
        if conn:
            conn.close()

    ts = [threading.Thread(target=client, args=(i,)) for i in range(B_CLIENTS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    allr = [x for r in results for x in r]
    q.put(allr)


# -------------------------------------------------------------- attacks
def attack_batch(port, key, stop, q):
    counts = {"requests": 0, "items_201": 0, "status": {}}
    lock = threading.Lock()
    hdr = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    pid = os.getpid()

    def worker(i):
        conn = None
        n = 0
        while not stop.is_set():
            items = []
            for _ in range(BATCH_ITEMS):
                n += 1
                items.append('{"key":"a%d-%d-%d","request":{"sku":"A-1","qty":2}}' % (pid, i, n))
            body = ('{"items":[' + ",".join(items) + "]}").encode()
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("POST", "/v1/operations/a.claim/claims", body=body, headers=hdr)
                r = conn.getresponse()
                data = r.read()
                st = r.status
                if r.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                st, data = 0, b""
                if conn:
                    conn.close()
                conn = None
                time.sleep(0.05)
            with lock:
                counts["requests"] += 1
                counts["items_201"] += data.count(b'"status":201')
                counts["status"][st] = counts["status"].get(st, 0) + 1
            if st == 429:
                time.sleep(0.05)

    ts = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(BATCH_CONNS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    q.put(counts)


def fill_records(target, n):
    """N records of tenant A (caller-key claims in 500-item batches, 8
    connections), once per binary."""
    if getattr(target, "filled", 0) >= n:
        return
    hdr = {"Authorization": "Bearer " + target.keys["a"], "Content-Type": "application/json"}
    batches = (n + BATCH_ITEMS - 1) // BATCH_ITEMS
    lock = threading.Lock()
    todo = list(range(batches))

    def worker():
        conn = http.client.HTTPConnection("127.0.0.1", target.port, timeout=120)
        while True:
            with lock:
                if not todo:
                    break
                b = todo.pop()
            items = ",".join('{"key":"fill-%d-%d","request":{"n":%d}}' % (b, i, i)
                             for i in range(BATCH_ITEMS))
            conn.request("POST", "/v1/operations/a.claim/claims",
                         body=('{"items":[' + items + "]}").encode(), headers=hdr)
            r = conn.getresponse()
            r.read()
            if r.status != 200:
                raise SystemExit("filling A's records on %s: %s" % (target.label, r.status))
        conn.close()

    log("making %d records of A's on %s" % (n, target.label))
    ts = [threading.Thread(target=worker) for _ in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    target.filled = n


def attack_listing(port, key, stop, q):
    counts = {"requests": 0, "status": {}}
    lock = threading.Lock()
    hdr = {"Authorization": "Bearer " + key}

    def worker():
        conn = None
        while not stop.is_set():
            try:
                if conn is None:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                conn.request("GET", "/v1/records?subject=nobody&limit=500", headers=hdr)
                r = conn.getresponse()
                r.read()
                st = r.status
                if r.will_close:
                    conn.close()
                    conn = None
            except (OSError, http.client.HTTPException):
                st = 0
                if conn:
                    conn.close()
                conn = None
                time.sleep(0.05)
            with lock:
                counts["requests"] += 1
                counts["status"][st] = counts["status"].get(st, 0) + 1
            if st == 429:
                time.sleep(0.001)  # a client that retries at once, not a spin

    ts = [threading.Thread(target=worker, daemon=True) for _ in range(LIST_CONNS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    q.put(counts)


def fresh_key():
    return "idk_" + base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("=")


def read_response(sock, buf):
    """Read one HTTP response from sock; return (status, rest, close)."""
    while b"\r\n\r\n" not in buf:
        d = sock.recv(65536)
        if not d:
            raise ConnectionError("closed")
        buf += d
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length, close = 0, False
    for ln in lines[1:]:
        k, _, v = ln.partition(b":")
        k = k.strip().lower()
        if k == b"content-length":
            length = int(v)
        elif k == b"connection" and b"close" in v.lower():
            close = True
    while len(rest) < length:
        d = sock.recv(65536)
        if not d:
            raise ConnectionError("closed")
        rest += d
    return status, rest[length:], close


def attack_unknown(port, stop, q):
    counts = {"requests": 0, "status": {}}
    lock = threading.Lock()

    def worker():
        s, buf = None, b""
        local = {}
        nreq = 0
        while not stop.is_set():
            req = ("GET /v1/operations/b.claim/keys/k HTTP/1.1\r\nHost: x\r\n"
                   "Authorization: Bearer %s\r\n\r\n" % fresh_key()).encode()
            try:
                if s is None:
                    s = socket.create_connection(("127.0.0.1", port), timeout=30)
                    buf = b""
                s.sendall(req)
                st, buf, close = read_response(s, buf)
                if close:
                    s.close()
                    s = None
            except (OSError, ValueError, IndexError):
                st = 0
                if s:
                    s.close()
                s = None
            nreq += 1
            local[st] = local.get(st, 0) + 1
        with lock:
            counts["requests"] += nreq
            for k, v in local.items():
                counts["status"][k] = counts["status"].get(k, 0) + v

    ts = [threading.Thread(target=worker, daemon=True) for _ in range(UNKNOWN_CONNS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    q.put(counts)


def attack_body(port, stop, q):
    """64 sockets, each declaring 1 MiB and sending no body; reopened 0.2 s
    after being answered or closed. One thread, a selector."""
    sel = selectors.DefaultSelector()
    counts = {"opened": 0, "answered": {}, "closed": 0, "max_held": 0}
    pending = []  # (time to reopen)

    def open_one():
        s = socket.socket()
        s.setblocking(True)
        s.settimeout(5)
        try:
            s.connect(("127.0.0.1", port))
            key = base64.urlsafe_b64encode(os.urandom(12)).decode()
            s.sendall(("POST /a/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       "Idempotency-Key: %s\r\nContent-Length: 1048576\r\n\r\n" % key).encode())
        except OSError:
            s.close()
            pending.append(time.monotonic() + 0.2)
            return
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, b"")
        counts["opened"] += 1

    for _ in range(BODY_CONNS):
        open_one()
    held_samples = []
    while not stop.is_set():
        for k, _ in sel.select(0.05):
            s = k.fileobj
            try:
                d = s.recv(65536)
            except OSError:
                d = b""
            data = k.data + d
            if d:
                sel.modify(s, selectors.EVENT_READ, data)
                continue
            # closed by the server: count what it said, reopen later
            sel.unregister(s)
            s.close()
            if data.startswith(b"HTTP/1.1 "):
                st = int(data[9:12])
                counts["answered"][st] = counts["answered"].get(st, 0) + 1
            else:
                counts["closed"] += 1
            pending.append(time.monotonic() + 0.2)
        # an answer on a connection the server keeps open: treat as refused
        for k in list(sel.get_map().values()):
            if k.data.startswith(b"HTTP/1.1 ") and b"\r\n\r\n" in k.data:
                s = k.fileobj
                sel.unregister(s)
                s.close()
                st = int(k.data[9:12])
                counts["answered"][st] = counts["answered"].get(st, 0) + 1
                pending.append(time.monotonic() + 0.2)
        now = time.monotonic()
        due = [t for t in pending if t <= now]
        pending[:] = [t for t in pending if t > now]
        for _ in due:
            open_one()
        # held = open and not answered
        held_samples.append(len(sel.get_map()))
    counts["held_median"] = statistics.median(held_samples) if held_samples else 0
    for k in list(sel.get_map().values()):
        k.fileobj.close()
    q.put(counts)


# -------------------------------------------------------------- one run
def run_one(target, scenario, rnd, duration, quota_rate, listing_records=LIST_RECORDS):
    extra = {}
    if scenario == "body":
        extra["max_inflight_body_bytes"] = BODY_BUDGET
    if scenario == "batch+quota":
        extra["claim_rate_per_second"] = quota_rate
    target.start(extra)
    if scenario == "listing":
        fill_records(target, listing_records)
    la0 = loadavg()
    if scenario != "unknown-cold":
        # one claim of B's first, so that its key is known to idemd before
        # the attack starts (the steady state of a running service)
        st, body = request(target.port, "POST", "/v1/operations/b.claim/keys/warm-r%d-%s/claim"
                           % (rnd, scenario.replace("+", "")), target.keys["b"], B_PAYLOAD)
        if st != 201:
            raise SystemExit("B's first claim on %s: %s %s" % (target.label, st, body))
    ctx = mp.get_context("fork")
    stop = ctx.Event()
    aq, bq = ctx.Queue(), ctx.Queue()
    att = None
    if scenario in ("batch", "batch+quota"):
        att = ctx.Process(target=attack_batch, args=(target.port, target.keys["a"], stop, aq))
    elif scenario in ("unknown", "unknown-cold"):
        att = ctx.Process(target=attack_unknown, args=(target.port, stop, aq))
    elif scenario == "body":
        att = ctx.Process(target=attack_body, args=(target.port, stop, aq))
    elif scenario == "listing":
        att = ctx.Process(target=attack_listing, args=(target.port, target.keys["a"], stop, aq))
    if att:
        att.start()
    time.sleep(RAMP)
    x0 = target.xacts()
    tag = "r%d-%s-%s" % (rnd, target.label, scenario.replace("+", ""))
    mp_b = ctx.Process(target=measure_b, args=(target.port, target.keys["b"], duration, tag, bq))
    t0 = time.monotonic()
    mp_b.start()
    res = bq.get()
    mp_b.join()
    elapsed = time.monotonic() - t0
    x1 = target.xacts()
    attack = None
    if att:
        stop.set()
        attack = aq.get(timeout=90)
        att.join(10)
        if att.is_alive():
            att.kill()
    target.stop()
    la1 = loadavg()
    lat = [t for _, t, _ in res]
    ok = [t for st, t, _ in res if st == 201]
    status = {}
    for st, _, _ in res:
        status[st] = status.get(st, 0) + 1
    bad_at = [at for st, _, at in res if st != 201]
    return {"round": rnd, "binary": target.label, "scenario": scenario,
            "n": len(res), "ok": len(ok), "status": status,
            "p50": pct(lat, 0.50), "p99": pct(lat, 0.99),
            "ok_p50": pct(ok, 0.50), "ok_p99": pct(ok, 0.99),
            "last_refusal_s": max(bad_at) if bad_at else None,
            "claims_per_s": len(ok) / elapsed, "xacts_per_s": (x1 - x0) / elapsed,
            "attack": attack, "load_before": la0, "load_after": la1}


# -------------------------------------------------------------- report
def ms(v):
    return "—" if v is None else ("%.1f" % (v * 1000) if v < 0.1 else "%.0f" % (v * 1000))


def med(vals):
    vals = [v for v in vals if v is not None]
    return statistics.median(vals) if vals else None


def describe_attack(scen, runs):
    a = [r["attack"] for r in runs if r["attack"]]
    if not a:
        return ""
    if scen.startswith("batch"):
        items = med([x["items_201"] for x in a])
        reqs = med([x["requests"] for x in a])
        st = {}
        for x in a:
            for k, v in x["status"].items():
                st[k] = st.get(k, 0) + v
        return "A: %s batches, %s items 201 (median per run; statuses over all runs %s)" % (
            int(reqs), int(items), fmt_status(st))
    if scen.startswith("unknown") or scen == "listing":
        st = {}
        for x in a:
            for k, v in x["status"].items():
                st[k] = st.get(k, 0) + v
        return "%s requests per run (median); statuses over all runs %s" % (
            int(med([x["requests"] for x in a])), fmt_status(st))
    if scen == "body":
        st = {}
        for x in a:
            for k, v in x["answered"].items():
                st[k] = st.get(k, 0) + v
        return ("connections held unanswered: median %s of 64; opened per run %s; "
                "answered over all runs %s; closed unanswered %s" % (
                    med([x["held_median"] for x in a]),
                    int(med([x["opened"] for x in a])), fmt_status(st) or "none",
                    sum(x["closed"] for x in a)))
    return ""


def fmt_status(st):
    return ", ".join("%s×%d" % (k if k else "conn-error", v)
                     for k, v in sorted(st.items(), key=lambda kv: str(kv[0])))


def report(args, runs, meta):
    scen_names = {"baseline": "baseline (no attack)",
                  "batch": "batch flood (A: 500-item batches, 32 connections)",
                  "unknown": "unknown-key flood (8 connections, a fresh key each)",
                  "unknown-cold": "unknown-key flood, B's key not yet known to idemd",
                  "body": "body-budget attack (64 × 1 MiB declared from 127.0.0.1)",
                  "listing": "listing flood (A: 16 connections, `?subject=nobody&limit=500` "
                             "over %d records)" % args.listing_records,
                  "batch+quota": "batch flood, `claim_rate_per_second` %s" % args.quota_rate}
    out = []
    out.append("# Fairness between tenants (issue 27)\n")
    out.append("Tenant B's caller-key claims (4 clients, keep-alive, from 127.0.0.2, "
               "bodies of about 1 KiB) while another client attacks; "
               "`bench/fairness.py`, %d interleaved rounds of %g s per scenario, "
               "medians over the rounds.\n" % (args.rounds, args.duration))
    out.append("- date: %s" % meta["date"])
    out.append("- before: %s" % meta["before"])
    out.append("- after: %s" % meta["after"])
    out.append("- machine: %s" % meta["machine"])
    out.append("- load average (1, 5, 15 min) at the start: %s; at the end: %s; "
               "1-minute load around the runs: %s–%s" % (
                   " ".join(meta["load_start"]), " ".join(meta["load_end"]),
                   meta["load_min"], meta["load_max"]))
    out.append("- command: `%s`\n" % meta["command"])
    out.append("| scenario | binary | B p50 (ms) | B p99 (ms) | B claims 201/s | B answers not 201 (per run) | p99 of rounds (ms) | database transactions/s |")
    out.append("|---|---|---:|---:|---:|---|---|---:|")
    order = SCENARIOS + (["batch+quota"] if args.quota_rate else [])
    for scen in order:
        for b in ("before", "after"):
            rs = [r for r in runs if r["scenario"] == scen and r["binary"] == b]
            if not rs:
                continue
            bad = []
            for r in rs:
                nb = {k: v for k, v in r["status"].items() if k != 201}
                bad.append("%d of %d%s" % (sum(nb.values()), r["n"],
                                           (" (%s; the last %.1f s in)" % (fmt_status(nb), r["last_refusal_s"]))
                                           if nb else ""))
            out.append("| %s | %s | %s | %s | %.0f | %s | %s | %.0f |" % (
                scen_names[scen], b, ms(med([r["p50"] for r in rs])),
                ms(med([r["p99"] for r in rs])), med([r["claims_per_s"] for r in rs]),
                "; ".join(bad), " / ".join(ms(r["p99"]) for r in rs),
                med([r["xacts_per_s"] for r in rs])))
    out.append("")
    out.append("p50 and p99 are over every answer B got (201 or not); a refused claim "
               "(503) counts with its own, short, latency, so read them beside the "
               "refusals. \"database transactions/s\" is the database's committed and "
               "rolled-back transactions during B's measurement (all clients).\n")
    out.append("What the attackers got (per binary):\n")
    for scen in order:
        if scen == "baseline":
            continue
        for b in ("before", "after"):
            rs = [r for r in runs if r["scenario"] == scen and r["binary"] == b]
            if rs:
                out.append("- %s, %s: %s" % (scen, b, describe_attack(scen, rs)))
    out.append("")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True)
    ap.add_argument("--after", required=True)
    ap.add_argument("--before-name", default="",
                    help="how the report names the first binary (e.g. its source commit)")
    ap.add_argument("--after-name", default="")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--duration", type=float, default=8.0)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--listing-records", type=int, default=LIST_RECORDS,
                    help="how many records of A's the listing scenario lists")
    ap.add_argument("--quota-rate", type=int, default=0,
                    help="also run the batch flood on --after with claim_rate_per_second N")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "fairness.md"))
    ap.add_argument("--raw", default="")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    scen = args.scenarios.split(",")

    work = tempfile.mkdtemp(prefix="idemd-fair.")
    os.chmod(work, 0o711)
    cluster = Cluster(work)
    targets = []
    runs = []
    loads = []
    meta = {"date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M %Z").strip(),
            "load_start": loadavg(),
            "command": "python3 bench/fairness.py --before BEFORE --after AFTER --rounds %d "
                       "--duration %g%s" % (args.rounds, args.duration,
                                            " --quota-rate %d" % args.quota_rate if args.quota_rate else "")}
    try:
        log("PostgreSQL in", work)
        cluster.start()
        for label, binary in (("before", args.before), ("after", args.after)):
            t = Target(label, os.path.abspath(binary), work, cluster)
            t.setup()
            targets.append(t)
            ver = subprocess.run([t.binary, "--version"], stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT).stdout.decode().strip()
            name = getattr(args, label + "_name") or "the --%s binary" % label
            meta[label] = "%s (`--version`: %s)" % (name, ver.splitlines()[0] if ver else "?")
        for rnd in range(1, args.rounds + 1):
            for s in scen + (["batch+quota"] if args.quota_rate else []):
                order = targets if rnd % 2 else targets[::-1]
                for t in order:
                    if s == "batch+quota" and t.label != "after":
                        continue
                    r = run_one(t, s, rnd, args.duration, args.quota_rate, args.listing_records)
                    runs.append(r)
                    loads += [float(r["load_before"][0]), float(r["load_after"][0])]
                    log("round %d %-11s %-6s p50 %s p99 %s ms, %d/%d 201, load %s" % (
                        rnd, s, t.label, ms(r["p50"]), ms(r["p99"]), r["ok"], r["n"],
                        r["load_after"][0]))
    finally:
        for t in targets:
            t.stop()
        cluster.stop()
        if args.keep:
            log("kept", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    meta["load_end"] = loadavg()
    meta["load_min"] = min(loads) if loads else "?"
    meta["load_max"] = max(loads) if loads else "?"
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("model name"):
                    cpu = ln.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    meta["machine"] = "%d cores (%s), Linux %s, PostgreSQL 15 (private cluster, defaults)" % (
        os.cpu_count(), cpu, platform.release())
    text = report(args, runs, meta)
    with open(args.out, "w") as f:
        f.write(text)
    if args.raw:
        with open(args.raw, "w") as f:
            json.dump({"meta": meta, "runs": runs}, f, indent=1, default=str)
    print(text)


if __name__ == "__main__":
    main()
