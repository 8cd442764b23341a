#!/usr/bin/env python3
"""Stoplight Prism's verdict on recorded idemd traffic (tests/contract.sh).

The validating relay (tests/contract/proxy.py --record FILE) keeps every
exchange of the integration suite and of the schemathesis run: the
request's method, path, query and headers, and idemd's answer byte for
byte. This program starts `prism proxy --errors --cors=false
--validate-request=false SPEC http://127.0.0.1:PORT`, where PORT is a
replay upstream of its own that answers each request Prism forwards with
the recorded bytes of its exchange (found by an `X-Replay-Id` header), and
sends every recorded request through Prism. Prism validates each answer
against the document (status, Content-Type, body schema, declared
headers) as it would validate idemd's, and:

  - answers 500 with a problem of type .../prism/errors#VIOLATIONS when an
    answer breaks the document at severity Error (`--errors`);
  - passes the answer through with an `sl-violations` header for a
    Warning (Prism's only one for answers: a non-2xx status the operation
    does not list, "Unable to match the returned status code");
  - answers with a problem of its own, without asking the upstream, when
    the request is not one of the document's operations
    (NO_PATH_MATCHED_ERROR, NO_METHOD_MATCHED_ERROR) or carries no
    `Authorization: Bearer` where the document asks for one (UNAUTHORIZED).

Both the Error and the Warning count as violations. What Prism cannot
check, counted and listed by reason, is left to the openapi-core relay:

  - requests on a path or method that is not in the document (idemd's 404
    and 405 answers there, gateway routes' OPTIONS preflights);
  - statuses the document gives for any path under its own extension
    `x-any-path-responses` (414 and 431 from the HTTP library), which
    Prism does not read: reported as "unlisted status" warnings, they are
    counted as unchecked, not as violations, when that is their only one;
  - a recorded 501 (Prism mocks the operation instead of passing it on);
  - a path with dot segments or percent-encoded unreserved characters
    (`/v1/../v1/tokens`, `/v1/tokens/T/%63laim`): Prism resolves it as
    RFC 3986 normalises URIs and validates idemd's answer against the
    operation it names, where idemd takes the path as it is (404);
  - requests Node's HTTP server refuses before Prism sees them (a method
    it does not know, FROB) or Prism fails on before validating (GET //,
    its router's 500).

The request Prism receives differs from the recorded one only where the
answer's validation cannot depend on it: no body (Prism would parse it and
the tests send malformed ones on purpose; the upstream does not need it),
a gateway route's path replaced by the stand-in of its kind (`/orders`,
`/payments`, `/webhooks/stripe`, as the relay validated it, method POST),
an `Authorization: Bearer replay` where the recorded one is missing or not
a bearer token (so that Prism asks the upstream; the recorded 401 is then
what it checks), and header lines Python's or Node's HTTP code cannot send
left out.

Prints `prism: N exchanges checked, N violations (E errors, W warnings);
N not checkable` and writes the counts as JSON to --stats and each
violation to --report. Exit status 1 on any violation or if nothing was
checked.
"""

import argparse
import base64
import collections
import http.client
import json
import os
import re
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

PRISM_ERRORS = "https://stoplight.io/prism/errors#"
# not to be sent again: the transport's, or what Prism would act on
DROP = {"host", "content-length", "transfer-encoding", "expect", "connection",
        "keep-alive", "te", "upgrade", "trailer", "proxy-connection", "x-replay-id"}
TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
BEARER = re.compile(r"^Bearer [A-Za-z0-9._~+/=-]+$")


def load(path):
    out = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                out.append(json.loads(line))
    return out


