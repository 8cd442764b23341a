"""The checker: proves from a history (history.py) and the upstream's
execution log (upstream.py) alone that idemd kept its promises, or lists
the violations with the part of the history that shows each.

Times are the clients' wall clock when a request was sent (w0) and when
its answer arrived (w1); whatever the server did for a request it did
between the two. The server's own times (lease_expires_at) come from the
same host's clock; CLOCK seconds of slack are allowed for rounding. Every
check flags only what is certain whatever the order inside those windows.

Per key (one record address; its ops are one history):
  1  no two live grants: two 201s of one key where, whichever came first,
     the other was granted before the first's lease ended (as the server
     announced it, lease_expires_at), within the first's life, with no
     release or complete by the first holder sent before.
     1b: a grant whose lease had ended DELIVER seconds before the 201
     arrived (a claim acknowledged with a dead lease), unless its idemd was
     frozen (SIGSTOP) while it was in flight.
  2  no grant after an acknowledged completion: a 201 sent after a complete
     was answered 200 and answered before that completed life can have
     ended (the complete was sent + retention_seconds).
  3  identical replays: every replay (200 completed) inside that life
     carries the acknowledged completion's response; every replay anywhere
     carries a response some complete of the key sent; gateway answers
     inside a stored execution's life carry that execution's id.
  4  readable: reads and claims inside an acknowledged completion's life
     show it (never 404, 410, in progress or another response); gateway
     submits inside a stored answer's life get it.
  5  no accepted write from a stale holder: a complete, release, extend or
     checkpoint answered 2xx, sent with the attempt of a grant after
     another 201 of the key, sent after the first 201 arrived, had arrived.
  6  gateway: no second upstream execution of a key (a) before the first
     one's claim could have ended (its submit sent + lease_seconds) when that
     submit was answered without a release, (b) after an execution whose
     answer a client got, inside that life.
  6u gateway, what ran is never run again: no execution of a key after
     idemd got an upstream 2xx it could not store (its submit answered 502
     upstream_invalid or upstream_answer_unstorable), inside the life that
     answer would have had.
  7  expiry is exact: no replay or read shows a completed life after the
     expires_at its complete's answer announced (EXPIRY_SLACK allowed).
  6r gateway, no forward on a dying lease (PRODUCT part three: a forward
     starts only while the lease covers the route's timeout plus a margin):
     no second execution while the first was still running upstream
     although the first ran shorter than the route's timeout (so its
     forward was cut short of that timeout, or outlived its lease).

Usage: python3 check.py HISTORY.jsonl [--upstream LOG] [--quiet]
Exits 1 when there is a violation.
"""

import argparse
import calendar
import collections
import json
import os
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import history as hist  # noqa: E402
import upstream as ups  # noqa: E402

CLOCK = 0.1      # rounding of the server's times, same host's clock
DELIVER = 0.5    # a 201 may take this long from the commit to the client
GW_MARGIN = 0.25  # an execution this much shorter than the route's timeout
EXPIRY_SLACK = 0.25  # idemd's estimate of the database's clock may be this far off
WRITES = ("complete", "release", "extend", "checkpoint")
CHECKS = {
    "1": "no two live grants of one key",
    "1b": "no claim acknowledged with a lease already ended",
    "2": "no grant after an acknowledged completion within its life",
    "3": "identical replays",
    "4": "acknowledged completions readable until their expiry",
    "5": "no accepted write from a stale holder",
    "6": "gateway: no second execution without a release or a lease end",
    "6u": "gateway: what ran is never run again (no execution after a 2xx idemd got but "
          "could not store)",
    "7": "expiry is exact: no completed life served after its announced expires_at",
    "6r": "gateway: no forward on a dying lease (no execution cut short by its lease while "
          "a second one ran)",
}


def ts(text):
    """An RFC 3339 UTC time ("2026-11-25T20:57:37.513Z") as epoch seconds."""
    if not isinstance(text, str) or len(text) < 20:
        return None
    base, _, frac = text.rstrip("Z").partition(".")
    t = calendar.timegm(time.strptime(base, "%Y-%m-%dT%H:%M:%S"))
    return t + (float("0." + frac) if frac else 0.0)


def ok(op):
    return op["status"] is not None and 200 <= op["status"] < 300


def unknown(op):
    return op["status"] is None or op["status"] >= 500


def effective(op):
    """Whether the request may have changed something."""
    return ok(op) or unknown(op)


def body(op):
    return op.get("body") if isinstance(op.get("body"), dict) else {}


