"""The history: every request the clients send and every answer they get,
with the times they were sent and answered, one JSON object per line.

Three kinds of lines (field "type"):
  meta   the run's facts the checker needs: the operations' policies
         (token_ttl_seconds T, lease_seconds D, retention_seconds R), the
         gateway routes' timeouts, the clock slack to allow
  op     one request and its answer: id, proc (the client thread), key (the
         logical key: one record), kind (token, ckey, gwtok, gwhdr), f (issue,
         claim, complete, release, extend, checkpoint, get, record, submit),
         node, method, path, req (the JSON body sent), grant (for a write:
         the id of the op whose 201 granted the attempt it sends), stale
         (the client sent it on purpose after it stopped holding), w0/w1
         (wall clock, seconds: sent, answered), m0/m1 (monotonic), status
         (null: no answer), code (problem code), body (the JSON answer),
         replayed (Idempotent-Replayed), waited (Preference-Applied), err;
         batch items are written as ops of their own (f claim or complete,
         "batch": the id of the batch op, whose f is claims or completions),
         with the batch's times and the item's answer as status and body
  fault  one injected fault: kind, node, w0/w1 (begun, ended), detail

Only the Python standard library is used (http.client).
"""

import http.client
import json
import threading
import time


class History:
    """A thread-safe JSON-lines writer; ops get increasing ids."""

    def __init__(self, path):
        self.path = path
        self._f = open(path, "a", buffering=1)
        self._lock = threading.Lock()
        self._next = 0
        self.ops = 0
        self.faults = 0

    def write(self, rec):
        """Writes REC (an op carries its id from new_id)."""
        line = json.dumps(rec, separators=(",", ":"), sort_keys=True)
        with self._lock:
            if rec.get("type") == "op":
                self.ops += 1
            elif rec.get("type") == "fault":
                self.faults += 1
            self._f.write(line + "\n")
    def new_id(self):
        with self._lock:
            self._next += 1
            return self._next

    def meta(self, **kw):
        kw["type"] = "meta"
        self.write(kw)

    def fault(self, kind, w0, w1, node=None, detail=""):
        self.write({"type": "fault", "kind": kind, "node": node, "w0": w0, "w1": w1,
                    "detail": detail})

    def close(self):
        with self._lock:
            self._f.close()


def load(path):
    """(meta dict merged, ops list, faults list) from a history file."""
    meta, ops, faults = {}, [], []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            rec = json.loads(line)
            t = rec.get("type")
            if t == "meta":
                for k, v in rec.items():
                    if isinstance(v, dict) and isinstance(meta.get(k), dict):
                        meta[k].update(v)
                    else:
                        meta[k] = v
            elif t == "op":
                ops.append(rec)
            elif t == "fault":
                faults.append(rec)
    return meta, ops, faults


class Reply:
    __slots__ = ("status", "headers", "raw", "json")

    def __init__(self, status, headers, raw):
        self.status = status
        self.headers = headers
        self.raw = raw
        try:
            self.json = json.loads(raw.decode()) if raw else None
        except ValueError:
            self.json = None

    def code(self):
        return self.json.get("code") if isinstance(self.json, dict) else None

    def retry_after(self, default=0.3):
        v = self.headers.get("retry-after", "")
        return float(v) if v.isdigit() else default


class Client:
    """One client thread's connection to the idemd nodes (a port each, or
    one HAProxy port). Every call is recorded in the history."""

    def __init__(self, history, proc, ports, api_key, timeout=10.0):
        self.h = history
        self.proc = proc
        self.ports = ports
        self.api_key = api_key
        self.timeout = timeout

    def call(self, node, method, path, body=None, headers=None, key=None, kind=None, f=None,
             grant=None, stale=False, auth=True, raw_body=None, extra=None, op=None):
        hdr = {"Content-Type": "application/json"}
        if auth:
            hdr["Authorization"] = "Bearer " + self.api_key
        hdr.update(headers or {})
        op_id = self.h.new_id()
        hdr["X-Op-Id"] = str(op_id)
        data = raw_body if raw_body is not None else (
            json.dumps(body).encode() if body is not None else None)
        w0, m0 = time.time(), time.monotonic()
        rep, err = None, None
        conn = http.client.HTTPConnection("127.0.0.1", self.ports[node], timeout=self.timeout)
        try:
            conn.request(method, path, body=data, headers=hdr)
            r = conn.getresponse()
            rep = Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        except (OSError, http.client.HTTPException) as e:
            err = type(e).__name__
        finally:
            conn.close()
        w1, m1 = time.time(), time.monotonic()
        rec = {"type": "op", "id": op_id, "proc": self.proc, "key": key, "kind": kind, "f": f,
               "node": node, "method": method, "path": path, "req": body, "grant": grant,
               "op": op, "stale": stale, "w0": w0, "w1": w1, "m0": m0, "m1": m1,
               "status": rep.status if rep else None, "err": err}
        if rep is not None:
            rec["code"] = rep.code()
            rec["body"] = rep.json if rep.json is not None else (
                rep.raw[:300].decode("utf-8", "replace") if rep.raw else None)
            rec["replayed"] = rep.headers.get("idempotent-replayed")
            if rep.headers.get("preference-applied"):
                rec["waited"] = rep.headers.get("preference-applied")
        if extra:
            rec.update(extra)
        self.h.write(rec)
        return rep, rec
