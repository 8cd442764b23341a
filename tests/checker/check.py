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
  6r gateway, no forward on a dying lease (docs/gateway.md: a forward
     starts only while the lease covers the route's timeout plus a margin):
     no second execution while the first was still running upstream
     although the first ran shorter than the route's timeout (so its
     forward was cut short of that timeout, or outlived its lease).

  6f gateway, a final status line is final (docs/reliability.md): once the
     upstream sent a final status line (2xx-4xx) and idemd answered the
     submit that forwarded it (not 503) at least FINAL_READ seconds later,
     no execution of the key after it inside the life that answer would
     have had, whatever came after the status line (a cut body, chunked
     without its last chunk, a stall past the timeout, an answer too large).
     idemd reads an answer only until the forward's deadline (the
     Idempotency-Timeout-Ms it sent): a status line sent after it, or one
     that reached an instance stopped (SIGSTOP) before the deadline passed,
     may never have been read, and is not counted.
  6o gateway, two forwards of one key never overlap: no execution begins
     while an earlier one of the key that honoured its deadline
     (Idempotency-Timeout-Ms) still worked (until its status line, or its
     stop at the deadline). Overlaps with an upstream that ignored the
     deadline are outside the promise: counted, not flagged.
  6h gateway, an unknown outcome holds the key: when the upstream got the
     request and its submit was answered 504 upstream_timeout or 502
     upstream_unavailable/upstream_invalid (no final status line read), no
     execution of the key before that submit was sent + lease_seconds.
  3w a waiter (Prefer: wait, answered with Preference-Applied) answered 200
     carries the response of a completion made while it waited (sent
     before its answer, answered after it was sent). A waiter answered 201
     is a grant like any other (checks 1, 1b, 2).
  8  audit trail (GET /v1/records/{id}/events): every acknowledged
     transition of the record (a grant answered 201: claimed or taken_over;
     a complete, a release answered 200; extends and checkpoints answered
     200) appears in a trail read after it was acknowledged, while its
     audit retention runs (the retention in force when it happened: the
     lowest the operation could have had then), exactly once (claimed/
     taken_over, completed and released once per attempt; extends and
     checkpoints at least as many as acknowledged, at most as many as
     sent), in the order they were acknowledged; no event of a write that
     was never sent; no event shown AUDIT_LATE seconds past the end of the
     highest retention it could have been given (dropped, hidden or revived
     events when an operation's audit_retention_seconds changes).

Batch claims and completions are checked item by item: each item is an op
of its key with the batch's times (an unanswered batch leaves each item's
outcome unknown).

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
FINAL_READ = 0.3  # a status line sent this long before idemd answered was read by it
DEADLINE_SLACK = 0.05  # a forward's deadline counts from its send, a moment before arrival
# an instance may use an operation's old policy this long after a change:
# its policy cache keeps an entry up to OPCACHE_TTL_SECONDS (5, src/store/
# opcache.h, docs/design.md), and the reload itself takes a moment
POLICY_CACHE = 6.0
AUDIT_LATE = 6.0  # events past their retention may be shown until the sweep removes them
BREAK_MODES = ("cl_short", "chunk_cut", "stall_past")
EVENT_OF = {"claim": ("claimed", "taken_over"), "complete": ("completed",),
            "release": ("released",), "extend": ("extended",), "checkpoint": ("checkpoint",)}
