"""A small upstream HTTP server for the gateway tests (python stdlib only).

Run as its own process:  python3 upstream.py [--port N]
It prints "PORT <n>" on its first stdout line once it listens (N = 0 or
absent: any free port), serves HTTP/1.1 with keep-alive, and records every
request it receives (method, path, headers, body) so that a test can count
how many times each Idempotency-Key reached it, and over which connection
(the client's port, "peer").

How it answers is chosen per request by the X-Upstream-Mode header:
  (none) or ok     201 JSON {"order", "key", "subject", "body"} with
                   Location, X-Order-Id and X-Not-Stored headers
  slow=SECONDS     the same after sleeping SECONDS
  status=CODE      CODE with a JSON {"error": "..."} body
  big=BYTES        201 with a body of BYTES bytes
  echo=CODE,TIMES  CODE with a JSON body quoting the request's body TIMES
                   times (a validation refusal that echoes its input)
  close            closes the connection without answering
  short            200 whose body is shorter than its Content-Length, then
                   closes: the answer breaks off after its status line
  chunked-cut      200 chunked, one chunk, then closes without the last one
  stall=SECONDS    200 with a Content-Length, part of the body, then SECONDS
                   of silence before it closes
  late=READ,WORK   reads the request READ seconds late (as from a full
                   listen queue), then honours the deadline it was told:
                   Idempotency-Deadline (unix ms) if sent, else
                   Idempotency-Timeout-Ms counted from its late read; it
                   works WORK seconds and answers 201 if that fits, else
                   answers 503 at once without acting ("executed" says which)
A request's "end" is when the upstream finished working on it (after a
slow= sleep), so a test can tell whether two executions overlapped.
Control endpoints (not recorded):
  GET /_requests   the recorded requests as JSON
  POST /_reset     forget them
"""

import argparse
import base64
import http.server
import json
import sys
import threading
import time


class State:
    lock = threading.Lock()
    requests = []
    orders = 0


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "upstream-test"

    def log_message(self, fmt, *args):
        pass

    def _send(self, status, body, headers=None, ctype="application/json"):
        self.send_response(status)
        if ctype is not None:
            self.send_header("Content-Type", ctype)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _control(self):
        if self.path == "/_requests" and self.command == "GET":
            with State.lock:
                body = json.dumps(State.requests).encode()
            self._send(200, body)
            return True
        if self.path == "/_reset" and self.command == "POST":
            with State.lock:
                State.requests.clear()
            self._send(204, b"", ctype=None)
            return True
        return False

    def _handle(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n > 0 else b""
        if self._control():
            return
        key = self.headers.get("Idempotency-Key")
        with State.lock:
            State.requests.append({
                "method": self.command,
                "path": self.path,
                "headers": [[k, v] for k, v in self.headers.items()],
                "body_b64": base64.b64encode(body).decode(),
                "key": key,
                "peer": self.client_address[1],
                "time": time.time(),
            })
            State.orders += 1
            order = State.orders
            record = State.requests[-1]
        mode = self.headers.get("X-Upstream-Mode", "ok")
        if mode.startswith("late="):
            self._late(mode, record)
            return
        if mode.startswith("slow="):
            time.sleep(float(mode[5:]))
            mode = "ok"
        record["end"] = time.time()
        if mode in ("short", "chunked-cut") or mode.startswith("stall="):
            self._broken(mode)
            return
        if mode == "close":
            self.close_connection = True
            self.connection.shutdown(2)
            return
        if mode.startswith("status="):
            code = int(mode[7:])
            self._send(code, json.dumps({"error": "upstream said %d" % code}).encode(),
                       {"X-Order-Id": "none"})
            return
        if mode.startswith("echo="):
            code, times = mode[5:].split(",")
            self._send(int(code), b'{"detail":[' + b",".join([body] * int(times)) + b"]}")
            return
        if mode.startswith("big="):
            self._send(201, b"x" * int(mode[4:]), ctype="application/octet-stream")
            return
        doc = {"order": order, "key": key,
               "subject": self.headers.get("Idempotency-Subject"),
               "body": body.decode("utf-8", "replace")}
        self._send(201, json.dumps(doc).encode(),
                   {"Location": "/orders/%d" % order, "X-Order-Id": str(order),
                    "X-Not-Stored": "1"})

    def _late(self, mode, record):
        read, work = (float(x) for x in mode[5:].split(","))
        time.sleep(read)
        now = time.time()
        deadline = self.headers.get("Idempotency-Deadline")
        timeout = self.headers.get("Idempotency-Timeout-Ms")
        if deadline is not None:
            left = int(deadline) / 1000.0 - now
        else:
            left = int(timeout) / 1000.0 if timeout is not None else 3600.0
        record["executed"] = left >= work
        try:
            if not record["executed"]:
                record["end"] = now
                self._send(503, b'{"error": "past the deadline"}')
                return
            record["start"] = now
            time.sleep(work)
            record["end"] = time.time()
            self._send(201, b'{"late": true}')
        except OSError:
            pass  # idemd stopped waiting: the work is done all the same

    def _broken(self, mode):
        """A final status line, then an answer that breaks off."""
        self.close_connection = True
        head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        if mode == "chunked-cut":
            self.wfile.write((head + "Transfer-Encoding: chunked\r\n\r\n"
                              "5\r\n{\"a\":\r\n").encode())
        else:
            self.wfile.write((head + "Content-Length: 100\r\n\r\n{\"order\":").encode())
        self.wfile.flush()
        if mode.startswith("stall="):
            time.sleep(float(mode[6:]))
        self.connection.shutdown(2)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _handle


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
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