def same_response(resp, sent):
    """A stored response (an answer's "response") against a complete's body."""
    if not isinstance(resp, dict) or not isinstance(sent, dict):
        return False
    return resp.get("status") == sent.get("status") and resp.get("body") == sent.get("body")


class Checker:
    def __init__(self, meta, ops, faults, execs):
        self.meta = meta
        self.ops = ops
        self.byid = {o["id"]: o for o in ops}
        self.faults = faults
        self.execs = execs
        self.specs = meta.get("ops", {})
        self.t_start = min([o["w0"] for o in ops] or [0.0])
        self.violations = []
        self.checks = collections.Counter()
        self.token_exp = {}
        for o in ops:
            if o["f"] == "issue" and o["status"] == 201:
                b = body(o)
                self.token_exp[b.get("id")] = ts(b.get("expires_at"))
        self.frozen = collections.defaultdict(list)
        for f in faults:
            if f["kind"] == "sigstop":
                self.frozen[f["node"]].append((f["w0"], f["w1"]))

    # ------------------------------------------------------------ reporting

    def violation(self, check, key, what, ops=(), execs=()):
        self.violations.append({"check": check, "key": key, "what": what,
                                "ops": [o["id"] for o in ops], "execs": list(execs)})

    def rel(self, t):
        return "%.3f" % (t - self.t_start) if t is not None else "-"

    def describe(self, o):
        b = body(o)
        bits = ["#%d" % o["id"], o["proc"], o["f"], "node%s" % o["node"],
                "[%s, %s]" % (self.rel(o["w0"]), self.rel(o["w1"])),
                str(o["status"]) if o["status"] is not None else "no answer(%s)" % o.get("err")]
        if o.get("code"):
            bits.append(o["code"])
        if isinstance(o.get("req"), dict) and "attempt" in o["req"]:
            bits.append("sent attempt %s" % o["req"]["attempt"])
        if o.get("grant"):
            bits.append("holder of #%s" % o["grant"])
        if o.get("stale"):
            bits.append("(stale on purpose)")
        for k in ("attempt", "state"):
            if k in b:
                bits.append("%s %s" % (k, b[k]))
        if "lease_expires_at" in b:
            bits.append("lease until %s" % self.rel(ts(b["lease_expires_at"])))
        if "expires_at" in b:
            bits.append("expires %s" % self.rel(ts(b["expires_at"])))
        if isinstance(b.get("response"), dict):
            bits.append("response %s" % json.dumps(b["response"].get("body"), sort_keys=True))
        if "exec" in b:
            bits.append("exec %s" % b["exec"])
        if o["f"] == "complete" and isinstance(o.get("req"), dict):
            bits.append("sent body %s" % json.dumps(o["req"].get("body"), sort_keys=True))
        return " ".join(bits)

    def describe_exec(self, e):
        return ("upstream exec %s of key %s for submit #%s: arrived %s, answered %s"
                % (e["exec"], e["key"], e["op"], self.rel(e["a"]), self.rel(e["u"])))

    # ------------------------------------------------------------ helpers

    def spec(self, op):
        return self.specs.get(op.get("op") or "", {})

    def is_frozen(self, node, t0, t1):
        return any(a < t1 and b > t0 for a, b in self.frozen.get(node, ()))

    def life_low_completed(self, c, key, spec):
        """The earliest a life completed by C (acknowledged) can end."""
        end = c["w0"] + spec["R"] - CLOCK
        if key in self.token_exp and self.token_exp[key] is not None:
            end = min(end, self.token_exp[key] - CLOCK)
        return end

    def epochs(self, kops, spec):
        """For a caller key: {grant id: cap}, the time until which the
        grant's life certainly lasts (the life began at F, the epoch's first
        claim, and lasts token_ttl_seconds from it), for grants inside that
        first life of their epoch. An epoch starts with a claim sent after
        every life earlier ops may have begun had certainly ended."""
        T, D, R = spec["T"], spec["D"], spec["R"]
        horizon = float("-inf")
        F = None
        caps = {}
        for o in sorted(kops, key=lambda o: o["w0"]):
            f = o["f"]
            creates = f == "claim" and (o["status"] == 201 or unknown(o))
            if creates and o["w0"] > horizon:
                F = o["w0"]
            if f == "claim" and o["status"] == 201:
                L = ts(body(o).get("lease_expires_at")) or o["w1"] + D
                if F is not None and o["w1"] < F + T - CLOCK:
                    caps[o["id"]] = F + T - CLOCK
                horizon = max(horizon, L + 1.0, o["w1"] + T + 1.0)
            elif f == "claim" and unknown(o):
                horizon = max(horizon, o["w1"] + max(T, D) + 1.0)
            elif f == "complete" and effective(o):
                horizon = max(horizon, o["w1"] + max(R, T) + 1.0)
            elif f == "extend" and effective(o):
                L = ts(body(o).get("lease_expires_at")) if ok(o) else None
                horizon = max(horizon, (L or o["w1"] + D) + 1.0)
        return caps

    # ------------------------------------------------------------ checks

    def run(self):
        bykey = collections.defaultdict(list)
        for o in self.ops:
            if o.get("key") is not None:
                bykey[o["key"]].append(o)
        self.histories = len(bykey)
        # answers that break the API's contract without breaking safety:
        # reported, not counted as violations
        self.notes = collections.Counter()
        for o in self.ops:
            if o["kind"] in ("ckey", "gwhdr") and o["status"] == 410:
                self.notes["caller-key %s answered 410 %s" % (o["f"], o.get("code"))] += 1
            if o["status"] is not None and o["status"] >= 500 and o["status"] not in (502, 503,
                                                                                     504):
                self.notes["%s answered %d" % (o["f"], o["status"])] += 1
            if o["status"] == 503 and not o.get("code"):
                self.notes["%s answered 503 without a problem code" % o["f"]] += 1
        gw_execs = collections.defaultdict(list)
        for e in self.execs:
            gw_execs[e["key"]].append(e)
        for key, kops in sorted(bykey.items()):
            kind = kops[0]["kind"]
            spec = self.spec(kops[0])
            if not spec:
                continue
            if kind in ("token", "ckey"):
                self.check_direct(key, kops, spec)
            else:
                self.check_gateway(key, kops, spec, gw_execs.get(key, []))
        return self.violations

    def check_direct(self, key, kops, spec):
        grants = [o for o in kops if o["f"] == "claim" and o["status"] == 201]
        for g in grants:
            g["_L"] = ts(body(g).get("lease_expires_at"))
        if key in self.token_exp:
            caps = {g["id"]: self.token_exp[key] - CLOCK for g in grants
                    if self.token_exp[key] is not None}
        else:
            caps = self.epochs(kops, spec)
        enders = collections.defaultdict(list)   # grant id -> t0 of complete/release sent
        writes = [o for o in kops if o["f"] in WRITES]
        for w in writes:
            if w["f"] in ("complete", "release") and effective(w) and w.get("grant"):
                enders[w["grant"]].append(w["w0"])

        def live_end(g, before):
            end = min(g["_L"] if g["_L"] is not None else float("-inf"), caps[g["id"]])
            for t in enders.get(g["id"], ()):
                if t < before:
                    end = min(end, t)
            return end

        # 1b: acknowledged with a dead lease
        for g in grants:
            self.checks["1b"] += 1
            if g["_L"] is not None and g["_L"] < g["w1"] - DELIVER and \
                    not self.is_frozen(g["node"], g["w0"], g["w1"]):
                self.violation("1b", key, "claim answered 201 %.2f s after its lease had ended "
                               "(lease_expires_at %s)" % (g["w1"] - g["_L"], self.rel(g["_L"])),
                               [g])
        # 1: two live grants
        for i, g1 in enumerate(grants):
            for g2 in grants[i + 1:]:
                if g1["id"] not in caps or g2["id"] not in caps:
                    continue
                self.checks["1"] += 1
                p12 = g1["w0"] < g2["w1"]
                p21 = g2["w0"] < g1["w1"]
                live12 = g2["w1"] < live_end(g1, g2["w1"]) - CLOCK
                live21 = g1["w1"] < live_end(g2, g1["w1"]) - CLOCK
                if (not p12 or live12) and (not p21 or live21):
                    self.violation("1", key, "two live grants: each was granted while the other's "
                                   "lease was live and neither holder had released or completed",
                                   [g1, g2])
        # 2, 3, 4: acknowledged completions
        completes = [w for w in writes if w["f"] == "complete"]
        acked = [c for c in completes if c["status"] == 200 and body(c).get("state") == "completed"]
        reads = [o for o in kops if o["f"] in ("get", "record", "claim")]
        for c in acked:
            low = self.life_low_completed(c, key, spec)
            sent = c["req"]
            for g in grants:
                self.checks["2"] += 1
                if g["w0"] > c["w1"] and g["w1"] < low:
                    self.violation("2", key, "a 201 inside the life of an acknowledged "
                                   "completion (which lasts until at least %s)" % self.rel(low),
                                   [c, g])
            for r in reads:
                if not (r["w0"] > c["w1"] and r["w1"] < low) or r["status"] is None or \
                        r["status"] >= 500 or r["status"] == 201:
                    continue
                b = body(r)
                if r["f"] == "claim" and r["status"] == 200:
                    self.checks["3"] += 1
                    if b.get("state") != "completed" or not same_response(b.get("response"), sent):
                        self.violation("3", key, "a replay inside the completed life differs from "
                                       "the acknowledged completion", [c, r])
                    continue
                self.checks["4"] += 1
                if r["status"] != 200 or b.get("state") != "completed" or \
                        not same_response(b.get("response"), sent):
                    self.violation("4", key, "the acknowledged completion is not what a read "
                                   "inside its life shows", [c, r])
        # 7: a completed life is gone at its expires_at (the complete's
        # answer announced it) for every reader, swept or not
        for c in acked:
            E = ts(body(c).get("expires_at"))
            if E is None:
                continue
            for r in reads:
                if r["status"] != 200:
                    continue
                self.checks["7"] += 1
                b = body(r)
                if r["w0"] > E + EXPIRY_SLACK and b.get("state") == "completed" and \
                        same_response(b.get("response"), c["req"]):
                    self.violation("7", key, "the completed life was served %.2f s after its "
                                   "expires_at (%s)" % (r["w0"] - E, self.rel(E)), [c, r])
                    break
        # 3b: every replay carries a response some complete sent
        for r in kops:
            if r["f"] == "claim" and r["status"] == 200:
                self.checks["3"] += 1
                resp = body(r).get("response")
                if not any(c["w0"] < r["w1"] and effective(c) and same_response(resp, c["req"])
                           for c in completes):
                    self.violation("3", key, "a replay of a response no complete sent", [r])
        # 5: stale holders
        for w in writes:
            if not ok(w) or not w.get("grant") or w["grant"] not in self.byid:
                continue
            g = self.byid[w["grant"]]
            self.checks["5"] += 1
            newer = [g2 for g2 in grants if g2["id"] != g["id"] and g2["w0"] > g["w1"] and
                     g2["w1"] < w["w0"]]
            if newer:
                self.violation("5", key, "a %s from the holder of #%d accepted after a newer "
                               "grant (#%d) was acknowledged" % (w["f"], g["id"], newer[0]["id"]),
                               [g, newer[0], w])

    def check_gateway(self, key, kops, spec, execs):
        D, R = spec["D"], spec["R"]
        timeout = spec.get("timeout") or 0
        subs = [o for o in kops if o["f"] == "submit"]
        known = {e["exec"]: e for e in execs}
        first_ack = {}
        for s in subs:
            ex = body(s).get("exec")
            if ok(s) and ex:
                self.checks["3"] += 1
                if ex not in known:
                    self.violation("3", key, "an answer carries an execution the upstream never "
                                   "made", [s])
                    continue
                first_ack[ex] = min(first_ack.get(ex, float("inf")), s["w1"])
        texp = self.token_exp.get(key)

        def life_low(e):
            low = e["u"] + R - CLOCK
            return min(low, texp - CLOCK) if texp is not None else low

        for i, e1 in enumerate(execs):
            s1 = self.byid.get(int(e1["op"])) if str(e1.get("op", "")).isdigit() else None
            for e2 in execs[i + 1:]:
                self.checks["6"] += 1
                self.checks["6r"] += 1
                if e2["a"] < e1["u"] - CLOCK / 2 and (e1["u"] - e1["a"]) < timeout - GW_MARGIN:
                    self.violation("6r", key, "a second execution while the first was still "
                                   "running upstream, although the first ran %.2f s and the "
                                   "route's timeout is %.2f s: the first forward was cut short "
                                   "(its submit: %s)" % (e1["u"] - e1["a"], timeout,
                                                         s1["status"] if s1 else "?"),
                                   [x for x in (s1, self.byid.get(int(e2["op"])))
                                    if x is not None], [e1, e2])
                    continue
                if e1["exec"] in first_ack and first_ack[e1["exec"]] < e2["a"] < life_low(e1):
                    self.violation("6", key, "executed again after an execution's answer was "
                                   "acknowledged, inside that life (until at least %s)"
                                   % self.rel(life_low(e1)),
                                   [x for x in (s1, self.byid.get(int(e2["op"])))
                                    if x is not None], [e1, e2])
                    continue
                if s1 is not None and s1["status"] is not None and \
                        s1["status"] not in (502, 504) and not (500 <= s1["status"] < 600 and
                                                                 s1["status"] != 503) and \
                        e2["a"] < s1["w0"] + D - CLOCK:
                    self.violation("6", key, "executed again before the first execution's claim "
                                   "could have ended (its submit was answered %d, not released)"
                                   % s1["status"], [s1], [e1, e2])
        # 6u: idemd received an upstream 2xx it could not store (502
        # upstream_invalid or upstream_answer_unstorable to the submit that
        # forwarded it): that key is executed, never forwarded again in
        # the life such an answer would have had
        for e1 in execs:
            s1 = self.byid.get(int(e1["op"])) if str(e1.get("op", "")).isdigit() else None
            if s1 is None or s1["status"] != 502 or s1.get("code") not in (
                    "upstream_invalid", "upstream_answer_unstorable"):
                continue
            for e2 in execs:
                if e2["a"] <= e1["a"]:
                    continue
                self.checks["6u"] += 1
                if e2["a"] < life_low(e1):
                    self.violation("6u", key, "executed again after idemd got the upstream's 2xx "
                                   "and answered %d %s" % (s1["status"], s1.get("code")),
                                   [x for x in (s1, self.byid.get(int(e2["op"])))
                                    if x is not None], [e1, e2])
                    break
        # 3, 4: inside a stored execution's life, every submit gets it
        for ex, k in first_ack.items():
            e = known[ex]
            low = life_low(e)
            for s in subs:
                if not (s["w0"] > k and s["w1"] < low) or unknown(s):
                    continue
                self.checks["4"] += 1
                if not ok(s) or body(s).get("exec") != ex:
                    self.violation("4" if not ok(s) else "3", key,
                                   "a submit inside the life of an acknowledged answer (exec %s, "
                                   "until at least %s) did not get it" % (ex, self.rel(low)),
                                   [s], [e])

    # ------------------------------------------------------------ output

    def report(self, out=sys.stdout, limit=20):
        for i, v in enumerate(self.violations[:limit]):
            print("VIOLATION %d [check %s: %s] key %s: %s"
                  % (i + 1, v["check"], CHECKS[v["check"]], v["key"], v["what"]), file=out)
            for oid in v["ops"]:
                print("    " + self.describe(self.byid[oid]), file=out)
            for e in v["execs"]:
                print("    " + self.describe_exec(e), file=out)
            # the key's other ops around it, for context
            if v["ops"]:
                lo = min(self.byid[i]["w0"] for i in v["ops"]) - 1.0
                hi = max(self.byid[i]["w1"] for i in v["ops"]) + 0.5
                around = [o for o in self.ops if o.get("key") == v["key"] and
                          o["id"] not in v["ops"] and lo <= o["w0"] <= hi and
                          o["f"] != "issue"][:12]
                if around:
                    print("    around it:", file=out)
                    for o in around:
                        print("      " + self.describe(o), file=out)
        if len(self.violations) > limit:
            print("... and %d more violations" % (len(self.violations) - limit), file=out)


