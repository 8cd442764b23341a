"""What the HA test checks beside the history checker: version counters
(every acknowledged bump is in the counter, none that was refused) and
duplicates that wait (Prefer: wait) being woken from the new primary while
the old one is frozen.
"""

import http.client
import json
import os
import random
import threading
import time

RETRY_FOR = 60.0
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


class Api:
    def __init__(self, port, api_key):
        self.port = port
        self.api_key = api_key

    def send(self, method, path, body=None, headers=None):
        h = {"Content-Type": "application/json", "Authorization": "Bearer " + self.api_key}
        h.update(headers or {})
        data = json.dumps(body).encode() if body is not None else None
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=15)
        try:
            conn.request(method, path, body=data, headers=h)
            r = conn.getresponse()
            return Reply(r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
        except (OSError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    def until_final(self, method, path, body=None, headers=None):
        """Sends until the answer is not retryable (None after RETRY_FOR)."""
        deadline = time.monotonic() + RETRY_FOR
        while time.monotonic() < deadline:
            r = self.send(method, path, body, headers)
            if r is not None and r.status not in RETRYABLE:
                return r
            if r is not None and r.status == 409 and r.code() != "request_in_progress":
                return r
            time.sleep(0.2 + random.random() * 0.3)
        return None


class Bumps:
    """One thread bumping a version counter with If-Match; counts what was
    acknowledged (200) and what may or may not have committed (no answer,
    5xx)."""

    def __init__(self, api):
        self.api = api
        self.key = "stock:" + os.urandom(5).hex()
        self.acked = 0
        self.ambiguous = 0
        self.last = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        version = 0
        while not self.stop.is_set():
            r = self.api.send("POST", "/v1/versions/" + self.key,
                              headers={"If-Match": '"%d"' % version})
            if r is not None and r.status == 200:
                version = r.json["version"]
                self.acked += 1
                self.last = version
                self.stop.wait(0.05)
            elif r is not None and r.status == 412:
                etag = r.headers.get("etag", "").strip('"')
                version = int(etag) if etag.isdigit() else version
            else:
                self.ambiguous += 1
                self.stop.wait(0.2)

    def verify(self):
        """None when the counter holds every acknowledged bump, else why not."""
        r = self.api.until_final("GET", "/v1/versions/" + self.key)
        v = r.json.get("version") if r is not None and isinstance(r.json, dict) else None
        if not isinstance(v, int) or v < self.last or not (
                self.acked <= v <= self.acked + self.ambiguous):
            return ("version %s: %r, acknowledged %d bumps (last %d), %d ambiguous"
                    % (self.key, v, self.acked, self.last, self.ambiguous))
        return None


def waiter_probe(ports, api_key, op, lease):
    """On each idemd node in turn: a key claimed on the other node, a
    duplicate waiting on this one (Prefer: wait), the key completed on the
    other. Returns [(node, seconds from the complete to the waiter's answer,
    status, waited)]. Notified, the waiter answers at once; a LISTEN
    connection left on the frozen old primary would hear nothing and the
    waiter would answer only when the lease ends."""
    out = []
    for a, b in ((0, 1), (1, 0)):
        ap, bp = Api(ports[a], api_key), Api(ports[b], api_key)
        path = "/v1/operations/%s/keys/w-%s" % (op, os.urandom(8).hex())
        r = ap.until_final("POST", path + "/claim", {})
        if r is None or r.status != 201:
            out.append((b, None, r and r.status, False))
            continue
        got = {}

        def wait():
            got["r"] = bp.send("POST", path + "/claim", {}, {"Prefer": "wait=%d" % (lease + 5)})
            got["t"] = time.monotonic()

        t = threading.Thread(target=wait)
        t.start()
        time.sleep(0.5)
        ap.until_final("POST", path + "/complete", {"attempt": r.json["attempt"], "status": 200,
                                                    "body": {"probe": True}})
        t_done = time.monotonic()
        t.join(lease + 10)
        w = got.get("r")
        out.append((b, got.get("t", t_done) - t_done if w is not None else None,
                    w.status if w is not None else None,
                    w is not None and "preference-applied" in w.headers))
    return out
