#!/usr/bin/env python3
"""Helpers of bench/run.sh (python3 standard library only).

  benchlib.py tokens PORT API_KEY OPERATION COUNT OUT
      issue COUNT tokens through POST /v1/tokens (count=100 per request,
      one keep-alive connection) and write "token id" lines to OUT
  benchlib.py pick TOKENS_FILE... --ids IDS_FILE --out OUT [--max N]
      keep the tokens whose id is listed in IDS_FILE (one hex id a line)
  benchlib.py seed-keys PORT PATH PREFIX N
      send POST PATH once for each key PREFIX-1 .. PREFIX-N (Idempotency-Key
      header, the body of keyed_first.lua), one keep-alive connection; every
      answer must be a 2xx (the replay sets of keyed_replay.lua)
  benchlib.py free-ports N
      print N free TCP ports on 127.0.0.1
  benchlib.py rate RESULTS SCENARIO
      print the best ops/s (or req/s) of SCENARIO so far (0 if none)
  benchlib.py report RESULTS OUT [--scale]
      write the markdown report from the results file of run.sh
  benchlib.py batch-script SRC TABLE
      print SRC's first submit over batches of 32 on TABLE (costmodel.sh)
  benchlib.py costmodel RESULTS OUT MACHINE
      write the cost model (bench/costmodel.sh) from its "STEP ROUND
      CPU_US TRANSACTIONS" lines

The results file holds one run per line: "SCENARIO ROUND key=value ...".
"""

import http.client
import json
import math
import os
import re
import socket
import statistics
import sys
import time


def cmd_tokens(port, api_key, operation, count, out):
    count = int(count)
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
    headers = {"Authorization": "Bearer " + api_key, "Content-Type": "application/json"}
    done = 0
    with open(out, "w") as f:
        while done < count:
            n = min(100, count - done)
            body = {"operation": operation, "subject": "user-42"}
            if n > 1:
                body["count"] = n
            conn.request("POST", "/v1/tokens", json.dumps(body), headers)
            r = conn.getresponse()
            data = r.read()
            if r.status != 201:
                sys.exit("benchlib: issue answered %d: %s" % (r.status, data[:300]))
            doc = json.loads(data)
            items = doc["tokens"] if "tokens" in doc else [doc]
            for t in items:
                f.write("%s %s\n" % (t["token"], t["id"]))
            done += len(items)
    conn.close()


def cmd_pick(args):
    files, ids_file, out, limit = [], None, None, 0
    i = 0
    while i < len(args):
        if args[i] == "--ids":
            ids_file = args[i + 1]
            i += 2
        elif args[i] == "--out":
            out = args[i + 1]
            i += 2
        elif args[i] == "--max":
            limit = int(args[i + 1])
            i += 2
        else:
            files.append(args[i])
            i += 1
    with open(ids_file) as f:
        ids = {line.strip() for line in f if line.strip()}
    n = 0
    with open(out, "w") as o:
        for path in files:
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 2 and parts[1] in ids:
                        o.write(line)
                        n += 1
                        if limit and n >= limit:
                            print(n)
                            return
    print(n)


def cmd_seed_keys(port, path, prefix, n):
    conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
    body = '{"sku":"A-1","qty":2}'
    for i in range(1, int(n) + 1):
        conn.request("POST", path, body, {"Content-Type": "application/json",
                                          "Idempotency-Key": "%s-%d" % (prefix, i)})
        r = conn.getresponse()
        data = r.read()
        if not 200 <= r.status < 300:
            sys.exit("benchlib: seeding %s answered %d: %s" % (path, r.status, data[:300]))
    conn.close()


def cmd_free_ports(n):
    socks, ports = [], []
    for _ in range(int(n)):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
        ports.append(s.getsockname()[1])
    for s in socks:
        s.close()
    print(" ".join(str(p) for p in ports))


def load_results(path):
    runs = []
    if not os.path.exists(path):
        return runs
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) < 2:
                continue
            r = {"scenario": parts[0], "round": parts[1]}
            for kv in parts[2:]:
                k, _, v = kv.partition("=")
                try:
                    r[k] = float(v)
                except ValueError:
                    r[k] = v
            runs.append(r)
    return runs


def rate_of(r):
    """Throughput of one run: ops/s when the script counts operations,
    transactions/s for pgbench, else successful requests/s."""
    if "tps" in r:
        return r["tps"]
    dur = r.get("duration_us", 0) / 1e6
    if dur <= 0:
        return 0.0
    if r.get("ops", 0) > 0:
        return r["ops"] / dur
    return (r.get("requests", 0) - r.get("err_status", 0)) / dur


def req_rate_of(r):
    dur = r.get("duration_us", 0) / 1e6
    return r.get("requests", 0) / dur if dur > 0 else 0.0


def cmd_rate(path, scenario):
    rates = [rate_of(r) for r in load_results(path) if r["scenario"] == scenario]
    print("%.0f" % (max(rates) if rates else 0))


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


class Report:
    def __init__(self, runs):
        self.runs = runs

    def of(self, scenario, rounds=None):
        return [r for r in self.runs if r["scenario"] == scenario and
                (rounds is None or r["round"] in rounds)]

    def have(self, scenario):
        return bool(self.of(scenario))

    def rate(self, scenario):
        return median([rate_of(r) for r in self.of(scenario)])

    def req_rate(self, scenario):
        return median([req_rate_of(r) for r in self.of(scenario)])

    def lat(self, scenario, key):
        v = median([r.get(key) for r in self.of(scenario)])
        return v / 1000.0 if v is not None else None  # ms

    def errors(self, scenario):
        bad = 0
        for r in self.of(scenario):
            bad += int(r.get("bad", 0)) + int(r.get("err_connect", 0)) + \
                int(r.get("err_read", 0)) + int(r.get("err_write", 0)) + \
                int(r.get("err_timeout", 0))
            if "ops" not in r or r.get("ops", 0) == 0:
                bad += int(r.get("err_status", 0))
        return bad

    def exhausted(self, scenario):
        return sum(int(r.get("exhausted", 0)) for r in self.of(scenario))

    def values(self, scenario, fn):
        return [fn(r) for r in self.of(scenario)]


