"""Model-based property test of the record state machine (Hypothesis
stateful testing): random sequences of issue, claim (token and caller key),
complete, release, revoke, extend, checkpoint, wait (Prefer: wait), expire
(short TTLs and leases running out), sweep and version bumps, sent to two
idemd processes on one database, each answer checked against a reference
model of PRODUCT.md's state machine written here in Python.

Checked on every step: at most one execution (one 201 per attempt of a
record, never a 201 after a completion), replays identical to the stored
response, fencing (a stale attempt's complete, release, extend and
checkpoint get 409 lease_lost and write nothing), version counters equal to
the acknowledged bumps, and after each sweep exactly the records whose
expiry has passed are gone.

Time is real: the model keeps every deadline (token expiry, lease end,
record expiry) as the interval the server may have set it in, and accepts
either outcome only when a request's own interval overlaps that deadline;
the answer then tells which side it fell on. The janitor is kept idle
(sweep_interval_seconds at its maximum) and the sweep rule runs its
statement, idemd_sweep_after, itself, so that sweeps happen where the
sequence puts them.

Bounded by IDEMD_MODEL_EXAMPLES (default 30) examples of up to
IDEMD_MODEL_STEPS (default 35) steps; IDEMD_MODEL_SEED fixes the seed
(printed on every run). A failure prints the seed, the failing sequence of
rules (Hypothesis) and the HTTP exchanges of the failing example. Set
IDEMD_MODEL_SHRINK=1 to let Hypothesis shrink a failure (slow: every step is
a real request)."""

import json
import math
import os
import sys
import threading
import time
import unittest

try:
    import hypothesis  # noqa: F401  (only whether it imports)
except ImportError:
    # ctest runs this with the interpreter CMake found, which may not see
    # Debian's python3-hypothesis: run again under the system interpreter.
    if os.path.exists("/usr/bin/python3") and os.path.realpath(sys.executable) != \
            os.path.realpath("/usr/bin/python3") and not os.environ.get("IDEMD_MODEL_REEXEC"):
        os.environ["IDEMD_MODEL_REEXEC"] = "1"
        os.execv("/usr/bin/python3", ["/usr/bin/python3"] + sys.argv)
    print("FAIL: the hypothesis module is missing (Debian package python3-hypothesis)",
          file=sys.stderr)
    sys.exit(1)

from hypothesis import HealthCheck, Phase, seed, settings, strategies as st  # noqa: E402
from hypothesis.stateful import (RuleBasedStateMachine, precondition, rule,  # noqa: E402
                                 run_state_machine_as_test)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Idemd, parse_time, psql, uniq  # noqa: E402

EXAMPLES = int(os.environ.get("IDEMD_MODEL_EXAMPLES", "30"))
STEPS = int(os.environ.get("IDEMD_MODEL_STEPS", "35"))
SEED = int(os.environ.get("IDEMD_MODEL_SEED") or int.from_bytes(os.urandom(4), "little"))
SHRINK = os.environ.get("IDEMD_MODEL_SHRINK", "") not in ("", "0")

MAX_RECORDS = 4    # few records per example, so that steps meet on the same ones
EPS = 0.08          # seconds: clock reading noise around a deadline
SHORT = {"token_ttl_seconds": 3, "retention_seconds": 1, "lease_seconds": 1}
LONG = {"token_ttl_seconds": 3600, "retention_seconds": 3600, "lease_seconds": 30}


def passed(deadline, s, r):
    """Had DEADLINE (lo, hi) passed when the server read its clock, some
    time within [S, R]? True, False, or None when it cannot be told."""
    lo, hi = deadline
    if s > hi + EPS:
        return True
    if r < lo - EPS:
        return False
    return None


def latest(a, b):
    return (max(a[0], b[0]), max(a[1], b[1]))


