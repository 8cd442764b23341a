"""The gateway routes' upstream for the history checker: it logs every
execution, one JSON line each, to the file named by --log:
  {"key": the logical key (the JSON body's "key"), "rid": the
   Idempotency-Key idemd forwarded, "op": the X-Op-Id of the client's
   submit that idemd forwarded, "exec": a fresh id for this execution,
   "a": wall time of arrival, "sl": wall time its final status line was
   sent (null: none was), "u": wall time it ended (answered, stopped or
   closed), "mode", "coop": whether it honoured Idempotency-Timeout-Ms,
   "deadline_ms": that header's value, "stopped": it gave up at the deadline}
and answers 201 {"exec", "key"}; replays of that answer therefore carry the
id of the one execution they stand for. It works X-Work-Ms milliseconds
(a header: the fingerprint covers the body, not the headers) before
answering, and pads its answer with X-Answer-Bytes bytes (an answer too
large for idemd to store: a success that must never run again). The line
is written before the answer ends, so the log never misses an execution a
client saw.

X-Mode (a header too) says how the execution behaves:
  ok           cooperates: when the work would outlast the forward's
               deadline (Idempotency-Timeout-Ms, counted from arrival) it
               stops there and closes the connection without an answer
  ignore       works X-Work-Ms whatever the deadline (outside the promise:
               its overlaps are counted, not flagged)
  outlive      ignores the deadline and works X-Work-Ms (the client makes it
               longer than the lease), then answers
  cl_short     status line, Content-Length longer than the body it sends,
               then closes
  chunk_cut    status line, chunked, one chunk, closes without the last one
  stall_past   status line, half the body, stalls past the deadline (and
               the route's timeout), then closes
  stall_ok     status line, half the body, stalls a little (well inside the
               deadline), then the rest: an answer that must be stored
In every break mode the work is done when the status line is sent.

Run as its own process: python3 upstream.py --log FILE [--port N]; prints
"PORT <n>" once it listens.
"""

import argparse
import http.server
import json
import os
import socket
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
        mode = self.headers.get("X-Mode") or "ok"
        work = int(self.headers.get("X-Work-Ms") or 0) / 1000.0
        dl = self.headers.get("Idempotency-Timeout-Ms")
        dl = int(dl) / 1000.0 if dl and dl.isdigit() else None
        coop = mode not in ("ignore", "outlive")
        ex = os.urandom(8).hex()
        rec = {"key": key, "rid": self.headers.get("Idempotency-Key"),
               "op": self.headers.get("X-Op-Id"), "exec": ex, "a": a, "sl": None,
               "path": self.path, "mode": mode, "coop": coop,
               "deadline_ms": int(dl * 1000) if dl is not None else None, "stopped": False}
        doc = {"exec": ex, "key": key}
        pad = int(self.headers.get("X-Answer-Bytes") or 0)
        if pad > 0:
            doc["pad"] = "x" * pad    # an answer larger than idemd may store
        out = json.dumps(doc).encode()
        if coop and dl is not None and work > dl - (time.time() - a):
            # the forward's deadline passes before the work would end: a
            # cooperating upstream stops there, without an answer
            self._sleep_until(a + dl)
            rec["stopped"] = True
            self._log(rec)
            self.close_connection = True
            self._drop()
            return
        if work > 0:
            time.sleep(work)
        if mode in ("ok", "ignore", "outlive"):
            rec["sl"] = time.time()
            self._log(rec)
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)
            return
        # the break modes: a final status line, then the rest goes wrong
        self.close_connection = True
        half = out[:max(1, len(out) // 2)]
        try:
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            if mode == "chunk_cut":
                self.send_header("Transfer-Encoding", "chunked")
            elif mode == "cl_short":
                self.send_header("Content-Length", str(len(out) + 100))
            else:
                self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.flush()
            rec["sl"] = time.time()
            if mode == "chunk_cut":
                self.wfile.write(b"%x\r\n%s\r\n" % (len(half), half))
            else:
                self.wfile.write(half)
            self.wfile.flush()
            if mode == "stall_past":
                # past the deadline (or the route's timeout when no header
                # said it), then the connection is closed
                self._sleep_until(a + (dl if dl is not None else 1.5) + 0.4)
            elif mode == "stall_ok":
                time.sleep(0.3)
                self.wfile.write(out[len(half):])
                self.wfile.flush()
        except OSError:
            pass
        self._log(rec)
        if mode != "stall_ok":
            self._drop()

    @staticmethod
    def _sleep_until(t):
        d = t - time.time()
        if d > 0:
            time.sleep(d)

    def _drop(self):
        try:
            self.wfile.flush()
        except OSError:
            pass
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _log(self, rec):
        rec["u"] = time.time()
        with Handler.log_lock:
            Handler.log_file.write(json.dumps(rec, separators=(",", ":")) + "\n")
            Handler.log_file.flush()

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