def fmt_rate(v):
    return "—" if v is None else "{:,.0f}".format(v)


def fmt_ms(v):
    return "—" if v is None else ("%.2f" % v if v < 10 else "%.1f" % v)


def fmt_ratio(v):
    return "—" if v is None else "%.2f" % v


def verdict(ok):
    if ok is None:
        return "not measured"
    return "**met**" if ok else "**NOT met**"


CPU_PARTS = (("idemd", "idemd"), ("pg", "PostgreSQL"), ("up", "upstream"),
             ("node", "Node"), ("redis", "Redis"), ("wrk", "wrk"))


def cpu_per_op(rep, scen, part):
    """Median over the rounds of PART's CPU µs per operation of SCEN."""
    vals = []
    for r in rep.of(scen):
        n = r.get("ops") or (r.get("requests", 0) - r.get("err_status", 0))
        if "cpu_%s_us" % part in r and n:
            vals.append(r["cpu_%s_us" % part] / n)
    return median(vals)


def cpu_table(w, rep, kinds, conns):
    """Where each first submit's CPU went, by process, and the cores idemd
    and PostgreSQL would need for the durable peer's rate."""
    rows = []
    for c, sfx in conns:
        for base, label in kinds:
            scen = base + sfx
            if not rep.have(scen) or cpu_per_op(rep, scen, "wrk") is None:
                continue
            parts = [cpu_per_op(rep, scen, k) or 0.0 for k, _ in CPU_PARTS]
            rows.append((c, base, label, parts))
    if not rows:
        return
    w("CPU per first submit, µs (user + system from `/proc` of each process the bench "
      "started, over the run, divided by its operations; medians of the rounds). The "
      "last column: the cores that idemd, PostgreSQL and the upstream together would keep "
      "busy at the durable peer's rate of the same connection count, where the durable "
      "peer's own Node and Redis used the cores it names.")
    w("")
    w("| connections | scenario | " + " | ".join(n for _, n in CPU_PARTS) +
      " | all | cores at the durable peer's rate |")
    w("|---:|---|" + "---:|" * (len(CPU_PARTS) + 2))
    for c, base, label, parts in rows:
        sfx = dict(conns)[c]
        peer_rate = rep.rate("peerd_first" + sfx) if rep.have("peerd_first" + sfx) else None
        server = parts[3] + parts[4] if base.startswith("peer") else \
            parts[0] + parts[1] + parts[2]
        w("| %d | %s | %s | %.0f | %s |" % (
            c, label, " | ".join("%.0f" % v if v else "—" for v in parts), sum(parts),
            "%.2f" % (peer_rate * server / 1e6) if peer_rate else "—"))
    w("")


def replay_table(w, rep):
    """Where a replay's share of the trivial server goes: the CPU each
    server and wrk spent per request, and how many lookups the replay
    cache answered."""
    pairs = (("replay", "baseline_a_replay", "replay"),
             ("gw_replay", "baseline_a_gw_replay", "gateway replay"))
    rows = [(i, a, label) for i, a, label in pairs if rep.have(i) and rep.have(a)]
    if not rows or cpu_per_op(rep, rows[0][0], "idemd") is None:
        return
    w("CPU per replay, µs (user + system from `/proc`, over the run, divided by its "
      "requests; medians of the rounds), beside the trivial server under the same load, "
      "and the share of idemd's lookups that its replay cache answered (the rest asked "
      "PostgreSQL).")
    w("")
    w("| scenario | idemd | trivial server | ratio | wrk with idemd | wrk with the trivial "
      "server | replay cache hits |")
    w("|---|---:|---:|---:|---:|---:|---:|")
    for i, a, label in rows:
        mine, theirs = cpu_per_op(rep, i, "idemd"), cpu_per_op(rep, a, "base")
        hits = [r["cache_hits"] / (r["cache_hits"] + r["cache_misses"])
                for r in rep.of(i) if r.get("cache_hits", 0) + r.get("cache_misses", 0)]
        w("| %s | %s | %s | %s | %s | %s | %s |" % (
            label, "%.1f" % mine if mine else "—", "%.1f" % theirs if theirs else "—",
            "%.2f" % (mine / theirs) if mine and theirs else "—",
            "%.1f" % (cpu_per_op(rep, i, "wrk") or 0), "%.1f" % (cpu_per_op(rep, a, "wrk") or 0),
            "%.1f %%" % (100 * median(hits)) if hits else "—"))
    w("")


