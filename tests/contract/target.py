#!/usr/bin/env python3
"""A real idemd for the property-based test (tests/contract.sh, schemathesis).

Uses the integration harness (tests/integration/harness.py, the same
IDEMD_BIN and IDEMD_TEST_PG* variables): a fresh database, a tenant, the
operation `order.create`, CORS for https://shop.example, and the gateway
routes the document's stand-ins name, in front of a small upstream that
answers 201 with a JSON body:

  POST /orders    key token                    (operation order.create)
  POST /payments  key header:Idempotency-Key   (operation payment.create)

Writes {"url": ..., "api_key": ..., "port": ..., "config": ...} to the file named by its argument when
idemd is ready, then serves until SIGTERM or SIGINT, and cleans up (idemd
stopped, database dropped).
"""

import json
import os
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "integration"))
import harness  # noqa: E402


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        body = json.dumps({"ok": True, "key": self.headers.get("Idempotency-Key")}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET = answer


def main():
    out = sys.argv[1]
    up = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    up.daemon_threads = True
    threading.Thread(target=up.serve_forever, daemon=True).start()
    upstream = "http://127.0.0.1:%d" % up.server_address[1]
    cfg = {
        "cors_origins": ["https://shop.example"],
        "routes": [
            {"method": "POST", "path": "/orders", "tenant": "shop",
             "operation": "order.create", "upstream": upstream},
            {"method": "POST", "path": "/payments", "tenant": "shop",
             "operation": "payment.create", "upstream": upstream,
             "key": "header:Idempotency-Key"},
        ],
    }
    idemd = harness.Idemd(cfg)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    try:
        idemd.migrate()
        key = idemd.tenant_create("shop")
        srv = idemd.start()
        c = harness.Client(srv.port, key)
        for op in ("order.create", "payment.create"):
            r = c.put("/v1/operations/" + op, dict(harness.DEFAULT_POLICY))
            if r.status not in (200, 201):
                raise SystemExit("target: PUT operation failed: %s" % r.describe())
        with open(out + ".tmp", "w") as f:
            json.dump({"url": "http://127.0.0.1:%d" % srv.port, "api_key": key,
                       "log": srv.log_path, "port": srv.port,
                       "config": idemd.config_path}, f)
        os.rename(out + ".tmp", out)
        while not stop.wait(0.5):
            if srv.proc.poll() is not None:
                print("target: idemd exited with %d:\n%s" % (srv.proc.returncode,
                                                         srv.stderr_text()[-3000:]),
                      file=sys.stderr)
                return 1
        rc = srv.stop()
        if rc != 0:
            print("target: idemd did not exit 0 on SIGTERM (%r)" % rc, file=sys.stderr)
            return 1
        return 0
    finally:
        idemd.cleanup()
        up.shutdown()


if __name__ == "__main__":
    sys.exit(main())
