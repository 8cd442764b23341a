"""The gateway routes' upstream for the history checker: it logs every
execution, one JSON line each, to the file named by --log:
  {"key": the logical key (the JSON body's "key"), "rid": the
   Idempotency-Key idemd forwarded, "op": the X-Op-Id of the client's
   submit that idemd forwarded, "exec": a fresh id for this execution,
   "a": wall time of arrival, "u": wall time the answer was written}
and answers 201 {"exec", "key"}; replays of that answer therefore carry the
id of the one execution they stand for. It works X-Work-Ms milliseconds
(a header: the fingerprint covers the body, not the headers) before
answering, and pads its answer with X-Answer-Bytes bytes (an answer too
large for idemd to store: a success that must never run again). The line
is written before the answer is sent, so the log never misses an
execution a client saw.

Run as its own process: python3 upstream.py --log FILE [--port N]; prints
"PORT <n>" once it listens.
"""

import argparse
import http.server
import json
import os
import sys
import threading
import time


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "checker-upstream"
    log_lock = threading.Lock()
    log_file = None

    def log_message(self, fmt, *args):
        pass

    def do_POST(self):
        a = time.time()
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n > 0 else b""
        try:
            key = json.loads(body.decode()).get("key")
        except (ValueError, AttributeError):
            key = None
        work = int(self.headers.get("X-Work-Ms") or 0)
        if work > 0:
            time.sleep(work / 1000.0)
        ex = os.urandom(8).hex()
        doc = {"exec": ex, "key": key}
        pad = int(self.headers.get("X-Answer-Bytes") or 0)
        if pad > 0:
            doc["pad"] = "x" * pad    # an answer larger than idemd may store
        out = json.dumps(doc).encode()
        rec = {"key": key, "rid": self.headers.get("Idempotency-Key"),
               "op": self.headers.get("X-Op-Id"), "exec": ex, "a": a, "u": time.time(),
               "path": self.path}
        with Handler.log_lock:
            Handler.log_file.write(json.dumps(rec, separators=(",", ":")) + "\n")
            Handler.log_file.flush()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def do_GET(self):
        out = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)


def load(path):
    """The executions logged in PATH, in arrival order."""
    out = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    out.append(json.loads(line))
    except FileNotFoundError:
        pass
    out.sort(key=lambda e: e["a"])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log", required=True)
    args = ap.parse_args()
    Handler.log_file = open(args.log, "a")
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    srv.daemon_threads = True
    print("PORT %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
