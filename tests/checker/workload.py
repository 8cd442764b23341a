"""The clients: several threads contending for each key, every request
recorded in the history (history.py).

A slot thread runs keys one after another. A key gets sessions: CLIENTS
threads that all claim (or submit) the same key for a few seconds. A
caller key (and a header-derived gateway key) gets several sessions with
gaps around its life (token_ttl_seconds, retention_seconds), so that one key
lives several lives during the run; a token gets one (it expires).

A batch key is a set of 3-8 caller keys that several clients claim in one
batch (POST /v1/operations/{op}/claims), complete in one batch
(/completions), release one by one or abandon; each item is recorded as
an op of its own key (f claim or complete, "batch": the batch op's id).

A client that is granted a claim (201) does one of: complete, release,
abandon (its lease runs out), long work (extend, checkpoint, complete), or
stall: it sleeps past its lease and the key's life, then tries to complete,
release, extend or checkpoint with its old attempt (it keeps running after
its session; the next session's clients take the key meanwhile). After a
complete or a release a client sometimes resends an old write on purpose
(stale: true). Clients also read the key (introspection, /v1/records/{id}).
Gateway clients submit the same body with the same key; the upstream works
X-Work-Ms, now and then longer than the route's timeout; with big_answer,
one gateway key in five gets answers too large for idemd to store; each
submit asks the upstream for a behaviour (X-Mode, upstream.py): cooperate
with the forward's deadline, ignore it, outlive the lease, or break after
the status line (short Content-Length, chunked without its last chunk, a
stall past the deadline) or stall mid-body briefly. With wait_p, claims and
gateway submits send Prefer: wait=1..3 (duplicates that wait). Reads are
introspection, /v1/records/{id} and the audit trail
/v1/records/{id}/events of one of the key's record ids.
"""

import random
import threading
import time
import zlib

from history import Client


class OpSpec:
    """An operation and how its keys are used. kind: token, ckey (the direct
    API), gwtok, gwhdr (a gateway route, token or header key)."""

    def __init__(self, name, kind, T, D, R, path=None, timeout=None, weight=1.0, audit=None):
        self.name, self.kind, self.T, self.D, self.R = name, kind, T, D, R
        self.path, self.timeout, self.weight = path, timeout, weight
        self.audit = audit

    def policy(self, audit=None):
        p = {"token_ttl_seconds": self.T, "lease_seconds": self.D, "retention_seconds": self.R}
        if audit is not None or self.audit is not None:
            p["audit_retention_seconds"] = audit if audit is not None else self.audit
        return p

    def meta(self):
        return {"kind": self.kind, "T": self.T, "D": self.D, "R": self.R, "path": self.path,
                "timeout": self.timeout, "audit": self.audit if self.audit is not None
                else self.R}