class Rec:
    """The model of one record: a token, or a caller key under an operation."""

    def __init__(self, kind, op, policy, ident, label):
        self.kind, self.op, self.policy, self.ident, self.label = kind, op, policy, ident, label
        self.id = None
        self.has_record = False      # a row exists in `records`
        self.state = "issued"        # issued | in_progress | completed | revoked
        self.attempt = 0
        self.fp = None               # the fingerprint value of the record
        self.lease = None            # (lo, hi)
        self.tok_exp = None          # (lo, hi); keys: from the last claim
        self.exp = None              # the record's expires_at (lo, hi)
        self.response = None
        self.checkpoint = None
        self.version = None          # the version the token carries
        self.version_claimed = None
        self.subject = None
        self.life = 0                # a caller key starts a new life once swept
        self.granted = set()         # (life, attempt) of every 201
        self.completed_life = None   # life in which it completed

    def base(self):
        if self.kind == "token":
            return "/v1/tokens/%s" % self.ident
        return "/v1/operations/%s/keys/%s" % (self.op, self.ident)

    def __repr__(self):
        return "%s %s" % (self.kind, self.label)


class Item:
    """One item of a batch answer, seen as the answer of a single request:
    what check_claim and check_complete read (status, json, headers)."""

    def __init__(self, item, whole):
        self.status = item.get("status")
        self.whole = whole
        j = dict(item)
        if self.status == 201:
            j.setdefault("state", "in_progress")
        elif self.status == 200 and "response" in item:
            j.setdefault("state", "completed")
        self.json = j

    def header(self, name, default=None):
        name = name.lower()
        if name == "content-type":
            return "application/problem+json" if self.status >= 400 else "application/json"
        if name == "idempotent-replayed" and self.status == 200:
            return "true"
        return default

    def describe(self):
        return "\n--- batch item: %s%s" % (json.dumps(self.json), self.whole.describe())


class World:
    """The servers and operations shared by every example."""
    idemd = None
    servers = ()
    clients = ()
    ops = {}
    counters = {"examples": 0, "ran": 0, "steps": 0}
    rule_counts = {}
    log = []


