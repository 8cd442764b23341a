"""The clients: several threads contending for each key, every request
recorded in the history (history.py).

A slot thread runs keys one after another. A key gets sessions: CLIENTS
threads that all claim (or submit) the same key for a few seconds. A
caller key (and a header-derived gateway key) gets several sessions with
gaps around its life (token_ttl_seconds, retention_seconds), so that one key
lives several lives during the run; a token gets one (it expires).

A client that is granted a claim (201) does one of: complete, release,
abandon (its lease runs out), long work (extend, checkpoint, complete), or
stall: it sleeps past its lease and the key's life, then tries to complete,
release, extend or checkpoint with its old attempt (it keeps running after
its session; the next session's clients take the key meanwhile). After a
complete or a release a client sometimes resends an old write on purpose
(stale: true). Clients also read the key (introspection, /v1/records/{id}).
Gateway clients submit the same body with the same key; the upstream works
X-Work-Ms, now and then longer than the route's timeout; with big_answer,
one gateway key in five gets answers too large for idemd to store.
"""

import random
import threading
import time
import zlib

from history import Client


class OpSpec:
    """An operation and how its keys are used. kind: token, ckey (the direct
    API), gwtok, gwhdr (a gateway route, token or header key)."""

    def __init__(self, name, kind, T, D, R, path=None, timeout=None, weight=1.0):
        self.name, self.kind, self.T, self.D, self.R = name, kind, T, D, R
        self.path, self.timeout, self.weight = path, timeout, weight

    def policy(self):
        return {"token_ttl_seconds": self.T, "lease_seconds": self.D,
                "retention_seconds": self.R}

    def meta(self):
        return {"kind": self.kind, "T": self.T, "D": self.D, "R": self.R, "path": self.path,
                "timeout": self.timeout}


class Workload:
    def __init__(self, history, ports, api_key, specs, duration, seed, slots=6, clients=3,
                 stall_p=0.15, token_ttl=None, sessions=(2, 4), tag="k", big_answer=0):
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
                if rid[0] and rng.random() < 0.5:
                    c.call(node, "GET", "/v1/records/" + rid[0], key=key, kind=spec.kind,
                           op=spec.name, f="record")
                else:
                    c.call(node, "GET", base, key=key, kind=spec.kind, op=spec.name, f="get")
            r, rec = c.call(node, "POST", base + "/claim", claim, key=key, kind=spec.kind,
                            op=spec.name, f="claim")
            if r is None or r.status >= 500:
                self._sleep(0.1 + rng.random() * 0.3)
            elif r.status == 201:
                if isinstance(r.json, dict) and r.json.get("id"):
                    rid[0] = r.json["id"]
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

    # ------------------------------------------------------------ gateway

    def _gateway_client(self, name, rng, spec, key, hkey, end, big):
        c = self._client(name)
        body = {"key": key, "v": 1}
        while not self._over(end):
            slow = rng.random() < 0.08
            work = spec.timeout * 1000 + 400 if slow else rng.randint(20, 600)
            headers = {"Idempotency-Key": hkey, "X-Work-Ms": str(int(work))}
            if big:
                headers["X-Answer-Bytes"] = str(self.big_answer)
            r, rec = c.call(rng.randrange(len(self.ports)), "POST", spec.path, body,
                            headers=headers,
                            key=key, kind=spec.kind, op=spec.name, f="submit", auth=False)
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
            if spec.kind in ("token", "ckey"):
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
            rid = [None]
            board = self._board()
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
