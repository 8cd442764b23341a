"""The storm: client threads sending issues, token claims and completes,
caller-key claims and completes, gateway submits, batch claims and
completes, and version bumps through HAProxy, each keeping an exact ledger
of what was acknowledged (a 2xx) so that it can be checked after a fault.

Every key has one owner thread, which retries an unanswered or 503/502/409
(in progress) request with the same key and the same body until it gets a
final answer, as a well-behaved client does. A client "executes" a key when
it receives a 201 for it (the claim is its own); a second 201 for a key is
a double execution.
"""

import http.client
import json
import random
import threading
import time
import uuid

OP_DIRECT = "pay.capture"     # token and caller-key claims
OP_BATCH = "event.consume"    # batch claims
OP_GATEWAY = "order.create"   # the gateway route's operation
LEASE = 4                     # seconds: an ambiguous claim's lease ends soon
RETRY_FOR = 90.0              # a key unresolved after this is a failure
RETRYABLE = (409, 502, 503, 504)


class Reply:
    __slots__ = ("status", "headers", "body", "json")

    def __init__(self, status, headers, body):
        self.status = status
        self.headers = headers
        self.body = body
        try:
            self.json = json.loads(body.decode()) if body else None
        except ValueError:
            self.json = None

    def code(self):
        return self.json.get("code") if isinstance(self.json, dict) else None


class Log:
    """Every write request's outcome, with times, for the unavailability
    windows: (t_start, t_end, ok) with ok False for a 5xx or no answer."""

    def __init__(self):
        self.lock = threading.Lock()
        self.events = []
        self.retry_after_missing = 0
        self.bad_statuses = []

    def add(self, t0, t1, ok, what=""):
        with self.lock:
            self.events.append((t0, t1, ok, what))

    def window(self, since):
        """(first failure, first success after it, last failure, failures)
        among write requests that ended after SINCE; None where none."""
        with self.lock:
            ev = [e for e in self.events if e[1] >= since]
        fails = [e for e in ev if not e[2]]
        if not fails:
            return None, None, None, 0
        first_fail = min(e[0] for e in fails)
        first_fail_end = min(e[1] for e in fails)
        oks = sorted((e[1], e[3]) for e in ev if e[2] and e[0] >= first_fail_end)
        first_ok = oks[0][0] if oks else None
        self.first_ok_what = oks[0][1] if oks else None
        last_fail = max(e[1] for e in fails)
        return first_fail, first_ok, last_fail, len(fails)


class Api:
    def __init__(self, port, api_key, log):
        self.port = port
        self.api_key = api_key
        self.log = log

    def send(self, method, path, body=None, headers=None, write=True, auth=True):
        h = {"Content-Type": "application/json"}
        if auth:
            h["Authorization"] = "Bearer " + self.api_key
        h.update(headers or {})
        data = json.dumps(body).encode() if body is not None else None
        t0 = time.monotonic()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
        try:
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            rep = Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        except (OSError, http.client.HTTPException):
            rep = None
        finally:
            conn.close()
        t1 = time.monotonic()
        if rep is not None and rep.status == 503 and "retry-after" not in rep.headers:
            with self.log.lock:
                self.log.retry_after_missing += 1
        if rep is not None and rep.status >= 500 and rep.status not in (502, 503, 504):
            with self.log.lock:
                self.log.bad_statuses.append((method, path, rep.status, rep.body[:200]))
        if write:
            ok = rep is not None and rep.status < 500
            # a batch is 200 even when its items could not be run (503 each)
            if ok and isinstance(rep.json, dict) and isinstance(rep.json.get("items"), list):
                ok = not any(isinstance(i, dict) and i.get("status") == 503
                             for i in rep.json["items"])
            self.log.add(t0, t1, ok,
                         "%s %s %s" % (method, path.split("/")[2] if path.count("/") > 1 else path,
                                       rep.status if rep is not None else "-"))
        return rep

    def until_final(self, method, path, body=None, headers=None, write=True):
        """Sends until the answer is not retryable; returns it (None when
        RETRY_FOR passed). WRITE: whether the request needs the database
        (token issues do not: they count in no unavailability window)."""
        deadline = time.monotonic() + RETRY_FOR
        while time.monotonic() < deadline:
            r = self.send(method, path, body, headers, write=write)
            if r is not None and r.status not in RETRYABLE:
                return r
            # 409 is retried only while the key is in progress (our own
            # earlier try committed and its answer was lost: its lease ends)
            if r is not None and r.status == 409 and r.code() != "request_in_progress":
                return r
            pause = 0.2
            if r is not None and r.headers.get("retry-after", "").isdigit():
                pause = min(1.0, max(0.2, int(r.headers["retry-after"]) * 0.5))
            time.sleep(pause * (0.5 + random.random()))
        return None