def summary(ch):
    by = collections.Counter(v["check"] for v in ch.violations)
    faults = collections.Counter(f["kind"] for f in ch.faults)
    fs = collections.Counter(o["f"] for o in ch.ops)
    lines = ["history: %d keys, %d operations (%s), %d upstream executions"
             % (ch.histories, len(ch.ops), ", ".join("%s %d" % kv for kv in sorted(fs.items())),
                len(ch.execs)),
             "faults: %d (%s)" % (len(ch.faults), ", ".join("%s %d" % kv
                                                            for kv in sorted(faults.items()))
                                  or "none"),
             "checks run: %d (%s)" % (sum(ch.checks.values()), ", ".join(
                 "%s %d" % kv for kv in sorted(ch.checks.items()))),
             "notes (not violations): %s" % (", ".join(
                 "%s: %d" % kv for kv in sorted(ch.notes.items())) or "none"),
             "violations: %d%s" % (len(ch.violations), (" (%s)" % ", ".join(
                 "check %s: %d" % kv for kv in sorted(by.items()))) if by else "")]
    return lines


def check_files(history_path, upstream_log=None, out=sys.stdout, limit=20):
    meta, ops, faults = hist.load(history_path)
    execs = ups.load(upstream_log) if upstream_log else []
    ch = Checker(meta, ops, faults, execs)
    ch.run()
    ch.report(out, limit)
    for line in summary(ch):
        print(line, file=out)
    return ch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("history")
    ap.add_argument("--upstream")
    ap.add_argument("--limit", type=int, default=20)
    a = ap.parse_args()
    ch = check_files(a.history, a.upstream, limit=a.limit)
    print("checker: 1 run, %d histories, %d operations, %d faults, %d violations"
          % (ch.histories, len(ch.ops), len(ch.faults), len(ch.violations)))
    return 1 if ch.violations else 0


if __name__ == "__main__":
    sys.exit(main())