class Workload:
    def __init__(self, history, ports, api_key, specs, duration, seed, slots=6, clients=3,
                 stall_p=0.15, token_ttl=None, sessions=(2, 4), tag="k", big_answer=0,
                 wait_p=0.0):
        self.h = history
        self.ports = ports
        self.api_key = api_key
        self.specs = specs
        self.end = time.monotonic() + duration
        self.seed = seed
        self.slots = slots
        self.clients = clients
        self.stall_p = stall_p
        self.sessions = sessions
        self.tag = tag
        self.big_answer = big_answer
        self.wait_p = wait_p
        self.threads = []
        self.lock = threading.Lock()
        self.errors = []
        self.keys = 0
        self.stop = threading.Event()

    # ------------------------------------------------------------ helpers

    def _client(self, name):
        return Client(self.h, name, self.ports, self.api_key)

    def _sleep(self, s):
        if s > 0:
            self.stop.wait(s)

    def _over(self, end=None):
        t = time.monotonic()
        return self.stop.is_set() or t >= self.end or (end is not None and t >= end)

    def _issue(self, c, rng, spec):
        """A token for SPEC: (token, id, expires_at text) or None."""
        while not self._over():
            r, _ = c.call(rng.randrange(len(self.ports)), "POST", "/v1/tokens",
                          {"operation": spec.name, "subject": "s"}, f="issue", kind=spec.kind,
                          op=spec.name)
            if r is not None and r.status == 201:
                return r.json["token"], r.json["id"], r.json["expires_at"]
            self._sleep(0.2)
        return None

    # ------------------------------------------------------------ direct API

    def _write(self, c, rng, g, what, base, key, kind, stale=False, retries=2):
        """One write with the attempt of grant G (its op record)."""
        a = g["body"]["attempt"]
        if what == "complete":
            body = {"attempt": a, "status": 201,
                    "body": {"by": g["id"], "n": rng.randrange(1 << 30), "stale": stale}}
        elif what == "release":
            body = {"attempt": a}
        elif what == "extend":
            body = {"attempt": a}
        else:
            body = {"attempt": a, "phase": "step-%d" % rng.randrange(5),
                    "data": {"by": g["id"]}}
        r = None
        for _ in range(retries + 1):
            r, rec = c.call(rng.randrange(len(self.ports)), "POST", "%s/%s" % (base, what), body,
                            key=key, kind=kind, f=what, grant=g["id"], stale=stale,
                            op=g["op"])
            # an unanswered write is sent again as it was (a complete
            # repeated with the same attempt and answer is idempotent)
            if r is not None and r.status not in (502, 503, 504):
                break
            self._sleep(0.2 + rng.random() * 0.3)
        return r

    def _newer_holder(self, board, g, after, wait):
        """Waits up to WAIT s for another client of the key to hold a grant
        it got after AFTER; True when one does (then a stale write races
        the live holder, the worst moment for it)."""
        end = time.monotonic() + wait
        while not self.stop.is_set():
            with board["lock"]:
                if any(gid != g["id"] and t > after for gid, t in board["holders"].items()):
                    return True
            if time.monotonic() >= end:
                return False
            time.sleep(0.05)
        return False

    def _hold(self, c, rng, g, spec, base, key, state, board):
        with board["lock"]:
            board["holders"][g["id"]] = g["w1"]
        try:
            self._hold_work(c, rng, g, spec, base, key, state, board)
        finally:
            with board["lock"]:
                board["holders"].pop(g["id"], None)

    def _hold_work(self, c, rng, g, spec, base, key, state, board):
        D, T = spec.D, spec.T
        b = rng.random()
        stall = b < self.stall_p
        if stall:
            # a worker that stalls past its lease and the key's life, then
            # writes with its old attempt, as soon as a newer holder has
            # the key (or after a while anyway)
            state["stalled"] = True
            with board["lock"]:
                board["holders"].pop(g["id"], None)
            self._sleep(D + max(T, D) + rng.uniform(0.3, 1.0))
            self._newer_holder(board, g, g["w1"] + D, rng.uniform(2.0, 6.0))
            self._write(c, rng, g, rng.choice(("complete", "complete", "release", "extend",
                                               "checkpoint")), base, key, spec.kind,
                        stale=True, retries=0)
            return
        b = rng.random()
        if b < 0.08:
            return                                   # abandoned: the lease runs out
        self._sleep(rng.uniform(0.1, 0.7) * D)
        if b < 0.30:                                 # long work
            for _ in range(rng.randint(1, 2)):
                self._write(c, rng, g, "checkpoint", base, key, spec.kind, retries=0)
                self._sleep(rng.uniform(0.1, 0.4) * D)
                self._write(c, rng, g, "extend", base, key, spec.kind, retries=0)
        what = "release" if b > 0.85 else "complete"
        self._write(c, rng, g, what, base, key, spec.kind)
        if rng.random() < 0.3:                       # a stale write on purpose, later
            with board["lock"]:
                board["holders"].pop(g["id"], None)
            if not self._newer_holder(board, g, g["w1"], rng.uniform(0.3, D + 1.0)):
                self._sleep(rng.uniform(0, 0.3))
            self._write(c, rng, g, rng.choice(("complete", "release", "extend", "checkpoint")),
                        base, key, spec.kind, stale=True, retries=0)

    def _direct_client(self, name, rng, spec, base, key, rid, end, state, board):
        c = self._client(name)
        claim = {"request": {"key": key}}
        if spec.kind == "ckey":
            claim["subject"] = "s"
        while not self._over(end):
            node = rng.randrange(len(self.ports))
            if rng.random() < 0.12:
                self._read(c, rng, node, spec, base, key, rid)
            headers, extra = None, None
            if rng.random() < self.wait_p:
                # a duplicate that waits for the holder's outcome
                n = rng.randint(1, 3)
                headers, extra = {"Prefer": "wait=%d" % n}, {"wait": n}
            r, rec = c.call(node, "POST", base + "/claim", claim, headers=headers, key=key,
                            kind=spec.kind, op=spec.name, f="claim", extra=extra)
            if r is None or r.status >= 500:
                self._sleep(0.1 + rng.random() * 0.3)
            elif r.status == 201:
                self._note_rid(rid, r.json)
                self._hold(c, rng, rec, spec, base, key, state, board)
                if state.get("stalled"):
                    return
            elif r.status == 200:
                self._sleep(rng.uniform(0.15, 0.6))
            elif r.status == 409:
                self._sleep(min(r.retry_after(), 0.5) * rng.random())
            elif r.status in (404, 410):
                self._sleep(0.5)
            else:
                self._sleep(0.3)

    @staticmethod
    def _note_rid(rid, doc):
        """Keeps the record ids a key had (one per record; its trail is
        read by id, also after the record's life)."""
        i = doc.get("id") if isinstance(doc, dict) else None
        if i and i not in rid:
            rid.append(i)

    def _read(self, c, rng, node, spec, base, key, rid):
        """Introspection, the record by id, or its audit trail."""
        known = [i for i in rid if i]
        x = rng.random()
        if known and x < 0.4:
            c.call(node, "GET", "/v1/records/%s/events" % rng.choice(known[-3:]), key=key,
                   kind=spec.kind, op=spec.name, f="events")
        elif known and x < 0.7:
            c.call(node, "GET", "/v1/records/" + known[-1], key=key, kind=spec.kind,
                   op=spec.name, f="record")
        else:
            c.call(node, "GET", base, key=key, kind=spec.kind, op=spec.name, f="get")

    # ------------------------------------------------------------ gateway

    # how gateway submits ask the upstream to behave (upstream.py, X-Mode)
    GW_MODES = (("ok", 0.45), ("ignore", 0.05), ("outlive", 0.05), ("cl_short", 0.1),
                ("chunk_cut", 0.1), ("stall_past", 0.1), ("stall_ok", 0.15))

    def _gateway_client(self, name, rng, spec, key, hkey, end, big):
        c = self._client(name)
        body = {"key": key, "v": 1}
        modes, weights = zip(*self.GW_MODES)
        while not self._over(end):
            mode = rng.choices(modes, weights)[0]
            if mode in ("ok", "ignore"):
                slow = rng.random() < 0.08 or mode == "ignore"
                work = spec.timeout * 1000 + 400 if slow else rng.randint(20, 600)
            elif mode == "outlive":
                work = (spec.D + 0.5) * 1000     # past the route's timeout and the lease
            else:
                work = rng.randint(10, 200)
            headers = {"Idempotency-Key": hkey, "X-Work-Ms": str(int(work)), "X-Mode": mode}
            extra = {"mode": mode}
            if rng.random() < self.wait_p:
                extra["wait"] = rng.randint(1, 3)
                headers["Prefer"] = "wait=%d" % extra["wait"]
            if big:
                headers["X-Answer-Bytes"] = str(self.big_answer)
            r, rec = c.call(rng.randrange(len(self.ports)), "POST", spec.path, body,
                            headers=headers, key=key, kind=spec.kind, op=spec.name, f="submit",
                            auth=False, extra=extra)
            if r is None or r.status >= 500:
                self._sleep(0.1 + rng.random() * 0.3)
            elif 200 <= r.status < 300:
                self._sleep(rng.uniform(0.1, 0.5))
            elif r.status == 409:
                self._sleep(min(r.retry_after(), 0.5) * rng.random())
            elif r.status in (404, 410):
                self._sleep(0.5)
            else:
                self._sleep(0.3)

    # ------------------------------------------------------------ batches

    def _batch_client(self, name, rng, spec, keys, rids, end, boards):
        """Claims a set of caller keys in one batch, completes the granted
        ones in one batch (or releases or abandons some), now and then
        a stale single write; every item is recorded as an op of its key."""
        c = self._client(name)
        path = "/v1/operations/%s" % spec.name
        while not self._over(end):
            node = rng.randrange(len(self.ports))
            if rng.random() < 0.12:
                k = rng.choice(keys)
                self._read(c, rng, node, spec, "%s/keys/%s" % (path, k), k, rids[k])
            sub = [k for k in keys if rng.random() < 0.8] or [rng.choice(keys)]
            rng.shuffle(sub)
            items = [{"key": k, "request": {"key": k}, "subject": "s"} for k in sub]
            r, _, recs = self._batch(c, node, path + "/claims", "claims", spec, items, None)
            granted = []
            for k, rec in zip(sub, recs):
                if rec["status"] == 201:
                    self._note_rid(rids[k], rec["body"])
                    granted.append((k, rec))
                    with boards[k]["lock"]:
                        boards[k]["holders"][rec["id"]] = rec["w1"]
            if not granted:
                self._sleep(0.2 + rng.random() * 0.4 if r is not None and r.status == 200
                            else 0.1 + rng.random() * 0.3)
                continue
            self._sleep(rng.uniform(0.1, 0.6) * spec.D)
            done, release = [], []
            for k, g in granted:
                x = rng.random()
                if x < 0.08:
                    continue                        # abandoned: the lease runs out
                (release if x > 0.9 else done).append((k, g))
            for k, g in release:
                self._write(c, rng, g, "release", "%s/keys/%s" % (path, k), k, spec.kind)
            if done:
                items = [{"key": k, "attempt": g["body"]["attempt"], "status": 201,
                          "body": {"by": g["id"], "n": rng.randrange(1 << 30)}}
                         for k, g in done]
                for _ in range(3):
                    r, _, _ = self._batch(c, rng.randrange(len(self.ports)),
                                          path + "/completions", "completions", spec, items,
                                          [g for _, g in done])
                    # an unanswered batch is sent again as it was
                    if r is not None and r.status not in (502, 503, 504):
                        break
                    self._sleep(0.2 + rng.random() * 0.3)
            for k, g in granted:
                with boards[k]["lock"]:
                    boards[k]["holders"].pop(g["id"], None)
            if granted and rng.random() < 0.2:       # a stale single write, later
                k, g = rng.choice(granted)
                if not self._newer_holder(boards[k], g, g["w1"], rng.uniform(0.3, spec.D + 1.0)):
                    self._sleep(rng.uniform(0, 0.3))
                self._write(c, rng, g, rng.choice(("complete", "release", "extend",
                                                   "checkpoint")),
                            "%s/keys/%s" % (path, k), k, spec.kind, stale=True, retries=0)
            self._sleep(rng.uniform(0.05, 0.3))

    def _batch(self, c, node, path, f, spec, items, grants):
        """One batch request; writes the batch op and an op per item (claim
        or complete of that item's key) with the batch's times."""
        r, brec = c.call(node, "POST", path, {"items": items}, kind="batch", op=spec.name, f=f,
                         extra={"keys": [it["key"] for it in items]})
        answers = {}
        if r is not None and r.status == 200 and isinstance(r.json, dict):
            for it in r.json.get("items") or []:
                if isinstance(it, dict):
                    answers[it.get("key")] = it
        recs = []
        for i, it in enumerate(items):
            a = answers.get(it["key"])
            rec = {"type": "op", "id": self.h.new_id(), "proc": c.proc, "key": it["key"],
                   "kind": spec.kind, "f": "claim" if f == "claims" else "complete",
                   "node": node, "method": "POST", "path": path, "req": it,
                   "grant": grants[i]["id"] if grants else None, "op": spec.name,
                   "stale": False, "w0": brec["w0"], "w1": brec["w1"], "m0": brec["m0"],
                   "m1": brec["m1"], "batch": brec["id"], "err": brec["err"]}
            if a is not None:
                rec["status"] = a.get("status")
                rec["code"] = a.get("code")
                b = dict(a)
                if f == "completions" and a.get("status") == 200:
                    b["state"] = "completed"        # the item's 200: stored
                elif f == "claims" and a.get("status") == 201:
                    b.setdefault("state", "in_progress")
                elif f == "claims" and a.get("status") == 200:
                    b.setdefault("state", "completed")
                rec["body"] = b
            else:
                # the batch was not answered, or not item by item: each
                # item's outcome is unknown (or the batch's refusal)
                rec["status"] = brec["status"] if brec["status"] != 200 else None
                rec["code"] = brec.get("code")
                rec["body"] = brec.get("body") if isinstance(brec.get("body"), dict) else None
            self.h.write(rec)
            recs.append(rec)
        return r, brec, recs

    # ------------------------------------------------------------ sessions

    def _session(self, slot, n, rng, spec, key, base, hkey, rid, length, board):
        end = time.monotonic() + length
        # one gateway key in five answers too large to store (a success
        # that must never run again)
        big = self.big_answer > 0 and spec.kind in ("gwtok", "gwhdr") and \
            zlib.crc32(key.encode()) % 5 == 0
        states = []
        ts = []
        for i in range(self.clients):
            st = {}
            name = "%s%d.%d.%d" % (self.tag, slot, n, i)
            crng = random.Random(rng.randrange(1 << 30))
            if spec.kind == "batch":
                t = threading.Thread(target=self._guard, args=(
                    self._batch_client, name, crng, spec, key, rid, end, board), daemon=True)
            elif spec.kind in ("token", "ckey"):
                t = threading.Thread(target=self._guard, args=(
                    self._direct_client, name, crng, spec, base, key, rid, end, st, board),
                    daemon=True)
            else:
                t = threading.Thread(target=self._guard, args=(
                    self._gateway_client, name, crng, spec, key, hkey, end, big), daemon=True)
            t.start()
            states.append(st)
            ts.append(t)
        with self.lock:
            self.threads.extend(ts)
        # the session is over when every client ended or stalled (a stalled
        # one goes on in the background, into the next session)
        while any(t.is_alive() and not st.get("stalled") for t, st in zip(ts, states)):
            time.sleep(0.1)

    def _slot(self, slot):
        rng = random.Random(self.seed * 1000 + slot)
        n = 0
        while not self._over():
            spec = rng.choices(self.specs, [s.weight for s in self.specs])[0]
            c = self._client("%s%d.issue" % (self.tag, slot))
            with self.lock:
                self.keys += 1
            if spec.kind in ("token", "gwtok"):
                t = self._issue(c, rng, spec)
                if t is None:
                    return
                tok, tid, _ = t
                base = "/v1/tokens/" + tok
                key = tid
                self._session(slot, n, rng, spec, key, base, tok, [tid],
                              rng.uniform(2.0, 5.0), self._board())
                n += 1
                continue
            key = "%s-%d-%d-%s" % (spec.kind, slot, n, "%06x" % rng.randrange(1 << 24))
            base = "/v1/operations/%s/keys/%s" % (spec.name, key)
            rid = []
            board = self._board()
            if spec.kind == "batch":
                # several caller keys claimed and completed together; each
                # is a history of its own (key "<batch key>.<i>")
                key = ["%s.%d" % (key, i) for i in range(rng.randint(3, 8))]
                rid = {k: [] for k in key}
                board = {k: self._board() for k in key}
                with self.lock:
                    self.keys += len(key) - 1
            for _ in range(rng.randint(*self.sessions)):
                if self._over():
                    break
                self._session(slot, n, rng, spec, key, base, key, rid,
                              rng.uniform(1.5, 4.0), board)
                n += 1
                # a gap around the key's life: often the life ended
                # (a new one starts), sometimes not yet
                self._sleep(rng.uniform(0, max(spec.T, spec.R, spec.D) + 1.5))

    @staticmethod
    def _board():
        """What the clients of one key share: who holds it since when."""
        return {"lock": threading.Lock(), "holders": {}}

    def _guard(self, fn, *args):
        try:
            fn(*args)
        except Exception as e:  # a client bug is a failure, never a hang
            import traceback
            with self.lock:
                self.errors.append("%s: %r\n%s" % (fn.__name__, e, traceback.format_exc()))

    def run(self):
        """Runs the slots until the duration passed; waits for every client
        (stalled ones included) to end."""
        slots = [threading.Thread(target=self._guard, args=(self._slot, i), daemon=True)
                 for i in range(self.slots)]
        for t in slots:
            t.start()
        for t in slots:
            t.join()
        deadline = time.monotonic() + 60
        while True:
            with self.lock:
                alive = [t for t in self.threads if t.is_alive()]
            if not alive or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        return not alive