class Ledger:
    """What the storm was told. Lists of dicts; appended under the lock."""

    def __init__(self):
        self.lock = threading.Lock()
        self.issued = []       # {"token"}: an issue acknowledged, never claimed
        self.completed = []    # {"kind","path","claim_body","response"} direct API
        self.gateway = []      # {"token","id","body","status","t_ack"}
        self.bumps = {}        # key -> {"acked": n, "ambiguous": n, "last": v}
        self.executions = {}   # key -> number of 201s received
        self.anomalies = []    # text
        self.unresolved = 0
        self.redelivered_claims = 0  # a retried claim that found its first try committed

    def executed(self, key):
        with self.lock:
            self.executions[key] = self.executions.get(key, 0) + 1

    def anomaly(self, text):
        with self.lock:
            self.anomalies.append(text)


class Storm:
    def __init__(self, port, api_key, ledger, log):
        self.api = Api(port, api_key, log)
        self.ledger = ledger
        self.log = log
        self.stop = threading.Event()
        self.threads = []

    # ---------------------------------------------------------------- workers

    def _claim_complete(self, kind, base, claim_body):
        """Claims BASE (a token or caller-key path), completes it, records
        it. Returns when done or given up."""
        L = self.ledger
        r = self.api.until_final("POST", base + "/claim", claim_body)
        if r is None:
            L.unresolved += 1
            return
        if r.status == 200 and r.json.get("state") == "completed":
            L.anomaly("%s %s: first claim answered a replay %s" % (kind, base, r.body[:200]))
            return
        if r.status != 201:
            L.anomaly("%s %s: claim answered %d %s" % (kind, base, r.status, r.body[:200]))
            return
        L.executed(base)
        attempt = r.json["attempt"]
        if attempt > 1:
            with L.lock:
                L.redelivered_claims += 1
        response = {"status": 201, "body": {"done": base, "n": random.randint(1, 10**9)}}
        body = dict(response, attempt=attempt)
        r = self.api.until_final("POST", base + "/complete", body)
        if r is None:
            L.unresolved += 1
            return
        if r.status != 200:
            L.anomaly("%s %s: complete answered %d %s" % (kind, base, r.status, r.body[:200]))
            return
        with L.lock:
            L.completed.append({"kind": kind, "path": base, "claim_body": claim_body,
                                "key": base.rsplit("/", 1)[1], "response": response})

    def token_worker(self):
        while not self.stop.is_set():
            subject = "u-" + uuid.uuid4().hex[:8]
            r = self.api.until_final("POST", "/v1/tokens",
                                     {"operation": OP_DIRECT, "subject": subject}, write=False)
            if r is None or r.status != 201:
                self.ledger.anomaly("issue: %r" % (r and (r.status, r.body[:200])))
                continue
            token = r.json["token"]
            if random.random() < 0.2:
                with self.ledger.lock:
                    self.ledger.issued.append({"token": token})
                continue
            self._claim_complete("token", "/v1/tokens/" + token,
                                 {"request": {"amount": random.randint(1, 999)}})

    def key_worker(self):
        while not self.stop.is_set():
            key = "ck-" + uuid.uuid4().hex
            self._claim_complete("key", "/v1/operations/%s/keys/%s" % (OP_DIRECT, key),
                                 {"request": {"amount": random.randint(1, 999)}})

    def gateway_worker(self):
        L = self.ledger
        while not self.stop.is_set():
            r = self.api.until_final("POST", "/v1/tokens",
                                     {"operation": OP_GATEWAY, "subject": "g-" + uuid.uuid4().hex[:8]},
                                     write=False)
            if r is None or r.status != 201:
                L.anomaly("gateway issue: %r" % (r and (r.status, r.body[:200])))
                continue
            token, tid = r.json["token"], r.json["id"]
            body = {"item": random.randint(1, 10**6)}
            r = self.api.until_final("POST", "/orders", body, {"Idempotency-Key": token})
            if r is None:
                L.unresolved += 1
                continue
            if r.status != 201:
                L.anomaly("gateway %s: %d %s" % (tid, r.status, r.body[:200]))
                continue
            replayed = r.headers.get("idempotent-replayed")
            if replayed == "false":
                L.executed("gw:" + tid)
            with L.lock:
                L.gateway.append({"token": token, "id": tid, "req": body, "status": r.status,
                                  "body": r.body, "replayed": replayed,
                                  "t_ack": time.time()})

    def batch_worker(self):
        """Batches of 8 new caller keys: one batch claim, one batch
        complete. An item answered 503 (its set failed and so did its own
        retry) or 409 in progress (our own earlier try committed) is sent
        again in the next batch."""
        L = self.ledger
        claims = "/v1/operations/%s/claims" % OP_BATCH
        completions = "/v1/operations/%s/completions" % OP_BATCH
        while not self.stop.is_set():
            pending = set("bk-" + uuid.uuid4().hex for _ in range(8))
            attempts = {}
            deadline = time.monotonic() + RETRY_FOR
            while pending and time.monotonic() < deadline:
                r = self.api.until_final("POST", claims,
                                         {"items": [{"key": k} for k in sorted(pending)]})
                if r is None or r.status != 200:
                    if r is not None:
                        L.anomaly("batch claim: %d %s" % (r.status, r.body[:200]))
                    break
                for it in r.json["items"]:
                    if it["status"] == 201:
                        L.executed("b:" + it["key"])
                        attempts[it["key"]] = it["attempt"]
                        if it["attempt"] > 1:
                            with L.lock:
                                L.redelivered_claims += 1
                        pending.discard(it["key"])
                    elif it["status"] == 503 or (it["status"] == 409 and
                                                 it.get("code") == "request_in_progress"):
                        pass
                    else:
                        L.anomaly("batch item %s: %r" % (it["key"], it))
                        pending.discard(it["key"])
                if pending:
                    time.sleep(0.3)
            L.unresolved += len(pending)
            todo = dict(attempts)
            while todo and time.monotonic() < deadline:
                comp = [{"key": k, "attempt": a, "status": 200, "body": {"consumed": k}}
                        for k, a in sorted(todo.items())]
                r = self.api.until_final("POST", completions, {"items": comp})
                if r is None or r.status != 200:
                    if r is not None:
                        L.anomaly("batch complete: %d %s" % (r.status, r.body[:200]))
                    break
                for it in r.json["items"]:
                    k = it["key"]
                    if it["status"] == 503:
                        continue
                    del todo[k]
                    if it["status"] != 200:
                        L.anomaly("batch complete %s: %r" % (k, it))
                        continue
                    with L.lock:
                        L.completed.append({"kind": "batch", "key": k,
                                            "path": "/v1/operations/%s/keys/%s" % (OP_BATCH, k),
                                            "claim_body": {},
                                            "response": {"status": 200,
                                                         "body": {"consumed": k}}})
                if todo:
                    time.sleep(0.3)
            L.unresolved += len(todo)

    def bump_worker(self):
        L = self.ledger
        key = "stock:" + uuid.uuid4().hex[:10]
        with L.lock:
            st = L.bumps[key] = {"acked": 0, "ambiguous": 0, "last": 0}
        version = 0
        while not self.stop.is_set():
            r = self.api.send("POST", "/v1/versions/" + key, headers={"If-Match": '"%d"' % version})
            if r is not None and r.status == 200:
                version = r.json["version"]
                with L.lock:
                    st["acked"] += 1
                    st["last"] = version
                time.sleep(0.01)
                continue
            if r is not None and r.status == 412:
                # our own ambiguous bump committed: the counter moved past us
                etag = r.headers.get("etag", "").strip('"')
                version = int(etag) if etag.isdigit() else version
                continue
            with L.lock:
                st["ambiguous"] += 1
            time.sleep(0.2)

    # ---------------------------------------------------------------- control

    def start(self, plan):
        """PLAN: {worker name: thread count}."""
        for name, n in plan.items():
            for _ in range(n):
                t = threading.Thread(target=self._run, args=(getattr(self, name),), daemon=True)
                t.start()
                self.threads.append(t)

    def _run(self, fn):
        try:
            fn()
        except Exception as e:  # a bug in the storm is a failure, not a hang
            self.ledger.anomaly("storm thread died: %r" % (e,))

    def finish(self, timeout=RETRY_FOR + 30):
        self.stop.set()
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.1, deadline - time.monotonic()))
        return all(not t.is_alive() for t in self.threads)