class RecordMachine(RuleBasedStateMachine):

    def __init__(self):
        super().__init__()
        World.counters["examples"] += 1
        self.ex = World.counters["examples"]
        self.recs = []
        self.vcount = {}                  # version key -> acknowledged value
        self.subjects = ["s%d-%s-%d" % (self.ex, uniq("m").split(".")[1], i) for i in range(2)]
        World.log = []
        self.nkeys = 0

    # ---- plumbing

    def note(self, what, resp=None):
        World.counters["steps"] += 1
        if not World.log:
            World.counters["ran"] += 1
        name = what.split()[0].rstrip(":")
        name = {"let": "expire", "new": "new_key", "waiting": "wait"}.get(name, name)
        if name == "batch":
            name += "_" + what.split()[1].rstrip(":")
        World.rule_counts[name] = World.rule_counts.get(name, 0) + 1
        line = "  step %d: %s" % (len(World.log) + 1, what)
        if resp is not None:
            j = resp.json
            line += " -> %d %s" % (resp.status, resp.body[:160].decode("utf-8", "replace").strip()
                                   if j is not None else "")
        World.log.append(line)

    def send(self, inst, method, path, body=None, headers=None):
        s = time.time()
        r = World.clients[inst].request(method, path, body, headers=headers)
        return s, time.time(), r

    def fail(self, msg, resp=None):
        raise AssertionError(msg + (resp.describe() if resp is not None else ""))

    def expect(self, cond, msg, resp=None):
        if not cond:
            self.fail(msg, resp)

    def code(self, resp):
        j = resp.json
        return j.get("code") if isinstance(j, dict) else None

    def expect_problem(self, resp, status, code, what):
        self.expect(resp.status == status and self.code(resp) == code and
                    (resp.header("content-type") or "").startswith("application/problem+json"),
                    "%s: expected %d %s" % (what, status, code), resp)

    def pick(self, n, pred=None):
        cands = [x for x in self.recs if pred is None or pred(x)]
        return cands[n % len(cands)] if cands else None

    def vkey(self, rec):
        return "mv:" + rec.subject

    # ---- the claim table (PRODUCT.md "Claim outcomes"), as a check

    def check_claim(self, rec, fp, s, r, resp, what):
        """Checks a claim's answer against the model at [S, R] and applies it."""
        st_ = resp.status
        j = resp.json if isinstance(resp.json, dict) else {}
        # an existing record decides first
        if rec.has_record:
            if rec.state == "revoked":
                return self.expect_problem(resp, 410, "token_revoked", what)
            if fp != rec.fp:
                return self.expect_problem(resp, 422, "fingerprint_mismatch", what)
            if rec.state == "completed":
                self.expect(st_ == 200 and j.get("state") == "completed" and
                            resp.header("idempotent-replayed") == "true",
                            "%s: a duplicate of a completed record must replay" % what, resp)
                self.expect(j.get("response") == rec.response,
                            "%s: replay differs from the stored response %r"
                            % (what, rec.response), resp)
                return
            if rec.state == "in_progress":
                p = passed(rec.lease, s, r)
                if p is False or (p is None and st_ == 409):
                    return self.expect_problem(resp, 409, "request_in_progress", what)
        # a new claim or a takeover
        if rec.kind == "token":
            exp = passed(rec.tok_exp, s, r)
            if exp is True or (exp is None and st_ == 410):
                return self.expect_problem(resp, 410, "token_expired", what)
        bump = False
        if rec.version is not None:
            c = self.vcount.get(self.vkey(rec), 0)
            takeover_no_bump = (rec.has_record and rec.version_claimed is not None and
                                c == rec.version_claimed + 1)
            if not takeover_no_bump:
                if c != rec.version:
                    self.expect_problem(resp, 412, "version_mismatch", what)
                    self.expect(resp.header("etag") == '"%d"' % c,
                                "%s: 412 must carry the current ETag %d" % (what, c), resp)
                    return
                bump = True
        want = rec.attempt + 1 if rec.has_record else 1
        self.expect(st_ == 201 and j.get("state") == "in_progress",
                    "%s: expected 201 (attempt %d)" % (what, want), resp)
        self.expect(j.get("attempt") == want,
                    "%s: expected attempt %d" % (what, want), resp)
        # at most one execution: one 201 per attempt, none after a completion
        self.expect((rec.life, want) not in rec.granted,
                    "%s: attempt %d granted twice" % (what, want), resp)
        self.expect(rec.completed_life != rec.life,
                    "%s: a 201 after the record completed (a second execution)" % what, resp)
        rec.granted.add((rec.life, want))
        if rec.has_record and rec.checkpoint is not None:
            self.expect(j.get("checkpoint") == rec.checkpoint,
                        "%s: a takeover must hand over the last checkpoint %r"
                        % (what, rec.checkpoint), resp)
        elif not rec.has_record:
            self.expect("checkpoint" not in j, "%s: a new record has no checkpoint" % what,
                        resp)
            rec.checkpoint = None
        if rec.kind == "key":
            self.expect(isinstance(j.get("id"), str) and len(j["id"]) == 32,
                        "%s: a key's claim carries its id" % what, resp)
            if rec.id is not None:
                self.expect(j["id"] == rec.id, "%s: the record id changed" % what, resp)
            rec.id = j["id"]
            ttl = rec.policy["token_ttl_seconds"]
            # the claim time rounded up to a whole second, plus the TTL
            rec.tok_exp = (math.ceil(s) + ttl, math.ceil(r) + ttl)
        if bump:
            self.vcount[self.vkey(rec)] = self.vcount.get(self.vkey(rec), 0) + 1
            rec.version_claimed = rec.version
            self.expect(j.get("version") in (None, self.vcount[self.vkey(rec)]),
                        "%s: the claim's counter value" % what, resp)
        le = parse_time(j["lease_expires_at"])
        rec.has_record, rec.state, rec.attempt, rec.fp = True, "in_progress", want, fp
        rec.lease = (le, le)
        rec.exp = latest(rec.tok_exp, rec.lease)
        rec.response = None

    def claim_body(self, rec, other):
        fp = (rec.fp or 1) + (1 if other else 0)
        body = {"request": {"n": fp}}
        if rec.kind == "key" and rec.version is not None:
            body["subject"] = rec.subject
        return fp, body

    # ---- rules

    @precondition(lambda self: len(self.recs) < MAX_RECORDS)
    @rule(kind=st.sampled_from(["long", "short", "ver"]), ttl=st.sampled_from([1, 3]),
          inst=st.integers(0, 1), subj=st.integers(0, 1))
    def issue(self, kind, ttl, inst, subj):
        op = World.ops[kind]
        body = {"operation": op, "subject": self.subjects[subj]}
        if kind == "short":
            body["ttl_seconds"] = ttl
        s, r, resp = self.send(inst, "POST", "/v1/tokens", body)
        self.note("issue %s token (subject %d) on %s" % (kind, subj, "AB"[inst]), resp)
        self.expect(resp.status == 201, "issue", resp)
        j = resp.json
        rec = Rec("token", op, SHORT if kind == "short" else LONG, j["token"],
                  "t%d" % (len(self.recs) + 1))
        rec.id, rec.subject = j["id"], self.subjects[subj]
        e = parse_time(j["expires_at"])
        rec.tok_exp = (e, e)
        if kind == "ver":
            c = self.vcount.get(self.vkey(rec), 0)
            self.expect(j.get("version") == c, "issue: the token carries the counter %d" % c,
                        resp)
            rec.version = c
        self.recs.append(rec)

    @precondition(lambda self: len(self.recs) < MAX_RECORDS)
    @rule(kind=st.sampled_from(["long", "short"]))
    def new_key(self, kind):
        self.nkeys += 1
        key = "order:ex%d:k%d" % (self.ex, self.nkeys)
        rec = Rec("key", World.ops[kind], SHORT if kind == "short" else LONG, key,
                  "k%d(%s)" % (self.nkeys, kind))
        self.recs.append(rec)
        self.note("new caller key %s" % rec.label)

    @precondition(lambda self: self.recs)
    @rule(n=st.integers(0, 999), inst=st.integers(0, 1),
          other=st.sampled_from([False, False, False, True]))
    def claim(self, n, inst, other):
        rec = self.pick(n)
        fp, body = self.claim_body(rec, other)
        s, r, resp = self.send(inst, "POST", rec.base() + "/claim", body)
        what = "claim %r fp=%d on %s" % (rec, fp, "AB"[inst])
        self.note(what, resp)
        self.check_claim(rec, fp, s, r, resp, what)
        if rec.version is not None:
            self.check_counter(self.vkey(rec), 1 - inst)

    def attempt_for(self, rec, which):
        if which == "current":
            return max(rec.attempt, 1)
        if which == "stale":
            return max(rec.attempt - 1, 1)
        return rec.attempt + 1

    def fenced(self, rec, a, resp, what, batch=False):
        """The common fencing of complete, release, extend, checkpoint: True
        when the answer was a refusal the model expects (and checked). A
        batch item names a key never claimed not_in_progress, not 404."""
        if not rec.has_record:
            if rec.kind == "key" and not batch:
                self.expect_problem(resp, 404, "record_not_found", what)
            else:
                self.expect_problem(resp, 409, "not_in_progress", what)
            return True
        if rec.attempt != a:
            # revoked before any claim included: no attempt ever held it,
            # so every attempt is stale
            self.expect_problem(resp, 409, "lease_lost", what)
            return True
        return False

    @precondition(lambda self: self.recs)
    @rule(n=st.integers(0, 999), inst=st.integers(0, 1),
          which=st.sampled_from(["current", "current", "current", "stale", "future"]),
          variant=st.sampled_from([0, 0, 1]))
    def complete(self, n, inst, which, variant):
        rec = self.pick(n)
        a = self.attempt_for(rec, which)
        response = self.response_for(rec, a, variant)
        s, r, resp = self.send(inst, "POST", rec.base() + "/complete",
                               dict(response, attempt=a))
        what = "complete %r attempt %d variant %d on %s" % (rec, a, variant, "AB"[inst])
        self.note(what, resp)
        self.check_complete(rec, a, response, s, r, resp, what)

    def response_for(self, rec, a, variant):
        return {"status": 201, "headers": {"X-Order-Id": "o-%s-%d" % (rec.label, a)},
                "body": {"order": rec.label, "attempt": a, "variant": variant}}

    def check_complete(self, rec, a, response, s, r, resp, what, batch=False):
        if self.fenced(rec, a, resp, what, batch):
            return
        if rec.state == "completed":
            if response == rec.response:
                self.expect(resp.status == 200 and (batch or
                                                    resp.json.get("response") == rec.response),
                            "%s: the same completion again is 200" % what, resp)
            else:
                self.expect_problem(resp, 409, "completion_conflict", what)
            return
        if rec.state != "in_progress":
            return self.expect_problem(resp, 409, "not_in_progress", what)
        self.expect(resp.status == 200 and (batch or resp.json.get("response") == response),
                    "%s: the current attempt completes" % what, resp)
        rec.state, rec.response, rec.lease = "completed", response, None
        rec.completed_life = rec.life
        ret = rec.policy["retention_seconds"]
        rec.exp = latest((s + ret, r + ret), rec.tok_exp)

    def key_group(self, op_kind, ns):
        """Distinct caller keys of one operation, picked by the indices NS."""
        keys = [x for x in self.recs if x.kind == "key" and x.policy is op_kind]
        out = []
        for n in ns:
            if keys:
                x = keys[n % len(keys)]
                if x not in out:
                    out.append(x)
        return out

    @precondition(lambda self: any(x.kind == "key" for x in self.recs))
    @rule(ns=st.lists(st.integers(0, 999), min_size=1, max_size=3), inst=st.integers(0, 1),
          short=st.booleans(), other=st.sampled_from([False, False, False, True]))
    def batch_claim(self, ns, inst, short, other):
        """Caller keys claimed in one batch: each item as if it came alone."""
        group = self.key_group(SHORT if short else LONG, ns)
        if not group:
            return self.note("batch claim: no key of that operation yet")
        items, fps = [], []
        for x in group:
            fp, body = self.claim_body(x, other)
            items.append(dict(body, key=x.ident))
            fps.append(fp)
        s, r, resp = self.send(inst, "POST", "/v1/operations/%s/claims" % group[0].op,
                               {"items": items})
        what = "batch claim %s on %s" % (group, "AB"[inst])
        self.note(what, resp)
        self.expect(resp.status == 200 and len(resp.json.get("items", [])) == len(group),
                    what, resp)
        for x, fp, item in zip(group, fps, resp.json["items"]):
            self.expect(item.get("key") == x.ident, "%s: items in request order" % what, resp)
            self.check_claim(x, fp, s, r, Item(item, resp), "%s: item %r" % (what, x))

    @precondition(lambda self: any(x.kind == "key" for x in self.recs))
    @rule(ns=st.lists(st.integers(0, 999), min_size=1, max_size=3), inst=st.integers(0, 1),
          short=st.booleans(),
          which=st.sampled_from(["current", "current", "current", "stale", "future"]),
          variant=st.sampled_from([0, 0, 1]))
    def batch_complete(self, ns, inst, short, which, variant):
        """Caller keys completed in one batch: each item as if it came alone."""
        group = self.key_group(SHORT if short else LONG, ns)
        if not group:
            return self.note("batch complete: no key of that operation yet")
        items, sent = [], []
        for x in group:
            a = self.attempt_for(x, which)
            response = self.response_for(x, a, variant)
            items.append(dict(response, key=x.ident, attempt=a))
            sent.append((a, response))
        s, r, resp = self.send(inst, "POST", "/v1/operations/%s/completions" % group[0].op,
                               {"items": items})
        what = "batch complete %s (%s, variant %d) on %s" % (group, which, variant, "AB"[inst])
        self.note(what, resp)
        self.expect(resp.status == 200 and len(resp.json.get("items", [])) == len(group),
                    what, resp)
        for x, (a, response), item in zip(group, sent, resp.json["items"]):
            self.expect(item.get("key") == x.ident, "%s: items in request order" % what, resp)
            self.check_complete(x, a, response, s, r, Item(item, resp),
                                "%s: item %r attempt %d" % (what, x, a), batch=True)

    @precondition(lambda self: self.recs)
    @rule(n=st.integers(0, 999), inst=st.integers(0, 1),
          which=st.sampled_from(["current", "current", "stale"]))
    def release(self, n, inst, which):
        rec = self.pick(n)
        a = self.attempt_for(rec, which)
        s, r, resp = self.send(inst, "POST", rec.base() + "/release", {"attempt": a})
        what = "release %r attempt %d on %s" % (rec, a, "AB"[inst])
        self.note(what, resp)
        if self.fenced(rec, a, resp, what):
            return
        if rec.state != "in_progress":
            return self.expect_problem(resp, 409, "not_in_progress", what)
        self.expect(resp.status == 200 and resp.json.get("state") == "issued", what, resp)
        rec.state, rec.lease, rec.exp = "issued", None, rec.tok_exp

    @precondition(lambda self: any(x.kind == "token" for x in self.recs))
    @rule(n=st.integers(0, 999), inst=st.integers(0, 1))
    def revoke(self, n, inst):
        rec = self.pick(n, lambda x: x.kind == "token")
        s, r, resp = self.send(inst, "DELETE", rec.base())
        what = "revoke %r on %s" % (rec, "AB"[inst])
        self.note(what, resp)
        in_use = False
        if rec.has_record and rec.state == "completed":
            in_use = True
        elif rec.has_record and rec.state == "in_progress":
            p = passed(rec.lease, s, r)
            in_use = (p is False) or (p is None and resp.status == 409)
        if in_use:
            return self.expect_problem(resp, 409, "token_in_use", what)
        self.expect(resp.status == 204, "%s: expected 204" % what, resp)
        if not rec.has_record:
            rec.attempt = 0
        rec.has_record, rec.state, rec.lease, rec.exp = True, "revoked", None, rec.tok_exp

    @precondition(lambda self: self.recs)
    @rule(n=st.integers(0, 999), inst=st.integers(0, 1),
          which=st.sampled_from(["current", "current", "stale"]))
    def extend(self, n, inst, which):
        rec = self.pick(n)
        a = self.attempt_for(rec, which)
        s, r, resp = self.send(inst, "POST", rec.base() + "/extend", {"attempt": a})
        what = "extend %r attempt %d on %s" % (rec, a, "AB"[inst])
        self.note(what, resp)
        if self.fenced(rec, a, resp, what):
            return
        if rec.state != "in_progress":
            return self.expect_problem(resp, 409, "not_in_progress", what)
        self.expect(resp.status == 200, what, resp)
        le = parse_time(resp.json["lease_expires_at"])
        lease = rec.policy["lease_seconds"]
        self.expect(s + lease - EPS <= le <= r + lease + EPS,
                    "%s: the lease is extended by the operation's lease" % what, resp)
        rec.lease = (le, le)
        rec.exp = latest(rec.exp, rec.lease)

    @precondition(lambda self: self.recs)
    @rule(n=st.integers(0, 999), inst=st.integers(0, 1),
          which=st.sampled_from(["current", "current", "stale"]), phase=st.integers(1, 3))
    def checkpoint(self, n, inst, which, phase):
        rec = self.pick(n)
        a = self.attempt_for(rec, which)
        cp = {"phase": "step-%d" % phase, "data": {"done": phase, "by": a}}
        s, r, resp = self.send(inst, "POST", rec.base() + "/checkpoint", dict(cp, attempt=a))
        what = "checkpoint %r attempt %d %s on %s" % (rec, a, cp["phase"], "AB"[inst])
        self.note(what, resp)
        if self.fenced(rec, a, resp, what):
            return
        if rec.state != "in_progress":
            return self.expect_problem(resp, 409, "not_in_progress", what)
        self.expect(resp.status == 200, what, resp)
        rec.checkpoint = dict(cp, attempt=a)

    @precondition(lambda self: any(x.has_record and x.attempt >= 2 for x in self.recs))
    @rule(n=st.integers(0, 999), inst=st.integers(0, 1),
          action=st.sampled_from(["complete", "release", "extend", "checkpoint"]))
    def stale_attempt(self, n, inst, action):
        """An earlier attempt of a record that was taken over writes late."""
        rec = self.pick(n, lambda x: x.has_record and x.attempt >= 2)
        i = self.recs.index(rec)
        if action == "complete":
            self.complete(n=i, inst=inst, which="stale", variant=0)
        elif action == "release":
            self.release(n=i, inst=inst, which="stale")
        elif action == "extend":
            self.extend(n=i, inst=inst, which="stale")
        else:
            self.checkpoint(n=i, inst=inst, which="stale", phase=3)

    @precondition(lambda self: self.recs)
    @rule(n=st.integers(0, 999), inst=st.integers(0, 1))
    def introspect(self, n, inst):
        rec = self.pick(n)
        s, r, resp = self.send(inst, "GET", rec.base())
        what = "introspect %r on %s" % (rec, "AB"[inst])
        self.note(what, resp)
        if rec.kind == "key" and not rec.has_record:
            return self.expect_problem(resp, 404, "record_not_found", what)
        self.expect(resp.status == 200, what, resp)
        j = resp.json
        self.expect(j.get("id") == rec.id, "%s: id" % what, resp)
        self.expect(j.get("attempt") == rec.attempt, "%s: attempt %d" % (what, rec.attempt), resp)
        if rec.state == "issued" and rec.kind == "token":
            exp = passed(rec.tok_exp, s, r)
            ok = {True: ("expired",), False: ("issued",), None: ("issued", "expired")}[exp]
        elif rec.state == "in_progress":
            # a lease that ran out reads as issued (or expired) until a takeover
            gone = ("issued", "lease_expired") + (("expired",) if rec.kind == "token" else ())
            ok = {True: gone, False: ("in_progress",),
                  None: ("in_progress",) + gone}[passed(rec.lease, s, r)]
        else:
            ok = (rec.state,)
        self.expect(j.get("state") in ok, "%s: state %s" % (what, "/".join(ok)), resp)
        if rec.state == "completed":
            self.expect(j.get("response") == rec.response, "%s: stored response" % what, resp)
        else:
            self.expect("response" not in j, "%s: no response before completion" % what, resp)
        if rec.has_record and rec.checkpoint is not None:
            self.expect(j.get("checkpoint") == rec.checkpoint, "%s: checkpoint" % what, resp)

    @precondition(lambda self: any(x.state == "in_progress" and x.policy is LONG
                                   for x in self.recs))
    @rule(n=st.integers(0, 999), inst=st.integers(0, 1), other_inst=st.integers(0, 1),
          action=st.sampled_from(["complete", "release"]))
    def wait(self, n, inst, other_inst, action):
        """A duplicate waits (Prefer: wait=5) on one instance while the
        holder completes or releases through the other (or the same)."""
        rec = self.pick(n, lambda x: x.state == "in_progress" and x.policy is LONG)
        fp, body = self.claim_body(rec, False)
        out = {}

        def waiter():
            try:
                out["resp"] = World.clients[inst].request(
                    "POST", rec.base() + "/claim", body, headers={"Prefer": "wait=5"})
            except Exception as e:  # noqa: BLE001
                out["err"] = e
        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.3)
        if action == "complete":
            self.complete(n=self.recs.index(rec), inst=other_inst, which="current", variant=0)
        else:
            self.release(n=self.recs.index(rec), inst=other_inst, which="current")
        s = time.time()
        t.join(15)
        r = time.time()
        self.expect(not t.is_alive(), "wait: the waiter did not return")
        if "err" in out:
            self.fail("wait: %r" % out["err"])
        resp = out["resp"]
        what = "waiting claim %r on %s while %s on %s" % (rec, "AB"[inst], action,
                                                          "AB"[other_inst])
        self.note(what, resp)
        # (a waiter that reached idemd only after the action, on a slow
        # machine, is answered without waiting, and says nothing of it)
        self.expect(resp.header("preference-applied") in ("wait=5", None),
                    "%s: Preference-Applied" % what, resp)
        # it was answered after the action: the claim table at that moment
        self.check_claim(rec, fp, s, r, resp, what)

    def pending(self):
        now = time.time()
        ds = []
        for x in self.recs:
            for d in (x.lease if x.state == "in_progress" else None,
                      x.tok_exp if x.kind == "token" else None,
                      x.exp if x.has_record else None):
                if d is not None and now < d[1] + EPS < now + 4:
                    ds.append(d[1] + EPS)
        return ds

    @precondition(lambda self: self.pending())
    @rule()
    def expire(self):
        """Lets the earliest short deadline (lease, TTL, retention) pass."""
        ds = self.pending()
        if not ds:
            return self.note("nothing left to expire")
        until = min(ds) + 0.02
        d = max(0.0, until - time.time())
        time.sleep(d)
        self.note("let %.2fs pass" % d)

    @precondition(lambda self: any(x.has_record for x in self.recs))
    @rule()
    def sweep(self):
        """The janitor's sweep statement, then which records are left."""
        ids = [x.id for x in self.recs if x.has_record]
        s = time.time()
        out = psql("SELECT deleted FROM idemd_sweep_after(1000, NULL); "
                   "SELECT encode(token_id, 'hex') FROM records WHERE token_id IN (%s)"
                   % ",".join("decode('%s', 'hex')" % i for i in ids), db=World.idemd.db)
        r = time.time()
        lines = out.split()
        deleted, left = int(lines[0]), set(lines[1:])
        self.expect(deleted >= 0, "sweep: another sweep held the lock")
        gone = []
        for x in self.recs:
            if not x.has_record:
                continue
            p = passed(x.exp, s, r)
            present = x.id in left
            self.expect(not (p is True and present),
                        "sweep: %r expired at %.2f but is still there (sweep at %.2f)"
                        % (x, x.exp[1], s))
            self.expect(not (p is False and not present),
                        "sweep: %r was deleted before its expiry %.2f (sweep at %.2f): "
                        "state %s" % (x, x.exp[0], r, x.state))
            if not present:
                gone.append(x.label)
                x.has_record, x.lease, x.exp, x.response, x.checkpoint = (False, None, None,
                                                                          None, None)
                x.attempt, x.fp, x.version_claimed = 0, None, None
                if x.kind == "key":
                    x.state, x.life, x.tok_exp = "issued", x.life + 1, None
                else:
                    x.state = "issued"
        self.note("sweep: deleted %d, of ours %s" % (deleted, gone or "none"))

    @precondition(lambda self: any(x.version is not None for x in self.recs))
    @rule(subj=st.integers(0, 1), stale=st.booleans(), inst=st.integers(0, 1))
    def bump(self, subj, stale, inst):
        key = "mv:" + self.subjects[subj]
        c = self.vcount.get(key, 0)
        im = c - 1 if stale and c > 0 else c
        s, r, resp = self.send(inst, "POST", "/v1/versions/" + key,
                               headers={"If-Match": '"%d"' % im})
        what = "bump %s If-Match %d on %s" % (key, im, "AB"[inst])
        self.note(what, resp)
        if im != c:
            return self.expect_problem(resp, 412, "version_mismatch", what)
        self.expect(resp.status == 200 and resp.json.get("version") == c + 1, what, resp)
        self.vcount[key] = c + 1
        self.check_counter(key, 1 - inst)

    def check_counter(self, key, inst=0):
        """The counter equals the acknowledged bumps (claims and POSTs)."""
        v = self.vcount.get(key, 0)
        s, r, resp = self.send(inst, "GET", "/v1/versions/" + key)
        self.expect(resp.status == 200 and resp.json.get("version") == v and
                    resp.header("etag") == '"%d"' % v,
                    "version counter %s: %d acknowledged bumps" % (key, v), resp)

    def teardown(self):
        for key in self.vcount:
            self.check_counter(key, 1)


