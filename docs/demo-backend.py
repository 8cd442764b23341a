#!/usr/bin/env python3
"""A backend to put behind an idemd gateway route, for the guides.

    python3 docs/demo-backend.py [HOST:PORT]     (default 127.0.0.1:9000)

Every POST is one call: it is counted, logged on stdout as one line
("call N: POST /path key=<Idempotency-Key> body=<body>"), and answered
with {"call": N}, status 201 on /orders and 200 elsewhere. A request may
ask for another answer: "X-Demo-Status: 503" answers 503, "X-Demo-Delay:
3" answers 3 s late. On /webhooks/ paths the body must be signed: header
"Webhook-Signature" = hex HMAC-SHA256 of the body with the secret
"whsec_demo", else 401 (nothing is counted). Like a real backend, it
removes no duplicates itself: every call it gets, it executes.
"""

import hashlib
import hmac
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = b"whsec_demo"
calls = 0
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        global calls
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path.startswith("/webhooks/"):
            good = hmac.new(SECRET, body, hashlib.sha256).hexdigest()
            if not hmac.compare_digest(self.headers.get("Webhook-Signature", ""), good):
                return self.answer(401, {"error": "bad signature"})
        time.sleep(float(self.headers.get("X-Demo-Delay", 0)))
        with lock:
            calls += 1
            n = calls
        print("call %d: POST %s key=%s body=%s" % (n, self.path, self.headers.get(
            "Idempotency-Key"), body.decode("utf-8", "replace")), flush=True)
        status = int(self.headers.get("X-Demo-Status", 201 if self.path == "/orders" else 200))
        self.answer(status, {"call": n})

    def answer(self, status, obj):
        data = (json.dumps(obj, separators=(",", ":")) + "\n").encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


host, _, port = (sys.argv[1] if len(sys.argv) > 1 else "127.0.0.1:9000").rpartition(":")
ThreadingHTTPServer((host, int(port)), Handler).serve_forever()