def cmd_report(path, out, scale=False):
    runs = load_results(path)
    rep = Report(runs)
    info = {}
    info_path = os.path.join(os.path.dirname(path), "info.txt")
    if os.path.exists(info_path):
        with open(info_path) as f:
            for line in f:
                k, _, v = line.rstrip("\n").partition("=")
                info[k] = v
    lines = []
    w = lines.append
    w("# idemd benchmark results")
    w("")
    waiters_only = info.get("mode") == "waiters-only"
    if waiters_only:
        w("Written by `bench/run.sh --waiters-only` on %s: the waiter bench alone, %s "
          "rounds, each on one idemd, across two and on a trivial libmicrohttpd server (load generator `waiters_load.c` on the same "
          "machine, all on 127.0.0.1)." % (info.get("date", "?"),
                                             len(rep.of("waiters_1"))))
    else:
        w("Written by `bench/run.sh%s` on %s. Every figure is the median of %s runs "
          "(wrk -t2, %s s each, all on 127.0.0.1, load generator on the same machine)."
          % (" --scale" if scale else "", info.get("date", "?"), info.get("runs", "?"),
             info.get("duration", "?")))
    w("")
    w("| | |")
    w("|---|---|")
    for k, label in (("cpu", "CPU"), ("cores", "cores"), ("load", "load"), ("kernel", "kernel"),
                     ("idemd", "idemd"), ("commit", "source"), ("postgresql", "PostgreSQL"),
                     ("pgsettings", "PostgreSQL settings"),
                     ("libmicrohttpd", "libmicrohttpd"), ("libpq", "libpq"),
                     ("libsodium", "libsodium"), ("jansson", "jansson"), ("wrk", "wrk"),
                     ("pgbench", "pgbench"), ("idemd_threads", "idemd threads / pool_size"),
                     ("gateway", "gateway"), ("peer", "peer"), ("redis", "Redis"),
                     ("durable_peer", "durable peer"), ("pinning", "pinned cores"),
                     ("waiters", "waiter bench")):
        if k in info:
            w("| %s | %s |" % (label, info[k]))
    w("")

    # ------------------------------------------------------------ targets
    a_issue = rep.rate("baseline_a_issue")
    a_replay = rep.rate("baseline_a_replay")
    a_gwr = rep.rate("baseline_a_gw_replay")
    b = rep.rate("baseline_b")
    rows = []

    def paired(scen, base_scen):
        """Median over rounds of idemd / baseline, each pair measured in the
        same round (minutes apart at most), which cancels slow drift of the
        machine's speed better than a ratio of medians."""
        base_by_round = {r["round"]: rate_of(r) for r in rep.of(base_scen)}
        ratios = [rate_of(r) / base_by_round[r["round"]] for r in rep.of(scen)
                  if base_by_round.get(r["round"])]
        return median(ratios)

    def ratio_row(label, scen, base, base_label, target, base_scen, source=""):
        """TARGET None: the ratio is shown, no target applies."""
        v = rep.rate(scen) if rep.have(scen) else None
        ratio = paired(scen, base_scen) if v is not None else None
        if target is None:
            rows.append((label, fmt_rate(v), "%s %s" % (base_label, fmt_rate(base)),
                         fmt_ratio(ratio), "—", ""))
            return
        ok = None if ratio is None else ratio >= target
        rows.append((label, fmt_rate(v), "%s %s" % (base_label, fmt_rate(base)),
                     fmt_ratio(ratio), "≥ %.2f×%s" % (target, source), verdict(ok)))

    ratio_row("issue (req/s)", "issue", a_issue, "A", 0.85, "baseline_a_issue")
    ratio_row("replay (req/s)", "replay", a_replay, "A (replay load)", 0.80,
              "baseline_a_replay")
    if rep.have("gw_replay"):
        ratio_row("gateway replay (req/s)", "gw_replay", a_gwr, "A (gateway load)", 0.80,
                  "baseline_a_gw_replay")
    else:
        rows.append(("gateway replay (req/s)", info.get("gateway_note", "not yet available"),
                     "", "", "≥ 0.80×", "not measured"))
    ratio_row("direct first submit, 16 connections (ops/s)", "first_submit", b, "B", 0.60,
              "baseline_b", " (issue 18)")
    if rep.have("first_submit_c64"):
        ratio_row("direct first submit, 64 connections (ops/s)", "first_submit_c64", b, "B",
                  0.40, "baseline_b")
    if rep.have("gw_first"):
        ratio_row("gateway first submit, 16 connections (ops/s)", "gw_first", b, "B", 0.30,
                  "baseline_b")
    if rep.have("gw_first_c64"):
        ratio_row("gateway first submit, 64 connections (ops/s)", "gw_first_c64", b, "B",
                  0.30, "baseline_b")
    if not rep.have("gw_first"):
        rows.append(("gateway first submit (ops/s)",
                     info.get("gateway_note", "not yet available"), "", "", "≥ 0.30×",
                     "not measured"))
    if rep.have("gw_ietf_first"):
        ratio_row("IETF-key gateway first submit, 16 connections (ops/s)", "gw_ietf_first",
                  b, "B", None, "baseline_b")
    if rep.have("gw_ietf_first_c64"):
        ratio_row("IETF-key gateway first submit, 64 connections (ops/s)",
                  "gw_ietf_first_c64", b, "B", None, "baseline_b")
    # against the Node + node-idempotency + Redis peer, measured in the same rounds
    if rep.have("peer_first"):
        pf, pf64 = rep.rate("peer_first"), rep.rate("peer_first_c64")
        for scen, label in (("gw_first", "token"), ("gw_ietf_first", "IETF-key")):
            ratio_row("%s gateway first submit, 16 connections, against the peer (ops/s)" % label,
                      scen, pf, "peer", 1.0, "peer_first", " (issue 18)")
            ratio_row("%s gateway first submit, 64 connections, against the peer (ops/s)" % label,
                      scen + "_c64", pf64, "peer", 1.5, "peer_first_c64", " (issue 18)")
        ratio_row("IETF-key gateway first submit against the token route, 16 connections",
                  "gw_ietf_first", rep.rate("gw_first"), "token route", 1.0, "gw_first",
                  " (issue 12)")
        ratio_row("IETF-key gateway replay against the peer's replay (req/s)", "gw_ietf_replay",
                  rep.rate("peer_replay"), "peer", 3.0, "peer_replay", " (issue 12)")
    # against the durable peer (Redis fsyncing every write), same rounds
    if rep.have("peerd_first"):
        for c, suffix in ((16, ""), (32, "_c32"), (64, "_c64")):
            for scen, label in (("first_submit", "direct"), ("gw_first", "token route"),
                                ("gw_ietf_first", "IETF-key route")):
                ratio_row("%s first submit, %d connections, against the durable peer (ops/s)"
                          % (label, c), scen + suffix, rep.rate("peerd_first" + suffix),
                          "durable peer", 1.0 if c >= 32 else None, "peerd_first" + suffix,
                          " (issue 30)")
        dp50 = rep.lat("peerd_first_c1", "p50_us")
        for scen, label in (("first_submit_c1", "direct"), ("gw_first_c1", "token route"),
                            ("gw_ietf_first_c1", "IETF-key route")):
            v = rep.lat(scen, "p50_us") if rep.have(scen) else None
            # the direct first submit is two requests (claim, complete): its
            # latency per operation is their sum
            per_op = v * 2 if v is not None and scen == "first_submit_c1" else v
            ok = None if per_op is None or dp50 is None else per_op <= dp50
            rows.append(("%s first submit, one connection: p50 per operation (ms)" % label,
                         fmt_ms(per_op), "durable peer %s" % fmt_ms(dp50),
                         fmt_ratio(per_op / dp50) if per_op and dp50 else "—",
                         "≤ 1.00× (issue 30)", verdict(ok)))
    if rep.have("key_batch"):
        ratio_row("batch claims of 100 caller keys against single claims (keys/s)",
                  "key_batch", rep.rate("key_claim"), "single", 5.0, "key_claim", " (issue 12)")
        ratio_row("batch claims of 100 caller keys against B (keys/s : rows/s)", "key_batch",
                  b, "B", 1.5, "baseline_b", " (issue 12)")

    def p99_row(label, scen, limit_ms, source=""):
        v = rep.lat(scen, "p99_us") if rep.have(scen) else None
        ok = None if v is None else v < limit_ms
        rows.append((label, fmt_ms(v), "A %s" % fmt_ms(rep.lat("baseline_a_issue", "p99_us")),
                     "", "< %g ms%s" % (limit_ms, source), verdict(ok)))

    p99_row("issue p99 at 16 connections (ms)", "issue", 2)
    p99_row("replay p99 at 16 connections (ms)", "replay", 2)
    p99_row("claim p99 at 16 connections (ms)", "claim", 10, " (issue 18)")

    for scen, label, p99_limit in (("waiters_1", "one instance", 100),
                                   ("waiters_2", "two instances, completed on one", 250)):
        wr = rep.of(scen)
        if not wr:
            continue
        n = sum(int(r.get("n", 0)) for r in wr)
        got = sum(int(r.get("replayed", 0)) for r in wr)
        what = "{:,} waiters, {}".format(int(wr[0].get("n", 0)), label)
        # the targets are for 10,000 (BENCH_WAITERS makes smaller checks)
        full = int(wr[0].get("n", 0)) >= 10000

        def wverdict(ok):
            return verdict(ok) if full else "no verdict (fewer than 10,000)"
        rows.append(("%s: answered with the replay (%d rounds)" % (what, len(wr)),
                     "%d of %d (early %d, other status %d, unanswered %d)" % (
                         got, n, sum(int(r.get("answered_early", 0)) for r in wr),
                         sum(int(r.get("other_status", 0)) for r in wr),
                         sum(int(r.get("unanswered", 0)) for r in wr)),
                     "", "", "every waiter (issue 13)", wverdict(got == n)))
        p99 = median([r.get("p99_us", 0) / 1000.0 for r in wr])
        # the floor: a trivial libmicrohttpd server answering as many
        # suspended connections (waiters.sh, waiters_floor)
        fl = rep.of("waiters_floor")
        fp99 = median([r.get("p99_us", 0) / 1000.0 for r in fl]) if fl else None
        rows.append(("%s: p99 wake-up after the completion's 200 (ms)" % what,
                     "%s (p50 %s; rounds: %s)" % (
                         fmt_ms(p99), fmt_ms(median([r.get("p50_us", 0) / 1000.0 for r in wr])),
                         ", ".join(fmt_ms(r.get("p99_us", 0) / 1000.0) for r in wr)),
                     "floor %s" % fmt_ms(fp99) if fp99 else "",
                     "%.2f" % (p99 / fp99) if fp99 else "",
                     "< %d ms (issue 13)" % p99_limit, wverdict(p99 < p99_limit)))
        keys = sorted(k for k in wr[0] if k.startswith("rss") and k.endswith("_kb"))
        rss = [median([r.get(k, 0) / 1024.0 for r in wr]) for k in keys]
        if rss:
            rows.append(("%s: idemd RSS with them open (MiB)" % what,
                         " + ".join("%.1f" % x for x in rss), "", "",
                         "< 96 MiB (issue 13)" if len(rss) == 1 else "— (each instance)",
                         wverdict(max(rss) < 96) if len(rss) == 1 else ""))
        for pre, when in (("rest", "2 s after they are answered and closed"),
                          ("trim", "32 s after, once freed memory went back")):
            keys = sorted(k for k in wr[0] if k.startswith(pre) and k.endswith("_kb"))
            vals = [median([r.get(k, 0) / 1024.0 for r in wr]) for k in keys]
            if vals:
                rows.append(("%s: idemd RSS %s (MiB)" % (what, when),
                             " + ".join("%.1f" % x for x in vals), "", "", "—", ""))

    c2k = rep.of("c2000")
    if c2k:
        r = c2k[-1]
        served = r.get("established", 0) >= 2000 and r.get("err_connect", 0) == 0 and \
            r.get("err_timeout", 0) == 0 and r.get("err_read", 0) == 0
        rows.append(("2,000 keep-alive connections served",
                     "%d open, %s req/s, errors %d" % (
                         r.get("established", 0), fmt_rate(req_rate_of(r)),
                         int(r.get("err_connect", 0) + r.get("err_read", 0) +
                             r.get("err_write", 0) + r.get("err_timeout", 0) +
                             r.get("err_status", 0))),
                     "", "", "all 2,000 open, no errors", verdict(served)))
        rss = r.get("rss_kb", 0) / 1024.0
        hwm = r.get("hwm_kb", 0) / 1024.0
        base = rep.of("baseline_a_c2000")
        base_txt = "A %.1f" % (base[-1].get("rss_kb", 0) / 1024.0) if base else ""
        rows.append(("RSS with 2,000 connections open (MiB)",
                     "%.1f (peak so far %.1f)" % (rss, hwm), base_txt, "", "< 64 MiB",
                     verdict(rss < 64)))
    rounds = [r for r in rep.of("rss") if r["round"].startswith("round")]
    if len(rounds) >= 2:
        rss = [r.get("rss_kb", 0) / 1024.0 for r in rounds]
        # what the replay cache's responses take is bounded (6 MiB) and
        # fills over the first rounds; growth beyond it would be a leak
        rest = [r.get("rss_kb", 0) / 1024.0 - r.get("cache_bytes", 0) / 1048576.0
                for r in rounds]
        growth = rest[-1] - rest[0]
        rows.append(("RSS after each round (MiB); less the replay cache's responses",
                     " → ".join("%.1f" % v for v in rss) + " (%+.1f); " % (rss[-1] - rss[0]) +
                     " → ".join("%.1f" % v for v in rest) + " (%+.1f)" % growth, "", "",
                     "no growth (≤ 1 MiB) beyond the bounded cache", verdict(growth <= 1.0)))

    if waiters_only:
        rows = [r for r in rows if " waiters, " in r[0]]
    w("## Targets")
    w("")
    w("| figure | idemd | baseline | ratio | target | |")
    w("|---|---:|---:|---:|---|---|")
    for row in rows:
        w("| %s |" % " | ".join(row))
    w("")
    w("A = trivial libmicrohttpd server with idemd's threading settings, under the same "
      "wrk script as the idemd figure; B = pgbench -M prepared, 8 clients, one-row "
      "INSERT … ON CONFLICT DO NOTHING per transaction into a copy of the records table. "
      "idemd and baseline columns are medians over the runs; the ratio is the median of "
      "the per-round ratios (idemd and its baseline run in the same round, so the "
      "machine's drift cancels out). p99 targets are shown beside baseline A's own p99 "
      "under the issue load: a p99 below the baseline's cannot be expected.")
    w("")

    # ------------------------------------------------------- durability
    if rep.have("peerd_first"):
        w("## First submits against both peers")
        w("")
        w("Operations/s (p50 / p99 ms per request) by connections; the ratios below are "
          "medians of per-round ratios. The durable peer is the same Node server on a Redis "
          "that fsyncs every write before answering; idemd commits every acknowledged write "
          "synchronously. A direct first submit is two requests (claim, complete).")
        w("")
        conns = ((1, "_c1"), (16, ""), (32, "_c32"), (64, "_c64"))
        w("| | " + " | ".join("%d connection%s" % (c, "" if c == 1 else "s")
                               for c, _ in conns) + " |")
        w("|---|" + "---:|" * len(conns))
        kinds = (("first_submit", "idemd direct API"), ("gw_first", "idemd gateway, token route"),
                 ("gw_ietf_first", "idemd gateway, IETF-key route"),
                 ("peer_first", "peer, Redis without fsync"),
                 ("peerd_first", "durable peer, Redis appendfsync always"))

        def cell(scen):
            if not rep.have(scen):
                return "—"
            return "%s (%s / %s)" % (fmt_rate(rep.rate(scen)), fmt_ms(rep.lat(scen, "p50_us")),
                                     fmt_ms(rep.lat(scen, "p99_us")))
        for base, label in kinds:
            w("| %s | %s |" % (label, " | ".join(cell(base + sfx) for _, sfx in conns)))
        for base, label in kinds[:3]:
            for peer, plabel in (("peerd_first", "durable peer"), ("peer_first", "peer")):
                w("| %s / %s | %s |" % (label, plabel, " | ".join(
                    fmt_ratio(paired(base + sfx, peer + sfx))
                    if rep.have(base + sfx) and rep.have(peer + sfx) else "—"
                    for _, sfx in conns)))
        w("")
        cpu_table(w, rep, kinds, conns)
    replay_table(w, rep)

    # --------------------------------------------------------- all figures
    w("## Every scenario")
    w("")
    w("| scenario | runs | throughput | req/s | p50 ms | p90 ms | p99 ms | max ms | "
      "errors | WAL bytes/op | all runs (throughput) |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")

    def wal_per_op(scen):
        vals = []
        for r in rep.of(scen):
            if "wal_bytes" not in r:
                continue
            n = r.get("transactions") or r.get("ops") or \
                (r.get("requests", 0) - r.get("err_status", 0))
            if n:
                vals.append(r["wal_bytes"] / n)
        v = median(vals)
        return "—" if v is None else "{:,.0f}".format(v)
    order = [
        ("baseline_a_issue", "baseline A: trivial MHD, issue load", "req/s"),
        ("baseline_a_replay", "baseline A: trivial MHD, replay load", "req/s"),
        ("baseline_a_gw_replay", "baseline A: trivial MHD, gateway replay load", "req/s"),
        ("baseline_b", "baseline B: pgbench INSERT, 8 clients", "tx/s"),
        ("issue", "idemd issue", "req/s"),
        ("first_submit", "idemd direct first submit (claim + complete), 16 connections",
         "ops/s"),
        ("first_submit_c64", "idemd direct first submit, 64 connections", "ops/s"),
        ("claim", "idemd claim of fresh tokens (no complete)", "ops/s"),
        ("replay", "idemd replay (claim of completed tokens)", "req/s"),
        ("gw_first", "idemd gateway first submit, 16 connections", "ops/s"),
        ("gw_first_c64", "idemd gateway first submit, 64 connections", "ops/s"),
        ("gw_replay", "idemd gateway replay", "req/s"),
        ("gw_ietf_first", "idemd IETF-key gateway first submit, 16 connections", "ops/s"),
        ("gw_ietf_first_c64", "idemd IETF-key gateway first submit, 64 connections", "ops/s"),
        ("gw_ietf_replay", "idemd IETF-key gateway replay", "req/s"),
        ("peer_first", "peer: Node + node-idempotency + Redis, first submit, 16 connections",
         "ops/s"),
        ("peer_first_c64", "peer: first submit, 64 connections", "ops/s"),
        ("peer_replay", "peer: replay", "req/s"),
        ("peerd_first", "durable peer (Redis appendfsync always): first submit, 16 connections",
         "ops/s"),
        ("peerd_first_c64", "durable peer: first submit, 64 connections", "ops/s"),
        ("key_claim", "idemd claim of a fresh caller key, one per request", "keys/s"),
        ("key_batch", "idemd batch claim of 100 fresh caller keys", "keys/s"),
        ("c2000", "idemd GET /healthz, 2,000 connections", "req/s"),
        ("baseline_a_c2000", "baseline A: GET, 2,000 connections", "req/s"),
        ("db_first_submit", "diagnostic: claim_fresh + complete_current (plain SQL) by "
         "pgbench, no idemd", "ops/s"),
        ("db_first_submit_fn", "diagnostic: idemd.claim + idemd.complete (PL/pgSQL) by "
         "pgbench, no idemd", "ops/s"),
        ("db_replay", "diagnostic: claim_fresh (plain SQL) of a completed record by pgbench",
         "tx/s"),
        ("db_replay_fn", "diagnostic: idemd.claim (PL/pgSQL) of a completed record by pgbench",
         "tx/s"),
        ("db_select", "diagnostic: plain SELECT of a completed record by pgbench", "tx/s"),
        ("scale_claim", "10M records: claim of fresh tokens", "ops/s"),
        ("scale_replay", "10M records: replay", "req/s"),
        ("scale_sweep_claim", "10M records, sweeper deleting: claim", "ops/s"),
    ]
    for scen, label, unit in order:
        if not rep.have(scen):
            continue
        if "tps" in rep.of(scen)[0]:
            w("| %s | %d | %s %s | — | %s (avg) | — | — | — | %d | %s | %s |" % (
                label, len(rep.of(scen)), fmt_rate(rep.rate(scen)), unit,
                fmt_ms(median(rep.values(scen, lambda r: r.get("lat_avg_ms")))),
                0, wal_per_op(scen), ", ".join(fmt_rate(x) for x in rep.values(scen, rate_of))))
            continue
        errs = rep.errors(scen)
        ex = rep.exhausted(scen)
        w("| %s | %d | %s %s | %s | %s | %s | %s | %s | %d%s | %s | %s |" % (
            label, len(rep.of(scen)), fmt_rate(rep.rate(scen)), unit,
            fmt_rate(rep.req_rate(scen)), fmt_ms(rep.lat(scen, "p50_us")),
            fmt_ms(rep.lat(scen, "p90_us")), fmt_ms(rep.lat(scen, "p99_us")),
            fmt_ms(rep.lat(scen, "max_us")), errs,
            " (tokens ran out in %d runs)" % ex if ex else "",
            wal_per_op(scen) if not scen.startswith(("baseline_a", "peer")) else "—",
            ", ".join(fmt_rate(x) for x in rep.values(scen, rate_of))))
    w("")
    w("Latency is per HTTP request as wrk measures it (for the direct first submit: "
      "claims and completes together). Errors count unexpected statuses and socket "
      "errors; every scenario expects none. WAL bytes/op: PostgreSQL write-ahead log "
      "written during the run per operation (per transaction for pgbench), i.e. what had "
      "to be made durable; a replay answered from memory writes none.")
    w("")

    derived = []
    fs, dbfs = rep.rate("first_submit"), rep.rate("db_first_submit")
    if fs and dbfs and b:
        derived.append(
            "direct first submit: idemd %s ops/s at 16 connections; the same two SQL calls "
            "driven one per transaction by pgbench with 8 connections %s ops/s (%.2f × B). "
            "idemd runs them in batches (group commit), so it is not capped there: "
            "%.0f%% of that figure at 16 connections%s" % (
                fmt_rate(fs), fmt_rate(dbfs), dbfs / b, 100.0 * fs / dbfs,
                ", %.0f%% at 64" % (100.0 * rep.rate("first_submit_c64") / dbfs)
                if rep.have("first_submit_c64") else ""))
    dbfn = rep.rate("db_first_submit_fn")
    if dbfs and dbfn:
        derived.append(
            "the database's cost of a first submit: the plain-SQL claim_fresh + "
            "complete_current %s ops/s against the PL/pgSQL idemd.claim + idemd.complete "
            "%s ops/s by the same pgbench (%.2f×)" % (fmt_rate(dbfs), fmt_rate(dbfn),
                                                      dbfs / dbfn))
    rp, dbr, dbs = rep.rate("replay"), rep.rate("db_replay"), rep.rate("db_select")
    if rp and dbr and dbs:
        derived.append(
            "replay: idemd %s req/s; the claim of a completed record by pgbench %s tx/s "
            "(a read without a lock, as idemd sends it on a replay cache miss in a batch; "
            "alone, as claim_one)%s; "
            "a plain SELECT of the same row %s tx/s" % (
                fmt_rate(rp), fmt_rate(dbr),
                ", through idemd.claim %s tx/s" % fmt_rate(rep.rate("db_replay_fn"))
                if rep.have("db_replay_fn") else "", fmt_rate(dbs)))
    if derived:
        w("## Where the time goes (from the diagnostics)")
        w("")
        for d in derived:
            w("- " + d)
        w("")

    wruns = rep.of("waiters_1") + rep.of("waiters_2") + rep.of("waiters_floor")
    if wruns:
        w("## Waiters")
        w("")
        w("| run | waiters | replayed | early | other status | unanswered | wake-up min / p50 / "
          "p90 / p99 / max ms | completion's own answer ms | connecting ms | load generator "
          "CPU while answers came ms | database jobs (batches) |")
        w("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|")
        for r in wruns:
            w("| %s, %s | %d | %d | %d | %d | %d | %s | %s | %d | %s | %d (%d) |" % (
                {"waiters_1": "one instance", "waiters_2": "two instances"}.get(
                    r["scenario"], "floor (trivial libmicrohttpd)"), r["round"],
                int(r.get("n", 0)), int(r.get("replayed", 0)), int(r.get("answered_early", 0)),
                int(r.get("other_status", 0)), int(r.get("unanswered", 0)),
                " / ".join(fmt_ms(r.get(k, 0) / 1000.0)
                           for k in ("min_us", "p50_us", "p90_us", "p99_us", "max_us")),
                fmt_ms(r.get("complete_us", 0) / 1000.0), int(r.get("connect_ms", 0)),
                fmt_ms(r.get("loader_cpu_us", 0) / 1000.0), int(r.get("db_jobs", 0)),
                int(r.get("db_batches", 0))))
        w("")
        w("Floor: the same load on `baseline_mhd --park 1`, a trivial libmicrohttpd server "
          "with idemd's daemon flags, threads and per-connection memory that suspends every "
          "request and, on the completion, resumes them all and answers each with one static "
          "response: what waking and answering the suspended connections costs the HTTP "
          "library alone on this machine.")
        w("Wake-up: from reading the completion's 200 to reading each waiter's answer. "
          "Database jobs: claims and completes idemd sent to PostgreSQL during the run, "
          "all instances (the waiters' first claims, the holder's claim and completion, "
          "and what waking them cost).")
        w("")

    rss = rep.of("rss")
    if rss:
        w("## idemd memory")
        w("")
        w("| when | VmRSS MiB | VmHWM MiB | replay cache responses MiB | threads |")
        w("|---|---:|---:|---:|---:|")
        for r in rss:
            w("| %s | %.1f | %.1f | %.1f | %d |" % (
                r["round"], r.get("rss_kb", 0) / 1024.0, r.get("hwm_kb", 0) / 1024.0,
                r.get("cache_bytes", 0) / 1048576.0, r.get("threads", 0)))
        w("")
        w("Each read 31 s after the load stopped (idemd trims its heap every 30 s).")
        w("")

    sweep = rep.of("scale_sweep")
    if sweep or scale:
        rows_txt = info.get("scale_rows", "?")
        if rows_txt.isdigit():
            rows_txt = "{:,}".format(int(rows_txt))
        w("## Scale (%s records loaded, a tenth of them expired)" % rows_txt)
        w("")
        for key, label in (("claim", "claim of fresh tokens"), ("replay", "replay")):
            small = rep.rate(key)
            big = rep.rate("scale_" + key)
            sp = rep.lat(key, "p99_us")
            bp = rep.lat("scale_" + key, "p99_us")
            if big is None:
                w("- %s: not measured" % label)
                continue
            delta = (big / small - 1) * 100 if small else float("nan")
            w("- %s: small table %s/s (p99 %s ms), 10M records %s/s (p99 %s ms): "
              "%+.0f%% (target: no more than 20%% below; faster is the machine's "
              "drift between the two measurements) %s" % (
                  label, fmt_rate(small), fmt_ms(sp), fmt_rate(big), fmt_ms(bp), delta,
                  verdict(delta >= -20)))
        for r in sweep:
            runs = rep.of("scale_sweep_claim")
            p99s = [x.get("p99_us", 0) / 1000.0 for x in runs]
            w("- sweeper: %d expired rows deleted in %.0f s (%s rows/s) while %d claim runs "
              "of %s s went on: claim p99 median %s ms, worst %s ms, claims %s/s median; "
              "without the sweeper, on the small table, claim p99 was %s ms "
              "(target: p99 < 10 ms during the sweep) %s" % (
                  r.get("deleted", 0), r.get("seconds", 0),
                  fmt_rate(r.get("deleted", 0) / max(r.get("seconds", 1), 1)), len(runs),
                  info.get("duration", "?"), fmt_ms(median(p99s)),
                  fmt_ms(r.get("worst_p99_us", 0) / 1000.0),
                  fmt_rate(rep.rate("scale_sweep_claim")), fmt_ms(rep.lat("claim", "p99_us")),
                  verdict(r.get("worst_p99_us", 1e9) < 10000)))
        w("")

    notes = info.get("notes")
    if notes:
        w("## Notes")
        w("")
        for n in notes.split(" | "):
            w("- " + n)
        w("")
    with open(out, "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def cmd_batch_script(src, table):
    """Prints the first submit of SRC (pgbench_db_first_submit.sql: the two
    statements over one-element arrays) over arrays of 32 fresh records, as
    idemd sends a batch of 32 requests, on TABLE (records, or cost_hot):
    the cost model's first_submit_batch and first_submit_batch_hot."""
    text = open(src).read()
    body = text[text.index("\\set"):]
    body = body.replace("\\set k random(1000000, 9000000000000000)",
                        "\\set k random(1000000, 90000000000000)")
    # ids k * 64 + 1..32: two transactions practically never meet
    body = body.replace(
        "ARRAY[decode(lpad(to_hex(:k::bigint), 32, '0'), 'hex')]",
        "ARRAY(SELECT decode(lpad(to_hex(:k::bigint * 64 + g), 32, '0'), 'hex') "
        "FROM generate_series(1, 32) g)")

    def fill(m):
        v = m.group(1)
        return "array_fill(%s, ARRAY[32])" % (v + "::text" if v == "'user-42'" else v)
    body = re.sub(r"ARRAY\[((?:'[^']*'(?:::\w+)?|[^\[\]]+))\]", fill, body)
    for verb in ("INSERT INTO", "FROM", "JOIN", "UPDATE"):
        body = body.replace("%s records rec" % verb, "%s %s rec" % (verb, table))
        body = body.replace("%s records AS rec" % verb, "%s %s AS rec" % (verb, table))
    sys.stdout.write(body)


def cmd_costmodel(path, out, machine):
    per = {}
    with open(path) as f:
        for line in f:
            step, _, cpu, tx = line.split()
            if int(tx) > 0:
                per.setdefault(step, []).append(int(cpu) / int(tx))
    m = {k: median(v) for k, v in per.items()}
    S, i1, i2 = m["statement"], m["insert_bare"], m["insert_bare_twice"]
    heap = i2 - i1 - 3 * S          # one more INSERT, BEGIN and COMMIT
    commit = i1 - S - heap
    pk = m["insert_pk"] - i1
    idx = (m["insert_records"] - m["insert_pk"]) / 3
    hot = m["update_hot"] - S - commit
    nonhot = m["update_nonhot"] - S - commit
    # a first submit: claim (records row, 4 entries) and completion
    # (records updated, not HOT), two statements, two commits; the two
    # audit events told by the record's columns (migrations/0013)
    parts = [("statements (round trip, execution frame)", 2, S),
             ("commits (WAL flush with synchronous_commit on)", 2, commit),
             ("heap tuples inserted (the record)", 1, heap),
             ("primary key entries of the inserts", 1, pk),
             ("other index entries of the inserts (record 3)", 3, idx),
             ("non-HOT update of the record (its lookup, tuple, 3 index entries)", 1, nonhot)]
    model = sum(n * c for _, n, c in parts)
    real, fn = m.get("first_submit"), m.get("first_submit_fn")
    rows, rows8 = m.get("first_submit_rows"), m.get("first_submit_rows@8")
    lines = []
    w = lines.append
    w("# What a first submit costs PostgreSQL")
    w("")
    w("Written by `bench/costmodel.sh` (%s). CPU time of the one backend doing the work, "
      "per transaction, medians of the rounds; every step is one pgbench client, prepared "
      "statements, synchronous_commit on." % machine)
    w("")
    w("| step (bench/cost/) | µs per transaction | rounds |")
    w("|---|---:|---|")
    for k in ("statement", "insert_bare", "insert_bare_twice", "insert_pk", "insert_records",
              "update_hot", "update_nonhot", "first_submit", "first_submit_rows",
              "first_submit_fn", "insert_bare@8", "first_submit@8", "first_submit_rows@8",
              "first_submit_batch@2", "first_submit_batch_hot@2"):
        if k in per:
            w("| %s | %.1f | %s |" % (k, m[k], ", ".join("%.1f" % x for x in per[k])))
    w("")
    w("Derived unit costs (µs of CPU):")
    w("")
    w("| unit | µs | from |")
    w("|---|---:|---|")
    for name, v, how in (
            ("statement", S, "statement"),
            ("heap tuple insert", heap, "insert_bare_twice − insert_bare − 3 statements"),
            ("commit", commit, "insert_bare − statement − heap tuple"),
            ("primary key entry (with its uniqueness check)", pk, "insert_pk − insert_bare"),
            ("other index entry", idx, "(insert_records − insert_pk) / 3"),
            ("HOT update, with its primary-key lookup", hot, "update_hot − statement − commit"),
            ("non-HOT update (3 index entries), with its lookup", nonhot,
             "update_nonhot − statement − commit")):
        w("| %s | %.1f | %s |" % (name, v, how))
    w("")
    w("A first submit as the sum of its parts:")
    w("")
    w("| part | count | µs each | µs |")
    w("|---|---:|---:|---:|")
    for name, n, c in parts:
        w("| %s | %d | %.1f | %.1f |" % (name, n, c, n * c))
    w("| **sum** | | | **%.1f** |" % model)
    if real:
        w("| measured: the two statements idemd sends (pgbench_db_first_submit.sql) | | | "
          "%.1f |" % real)
        w("| the rest: CTEs, unnest, the plan of a statement that does several things | | | "
          "%.1f |" % (real - model))
    if rows:
        w("| measured: the same with each audit event a row (before migration 0013: "
          "first_submit_rows) | | | %.1f |" % rows)
    if fn:
        w("| measured: through idemd.claim and idemd.complete (PL/pgSQL) | | | %.1f |" % fn)
    c8, fs8 = m.get("insert_bare@8"), m.get("first_submit@8")
    if c8 is not None:
        w("| with 8 clients: a commit (insert_bare@8 − statement − heap tuple), its flush "
          "shared by several | | %.1f | |" % (c8 - S - heap))
    if fs8 is not None:
        w("| measured with 8 clients: the two statements idemd sends (first_submit@8) | | | "
          "%.1f |" % fs8)
    if rows8 is not None:
        w("| measured with 8 clients: with each event a row (first_submit_rows@8) | | | "
          "%.1f |" % rows8)
    w("")
    if real and rows:
        w("Telling the claimed and completed events by the record's own columns "
          "(migrations/0013) instead of a row each: %.0f µs of CPU per first submit instead "
          "of %.0f (%.0f%% less)%s." % (
              real, rows, 100 * (rows - real) / rows,
              "; with 8 clients %.0f instead of %.0f (%.0f%% less)" % (
                  fs8, rows8, 100 * (rows8 - fs8) / rows8)
              if fs8 is not None and rows8 is not None else ""))
        w("")
    if real:
        floor = fs8 if fs8 is not None else real
        w("Unbatched (each first submit its own two statements and commits, 8 clients): "
          "PostgreSQL alone on both cores could take %s first submits/s (2 cores / %.0f µs; "
          "one client alone: %.0f µs). Under load idemd batches, below." % (
              fmt_rate(2e6 / floor), floor, real))
        w("")
        w("What the ways open to a lighter submit would take off, by these units:")
        w("")
        w("- a completion that touches no indexed column (HOT): %.0f µs (%.0f%%)" % (
            nonhot - hot, 100 * (nonhot - hot) / real))
        w("- one index fewer on records (the tenant listing): %.0f µs (%.0f%%)" % (
            2 * idx, 100 * 2 * idx / real))
        w("- one transaction instead of two (claim and completion in one commit, possible "
          "only where the work is done inside it): %.0f µs (%.0f%%)" % (
              commit + S, 100 * (commit + S) / real))
        w("")
    b, bh = m.get("first_submit_batch@2"), m.get("first_submit_batch_hot@2")
    if b is not None:
        # a transaction of these steps is 32 first submits' claims, then
        # their completions
        w("Floor of this design on this machine, batched as idemd batches under load "
          "(first_submit_batch: the claims of 32 requests in one statement and one commit, "
          "then their completions; 2 clients): %.0f µs of PostgreSQL CPU per first submit, "
          "so PostgreSQL alone on both cores could take %s first submits/s with this schema "
          "and these statements, before idemd, the upstream and the load generator take any "
          "CPU." % (b / 32, fmt_rate(2e6 * 32 / b)))
        if bh is not None:
            w("With a completion that is a HOT update (first_submit_batch_hot: no index on "
              "`state`, `lease_expires_at` or `expires_at`, fillfactor 70): %.0f µs, %s "
              "first submits/s (%.0f%% less CPU). Keeping that would need the sweeper to find "
              "expired records and expired leases without those indexes." % (
                  bh / 32, fmt_rate(2e6 * 32 / bh), 100 * (b - bh) / b))
        w("")
    with open(out, "w") as f:
        f.write("\n".join(lines))


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd, args = argv[1], argv[2:]
    if cmd == "tokens" and len(args) == 5:
        cmd_tokens(*args)
    elif cmd == "pick":
        cmd_pick(args)
    elif cmd == "seed-keys" and len(args) == 4:
        cmd_seed_keys(*args)
    elif cmd == "free-ports" and len(args) == 1:
        cmd_free_ports(args[0])
    elif cmd == "rate" and len(args) == 2:
        cmd_rate(*args)
    elif cmd == "batch-script" and len(args) == 2:
        cmd_batch_script(*args)
    elif cmd == "costmodel" and len(args) == 3:
        cmd_costmodel(*args)
    elif cmd == "report" and len(args) >= 2:
        cmd_report(args[0], args[1], "--scale" in args[2:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