UNIQUE = ("claim", "complete", "release")
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
    "6f": "gateway: a final status line is final (no execution after an upstream's final "
          "status line idemd read)",
    "6o": "gateway: two forwards of one key never overlap (cooperating upstream)",
    "6h": "gateway: after a forward whose outcome is unknown the key stays held until its "
          "lease ends",
    "3w": "a waiter's replay carries a completion made while it waited",
    "8": "audit trail: every acknowledged transition exactly once, in order, while its "
         "retention runs",
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
        # audit retention changes per operation: [(w0, w1, value)] in order
        self.policy = collections.defaultdict(list)
        for o in ops:
            if o["f"] == "policy" and isinstance(o.get("req"), dict) and \
                    "audit_retention_seconds" in o["req"] and (ok(o) or unknown(o)):
                self.policy[o["op"]].append((o["w0"], o["w1"] if ok(o) else float("inf"),
                                             o["req"]["audit_retention_seconds"]))
        self.overlaps_outside = 0
        self.trail_events = 0
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

    def retentions(self, opname, t0, t1):
        """The audit retentions operation OPNAME may have had in force for
        a change made in [T0, T1] (an instance's policy cache lags)."""
        spec = self.specs.get(opname, {})
        first = spec.get("audit", spec.get("R"))
        vals = set()
        changes = self.policy.get(opname, [])
        # the initial value until the first change was certainly everywhere
        if not changes or t0 < changes[0][1] + POLICY_CACHE:
            vals.add(first)
        for i, (w0, w1, v) in enumerate(changes):
            nxt = changes[i + 1][1] + POLICY_CACHE if i + 1 < len(changes) else float("inf")
            if t1 > w0 and t0 < nxt:
                vals.add(v)
        return vals or {first}

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
            if kind in ("token", "ckey", "batch"):
                self.check_direct(key, kops, spec)
                self.check_trail(key, kops, spec)
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
        # 3w: a waiter's replay carries a completion made while it waited
        for r in kops:
            if r["f"] == "claim" and r["status"] == 200 and r.get("waited"):
                self.checks["3w"] += 1
                resp = body(r).get("response")
                if not any(c["w0"] < r["w1"] and c["w1"] > r["w0"] - CLOCK and effective(c) and
                           same_response(resp, c["req"]) for c in completes):
                    self.violation("3w", key, "a waiter answered 200 (%s) with a response no "
                                   "complete made while it waited sent" % r["waited"],
                                   [r] + [c for c in completes if effective(c) and
                                          same_response(resp, c["req"])][:1])
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

        def work_end(e):
            # the work is done when the final status line is sent, or when
            # the upstream stopped
            return e["sl"] if e.get("sl") is not None else e["u"]

        for i, e1 in enumerate(execs):
            s1 = self.byid.get(int(e1["op"])) if str(e1.get("op", "")).isdigit() else None
            for e2 in execs[i + 1:]:
                self.checks["6"] += 1
                self.checks["6r"] += 1
                if "coop" in e1:
                    self.checks["6o"] += 1
                    if e2["a"] < work_end(e1) - CLOCK / 2:
                        if not e1["coop"]:
                            self.overlaps_outside += 1
                        else:
                            self.violation("6o", key, "a second forward began while the first "
                                           "still worked (%s mode, deadline %s ms, it worked "
                                           "%.2f s; its submit: %s %s)"
                                           % (e1.get("mode"), e1.get("deadline_ms"),
                                              work_end(e1) - e1["a"],
                                              s1["status"] if s1 else "?",
                                              (s1 or {}).get("code") or ""),
                                           [x for x in (s1, self.byid.get(int(e2["op"])))
                                            if x is not None], [e1, e2])
                            continue
                if e2["a"] < work_end(e1) - CLOCK / 2 and \
                        (work_end(e1) - e1["a"]) < timeout - GW_MARGIN:
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
                if s1 is not None and (s1["status"] == 504 or (
                        s1["status"] == 502 and s1.get("code") in ("upstream_unavailable",
                                                                   "upstream_invalid"))) and \
                        e2["a"] < s1["w0"] + D - CLOCK:
                    self.checks["6h"] += 1
                    self.violation("6h", key, "executed again before the lease of a forward whose "
                                   "outcome was unknown could have ended (its submit was "
                                   "answered %d %s after the upstream got the request)"
                                   % (s1["status"], s1.get("code") or ""), [s1], [e1, e2])
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
            # the answer was stored once idemd had read the status line, not
            # necessarily after the upstream ended (a stall past the timeout
            # ends after idemd gave up on it)
            low = (e1["sl"] if e1.get("sl") is not None else e1["a"]) + R - CLOCK
            if texp is not None:
                low = min(low, texp - CLOCK)
            for e2 in execs:
                if e2["a"] <= e1["a"]:
                    continue
                self.checks["6u"] += 1
                if e2["a"] < low:
                    self.violation("6u", key, "executed again after idemd got the upstream's 2xx "
                                   "and answered %d %s" % (s1["status"], s1.get("code")),
                                   [x for x in (s1, self.byid.get(int(e2["op"])))
                                    if x is not None], [e1, e2])
                    break
        # 6f: a final status line idemd read is final
        for e1 in execs:
            s1 = self.byid.get(int(e1["op"])) if str(e1.get("op", "")).isdigit() else None
            if e1.get("sl") is None or s1 is None or s1["status"] is None or \
                    s1["status"] == 503 or e1["sl"] > s1["w1"] - FINAL_READ:
                continue
            if e1.get("deadline_ms"):
                dl = e1["a"] + e1["deadline_ms"] / 1000.0
                if e1["sl"] >= dl - DEADLINE_SLACK or \
                        self.is_frozen(s1["node"], e1["sl"] - DEADLINE_SLACK, dl):
                    continue  # idemd stopped reading, or was stopped, by its deadline
            low = e1["sl"] + R - CLOCK
            if texp is not None:
                low = min(low, texp - CLOCK)
            for e2 in execs:
                if e2["a"] <= e1["a"]:
                    continue
                self.checks["6f"] += 1
                if e2["a"] < low:
                    self.violation("6f", key, "executed again after the upstream's final status "
                                   "line (%s mode, sent %.2f s before idemd answered %d %s)"
                                   % (e1.get("mode"), s1["w1"] - e1["sl"], s1["status"],
                                      s1.get("code") or ""),
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

    def check_trail(self, key, kops, spec):
        """8: the audit trail of each of the key's records."""
        opname = kops[0].get("op")
        grants = {o["id"]: o for o in kops if o["f"] == "claim" and o["status"] == 201}

        def rid_of(o):
            g = o if o["f"] == "claim" else grants.get(o.get("grant"))
            if g is None:
                return None
            return body(g).get("id") or (key if g["kind"] == "token" else None)

        def attempt_of(o):
            g = o if o["f"] == "claim" else grants.get(o.get("grant"))
            return body(g).get("attempt") if g is not None else None

        trans = collections.defaultdict(list)     # rid -> transitions (acked or not)
        for o in kops:
            if o["f"] not in EVENT_OF or (o["f"] == "claim" and o["status"] != 201):
                continue
            if not effective(o):
                continue
            rid = rid_of(o)
            if rid is None:
                continue
            trans[rid].append(o)
        reads = [o for o in kops if o["f"] == "events" and o["status"] in (200, 404)]
        for t in reads:
            rid = t["path"].rsplit("/", 2)[-2]
            events = body(t).get("events") if t["status"] == 200 else []
            if not isinstance(events, list):
                continue
            self.trail_events += len(events)
            tr = trans.get(rid, [])
            pos = {}
            for f, names in EVENT_OF.items():
                for a in {attempt_of(o) for o in tr if o["f"] == f}:
                    idx = [i for i, e in enumerate(events)
                           if e.get("event") in names and e.get("attempt") == a]
                    acked = [o for o in tr if o["f"] == f and attempt_of(o) == a and ok(o) and
                             o["w1"] < t["w0"] and t["w1"] < o["w0"] + min(self.retentions(
                                 opname, o["w0"], o["w1"])) - 0.5]
                    sent = [o for o in tr if o["f"] == f and attempt_of(o) == a and
                            o["w0"] < t["w1"]]
                    self.checks["8"] += 1
                    if f in UNIQUE:
                        if len(idx) > 1 or (acked and not idx):
                            self.violation("8", key, "record %s: %s of attempt %s acknowledged, "
                                           "its trail shows it %d times"
                                           % (rid, names[0], a, len(idx)),
                                           (acked or sent)[:1] + [t])
                        elif idx and acked:
                            pos[acked[0]["id"]] = idx[0]
                    elif len(idx) < len(acked) or len(idx) > len(sent):
                        self.violation("8", key, "record %s: %d %s events of attempt %s in the "
                                       "trail, %d acknowledged before it, %d sent"
                                       % (rid, len(idx), names[0], a, len(acked), len(sent)),
                                       (acked or sent)[:1] + [t])
            # writes the trail shows that no request sent
            for e in events:
                f = {n: k for k, ns in EVENT_OF.items() for n in ns}.get(e.get("event"))
                if f is None:
                    continue
                if f != "claim" and not any(o["f"] == f and attempt_of(o) == e.get("attempt") and
                                            o["w0"] < t["w1"] for o in tr):
                    self.checks["8"] += 1
                    self.violation("8", key, "record %s: the trail shows %s of attempt %s that "
                                   "no effective request sent" % (rid, e.get("event"),
                                                                  e.get("attempt")), [t])
                at = ts(e.get("at"))
                if at is not None:
                    self.checks["8"] += 1
                    hi = max(self.retentions(opname, at - 0.5, at + 0.5))
                    if t["w0"] > at + hi + AUDIT_LATE:
                        self.violation("8", key, "record %s: %s of attempt %s (at %s) shown %.1f "
                                       "s after its retention (%s s at most) ended"
                                       % (rid, e.get("event"), e.get("attempt"), self.rel(at),
                                          t["w0"] - at - hi, hi), [t])
            # in the order they were acknowledged
            placed = sorted(pos.items(), key=lambda kv: self.byid[kv[0]]["w1"])
            for i, (a_id, ia) in enumerate(placed):
                for b_id, ib in placed[i + 1:]:
                    if self.byid[a_id]["w1"] < self.byid[b_id]["w0"] and ia > ib:
                        self.violation("8", key, "record %s: the trail shows %s after %s, "
                                       "acknowledged the other way round"
                                       % (rid, events[ia].get("event"), events[ib].get("event")),
                                       [self.byid[a_id], self.byid[b_id], t])

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


def counts(ch):
    """The run's figures: operations by kind (batch items apart), batches
    and how many were cut, waits, trail reads, upstream modes, faults."""
    c = {}
    items = [o for o in ch.ops if o.get("batch")]
    c["ops"] = collections.Counter(o["f"] for o in ch.ops if not o.get("batch"))
    c["items"] = collections.Counter(o["f"] for o in items)
    batches = [o for o in ch.ops if o["f"] in ("claims", "completions")]
    c["batches"] = collections.Counter(o["f"] for o in batches)
    cut = [o for o in batches if o["status"] is None or o["status"] >= 500]
    c["cut"] = len(cut)
    c["cut_reset"] = sum(1 for o in cut if o["status"] is None)
    c["cut_503"] = sum(1 for o in cut if o["status"] == 503)
    c["cut_in_fault"] = sum(1 for o in cut if any(f["w0"] < o["w1"] and f["w1"] > o["w0"]
                                                  for f in ch.faults))
    waits = [o for o in ch.ops if o.get("wait")]
    c["waits"] = len(waits)
    c["waits_applied"] = collections.Counter(str(o["status"]) for o in waits if o.get("waited"))
    c["trail_reads"] = sum(1 for o in ch.ops if o["f"] == "events")
    c["trail_events"] = ch.trail_events
    c["modes"] = collections.Counter(e.get("mode", "ok") for e in ch.execs)
    c["stopped"] = sum(1 for e in ch.execs if e.get("stopped"))
    c["overlaps_outside"] = ch.overlaps_outside
    c["faults"] = collections.Counter(f["kind"] for f in ch.faults)
    c["policy"] = sum(1 for o in ch.ops if o["f"] == "policy")
    return c


def _kv(counter):
    return ", ".join("%s %d" % kv for kv in sorted(counter.items())) or "none"


def summary(ch):
    by = collections.Counter(v["check"] for v in ch.violations)
    c = counts(ch)
    lines = ["history: %d keys, %d operations (%s), %d upstream executions"
             % (ch.histories, len(ch.ops), _kv(c["ops"]), len(ch.execs)),
             "batches: %s; items %s; cut %d (reset %d, 503 %d; %d while a fault ran)"
             % (_kv(c["batches"]), _kv(c["items"]), c["cut"], c["cut_reset"], c["cut_503"],
                c["cut_in_fault"]),
             "waits (Prefer: wait): %d sent; answered after waiting (Preference-Applied): %s"
             % (c["waits"], _kv(c["waits_applied"])),
             "audit trails: %d reads, %d events seen; %d audit retention changes"
             % (c["trail_reads"], c["trail_events"], c["policy"]),
             "upstream: %s; %d stopped at their deadline; %d overlaps with an upstream that "
             "ignored its deadline (outside the promise)"
             % (_kv(c["modes"]), c["stopped"], c["overlaps_outside"]),
             "faults: %d (%s)" % (len(ch.faults), _kv(c["faults"])),
             "checks run: %d (%s)" % (sum(ch.checks.values()), _kv(ch.checks)),
             "notes (not violations): %s" % (", ".join(
                 "%s: %d" % kv for kv in sorted(ch.notes.items())) or "none"),
             "violations: %d%s" % (len(ch.violations), (" (%s)" % ", ".join(
                 "check %s: %d" % kv for kv in sorted(by.items()))) if by else "")]
    return lines


def last_line(ch):
    c = counts(ch)
    return ("checker: %d histories, %d operations, %d batch items, %d cut batches, %d waits, "
            "%d trail reads, %d upstream executions (%d broken after the status line), "
            "%d faults, %d violations"
            % (ch.histories, len(ch.ops), sum(c["items"].values()), c["cut"], c["waits"],
               c["trail_reads"], len(ch.execs), sum(c["modes"][m] for m in BREAK_MODES),
               len(ch.faults), len(ch.violations)))


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
    print(last_line(ch))
    return 1 if ch.violations else 0


if __name__ == "__main__":
    sys.exit(main())