class Model(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        World.idemd = Idemd({"sweep_interval_seconds": 86400, "pool_size": 4, "threads": 4})
        try:
            World.idemd.migrate()
            key = World.idemd.tenant_create("model")
            a = World.idemd.start()
            b = World.idemd.start(port=harness.free_port())
            World.servers = (a, b)
            World.clients = (a.client(key), b.client(key))
            for kind, policy in (("long", LONG), ("short", SHORT), ("ver", LONG)):
                name = uniq("model." + kind)
                body = dict(policy)
                if kind == "ver":
                    body["version_key"] = "mv:{subject}"
                r = World.clients[0].put("/v1/operations/" + name, body)
                assert r.status == 201, r.describe()
                World.ops[kind] = name
        except BaseException:
            World.idemd.cleanup()
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            for s in World.servers:
                if s.proc.poll() is None:
                    assert s.stop() == 0, s.stderr_text()[-2000:]
        finally:
            World.idemd.cleanup()

    def test_record_state_machine(self):
        phases = [Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if SHRINK else [])
        cfg = settings(max_examples=EXAMPLES, stateful_step_count=STEPS, deadline=None,
                       database=None, phases=phases, print_blob=False,
                       suppress_health_check=list(HealthCheck))
        print("\n  model: seed %d, up to %d examples of up to %d steps, two instances"
              % (SEED, EXAMPLES, STEPS), file=sys.stderr)
        t0 = time.monotonic()
        try:
            run_state_machine_as_test(seed(SEED)(RecordMachine), settings=cfg)
        except BaseException:
            print("\n  model FAILED (seed %d; rerun with IDEMD_MODEL_SEED=%d). The failing "
                  "example's exchanges:\n%s" % (SEED, SEED, "\n".join(World.log)),
                  file=sys.stderr)
            raise
        finally:
            print("\n  model: %d examples (%d with at least one step), %d steps in %.1f s; "
                  "steps by rule: %s"
                  % (World.counters["examples"], World.counters["ran"], World.counters["steps"],
                     time.monotonic() - t0, dict(sorted(World.rule_counts.items()))),
                  file=sys.stderr)
        self.assertGreater(World.counters["steps"], 0)


if __name__ == "__main__":
    harness.main()