class Replay(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


class ReplayHandler(socketserver.BaseRequestHandler):
    """Answers a forwarded request with the recorded answer's bytes."""

    def handle(self):
        s = self.request
        s.settimeout(30)
        buf = b""
        try:
            while b"\r\n\r\n" not in buf:
                d = s.recv(65536)
                if not d:
                    return
                buf += d
            head, _, rest = buf.partition(b"\r\n\r\n")
            rid, length = None, 0
            for ln in head.split(b"\r\n")[1:]:
                name, _, value = ln.partition(b":")
                name = name.strip().lower()
                if name == b"x-replay-id":
                    rid = int(value.strip())
                elif name == b"content-length":
                    length = int(value.strip())
            while len(rest) < length:  # Prism sends no body, but read it if it does
                d = s.recv(65536)
                if not d:
                    break
                rest += d
            raw = self.server.answers.get(rid)
            if raw is None:
                s.sendall(b"HTTP/1.1 599 Replay Id Unknown\r\nContent-Length: 0\r\n"
                          b"Connection: close\r\n\r\n")
            else:
                s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
            # let the client read to the end before the close
            s.settimeout(5)
            while s.recv(65536):
                pass
        except (OSError, ValueError):
            pass


def closing(raw):
    """The answer with `Connection: close` for its own: the replay upstream
    answers one request per connection, and Node's agent would otherwise
    send another on it (a hop-by-hop header; Prism drops it)."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = [ln for ln in head.split(b"\r\n")
             if not ln.lower().startswith((b"connection:", b"keep-alive:"))]
    return b"\r\n".join(lines + [b"Connection: close"]) + sep + body


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent():
    """In Prism's process: SIGKILL when this program ends, however it ends."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def start_prism(prism, spec, upstream_port, log_path):
    port = free_port()
    log = open(log_path, "w")
    # -v warn: Prism's info log writes several lines per request
    proc = subprocess.Popen(
        [prism, "proxy", "--errors", "--cors=false", "--validate-request=false",
         "-h", "127.0.0.1", "-p", str(port), "-v", "warn", spec,
         "http://127.0.0.1:%d" % upstream_port],
        stdout=log, stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit("prism_replay: Prism exited with %d (log: %s)" % (proc.returncode,
                                                                              log_path))
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("prism_replay: Prism did not listen within 60 s (log: %s)" % log_path)


def request_of(i, ex):
    target = ex["path"] + ("?" + ex["query"] if ex.get("query") else "")
    headers = []
    auth = None
    for k, v in ex["headers"]:
        if k in DROP or not TOKEN.match(k):
            continue
        if k == "authorization":
            auth = v
            continue
        if any(ord(ch) < 0x20 and ch != "\t" or ord(ch) == 0x7f for ch in v):
            continue
        headers.append((k, v))
    headers.append(("authorization", auth if auth and BEARER.match(auth) else "Bearer replay"))
    headers.append(("x-replay-id", str(i)))
    return ex["method"], target, headers


def ask(port, method, target, headers):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.putrequest(method, target, skip_host=False, skip_accept_encoding=True)
        for k, v in headers:
            conn.putheader(k, v.encode("latin-1", "replace"))
        if method in ("POST", "PUT", "PATCH", "DELETE"):
            conn.putheader("Content-Length", "0")
        conn.endheaders()
        r = conn.getresponse()
        body = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, body
    finally:
        conn.close()


class Tally:
    def __init__(self, any_path, report_path):
        self.lock = threading.Lock()
        self.any_path = any_path
        self.report = open(report_path, "w", encoding="utf-8")
        self.sent = 0
        self.checked = 0
        self.errors = 0
        self.warnings = 0
        self.unchecked = collections.Counter()
        self.unchecked_examples = {}
        self.by_kind = collections.Counter()
        self.messages = collections.Counter()
        self.examples = {}

    def violation(self, severity, ex, status, entries):
        msgs = sorted({"%s: %s" % (".".join(map(str, e.get("location", []))), e.get("message"))
                       for e in entries})
        key = "%s %s -> %d: %s" % (ex["method"], ex["path"] if ex["kind"] != "api"
                                   else "(%s)" % ex["path"], ex["status"], "; ".join(msgs))
        with self.lock:
            if severity == "Error":
                self.errors += 1
            else:
                self.warnings += 1
            self.checked += 1
            self.by_kind[ex["kind"]] += 1
            for m in msgs:
                self.messages["%s: %s" % (severity, m)] += 1
                self.examples.setdefault("%s: %s" % (severity, m), key)
            self.report.write(json.dumps({
                "severity": severity, "kind": ex["kind"], "request": "%s %s" % (
                    ex["method"], ex["path"]), "status": ex["status"], "violations": entries,
                "answer": base64.b64decode(ex["raw"])[:1500].decode("utf-8", "replace")}) + "\n")

    def skip(self, reason, ex, note=""):
        with self.lock:
            self.unchecked[reason] += 1
            self.unchecked_examples.setdefault(reason, "%s %s -> %d%s" % (
                ex["method"], ex["path"][:200], ex["status"], note))

    def classify(self, i, ex, port):
        if ex["status"] == 501:
            self.skip("recorded 501 (Prism mocks instead)", ex)
            return
        if normalised(ex["path"]) != ex["path"]:
            self.skip("a path Prism resolves (dot segments, %-encoded unreserved "
                      "characters) and idemd takes as it is", ex)
            return
        method, target, headers = request_of(i, ex)
        try:
            status, rh, body = ask(port, method, target, headers)
        except (OSError, http.client.HTTPException) as e:
            self.skip("no answer from Prism (%s)" % type(e).__name__, ex)
            return
        with self.lock:
            self.sent += 1
        ptype = None
        if rh.get("content-type", "").startswith("application/problem+json"):
            try:
                doc = json.loads(body)
                if isinstance(doc, dict) and str(doc.get("type", "")).startswith(PRISM_ERRORS):
                    ptype = doc["type"][len(PRISM_ERRORS):]
            except ValueError:
                pass
        if ptype == "VIOLATIONS":
            self.violation("Error", ex, status, doc.get("validation") or [])
            return
        if ptype is not None:
            self.skip("Prism answered itself: %s" % ptype, ex)
            return
        if status != ex["status"]:
            # not the recorded answer: Node's HTTP server refused the request
            # (an unknown method) or Prism failed before validating (`//`)
            self.skip("Node or Prism failed before validating (%d)" % status, ex,
                      ": %s" % body[:200].decode("utf-8", "replace"))
            return
        entries = []
        if "sl-violations" in rh:
            try:
                entries = [e for e in json.loads(rh["sl-violations"])
                           if (e.get("location") or [""])[0] == "response"]
            except ValueError:
                entries = [{"location": ["response"], "message": rh["sl-violations"][:500]}]
        if entries and all(str(e.get("message", "")).startswith("Unable to match the returned "
                                                                "status code")
                           for e in entries) and str(ex["status"]) in self.any_path:
            self.skip("%d: x-any-path-responses, not read by Prism" % ex["status"], ex)
            return
        if entries:
            self.violation(max((e.get("severity", "Warning") for e in entries),
                               key=lambda s: s == "Error"), ex, status, entries)
            return
        with self.lock:
            self.checked += 1
            self.by_kind[ex["kind"]] += 1


UNRESERVED = re.compile(r"%(2[dDeE]|3[0-9]|4[1-9a-fA-F]|5[0-9aA]|5[fF]|6[1-9a-fA-F]|7[0-9aA]|7[eE])")


def normalised(path):
    """PATH as RFC 3986 normalises it (6.2.2.2 and 6.2.2.3): percent-encoded
    unreserved characters decoded, dot segments removed."""
    path = UNRESERVED.sub(lambda m: chr(int(m.group(1), 16)), path)
    out = []
    for seg in path.split("/")[1:]:
        if seg == "..":
            if out:
                out.pop()
        elif seg != ".":
            out.append(seg)
    tail = "/" if path.split("/")[-1] in (".", "..") and out else ""
    return "/" + "/".join(out) + tail


def any_path_statuses(spec):
    """The keys of x-any-path-responses (read without a YAML library)."""
    out, inside = set(), False
    with open(spec, encoding="utf-8") as f:
        for line in f:
            if line.startswith("x-any-path-responses:"):
                inside = True
                continue
            if inside:
                if line[:1] not in (" ", "\n", "#"):
                    break
                m = re.match(r"^  '?(\d{3})'?:", line)
                if m:
                    out.add(m.group(1))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--prism", required=True, help="the prism executable")
    ap.add_argument("--spec", required=True)
    ap.add_argument("--record", required=True, help="recorded exchanges (proxy.py --record)")
    ap.add_argument("--report", required=True, help="violations, one JSON object a line")
    ap.add_argument("--stats", required=True, help="the counts, as JSON")
    ap.add_argument("--log", required=True, help="Prism's own log")
    ap.add_argument("--jobs", type=int, default=8)
    a = ap.parse_args()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(143))
    exchanges = load(a.record)
    up = Replay(("127.0.0.1", 0), ReplayHandler)
    up.answers = {i: closing(base64.b64decode(ex["raw"])) for i, ex in enumerate(exchanges)}
    threading.Thread(target=up.serve_forever, daemon=True).start()
    t0 = time.monotonic()
    proc, port = start_prism(a.prism, a.spec, up.server_address[1], a.log)
    started = time.monotonic() - t0
    tally = Tally(any_path_statuses(a.spec), a.report)
    try:
        with ThreadPoolExecutor(a.jobs) as pool:
            for f in [pool.submit(tally.classify, i, ex, port)
                      for i, ex in enumerate(exchanges)]:
                f.result()
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        up.shutdown()
    violations = tally.errors + tally.warnings
    unchecked = sum(tally.unchecked.values())
    stats = {"recorded": len(exchanges), "sent": tally.sent, "checked": tally.checked,
             "violations": violations, "errors": tally.errors, "warnings": tally.warnings,
             "unchecked": unchecked, "unchecked_by_reason": dict(tally.unchecked),
             "checked_by_kind": dict(tally.by_kind), "prism_start_s": round(started, 1),
             "seconds": round(time.monotonic() - t0, 1)}
    with open(a.stats, "w") as f:
        json.dump(stats, f)
    for reason, n in sorted(tally.unchecked.items(), key=lambda kv: -kv[1]):
        print("  not checkable by Prism: %5d  %s\n        e.g. %s" % (
            n, reason, tally.unchecked_examples[reason]))
    for m, n in tally.messages.most_common(40):
        print("  VIOLATION %4dx %s\n        e.g. %s" % (n, m[:600], tally.examples[m][:300]))
    print("prism: %d exchanges checked (%s), %d violations (%d errors, %d warnings); "
          "%d not checkable (%.0f s)" % (
              tally.checked, ", ".join("%s %d" % kv for kv in sorted(tally.by_kind.items())),
              violations, tally.errors, tally.warnings, unchecked, stats["seconds"]))
    return 1 if violations or not tally.checked else 0


if __name__ == "__main__":
    sys.exit(main())
