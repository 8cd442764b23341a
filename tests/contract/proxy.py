#!/usr/bin/env python3
"""A validating TCP relay for the contract stage (tests/contract.sh).

The integration tests' HTTP client (tests/integration/harness.py, with
IDEMD_TEST_PROXY=HOST:PORT) asks this process, on its control port, for a
relay in front of each idemd it talks to:

    POST /register {"upstream": 41234, "config": "/tmp/.../idemd.json"}
    -> {"port": 45678}

Every connection to a relay port is passed byte for byte to the upstream
port and back (timing, 100-continue, early answers and closes are left as
they are); a copy of both byte streams is parsed afterwards, each request
paired with its answer, and each answer validated against api/openapi.yaml
with openapi-core (status, Content-Type, body schema, declared headers
present and well formed), plus one check openapi-core does not make: a
header idemd sends must be declared for that answer (the answers of a
gateway route that carry the upstream's stored headers are marked
`x-passthrough-headers: true` in the document and are exempt).

Gateway submits are validated against the stand-in path of their route's
kind: `/orders` (key `token`), `/payments` (key `header:Idempotency-Key`,
the IETF draft) and `/webhooks/{source}` (the derived keys: `header:NAME`,
`json:/POINTER`, `body`); the routes come from the config file given at
registration. A request on a path or method that the document does not
have must be answered 404 `not_found` or 405 `method_not_allowed` (the
document's conventions), as a Problem.

GET /stats gives the counts; every violation is appended to the report file
(one JSON object per line). Requests are not validated: the tests send
invalid ones on purpose, and what is checked is what idemd answers.

With --record FILE every exchange is also appended to FILE (one JSON
object per line: the request's method, path or a gateway route's
stand-in, query and headers, and the answer's bytes as idemd sent them)
for Stoplight Prism (tests/contract/prism_replay.py); --no-check only
relays and records.
"""

import argparse
import base64
import json
import os
import re
import selectors
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import yaml
from openapi_core import Config, OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from openapi_schema_validator import OAS31Validator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from formats import OPENAPI_FORMATS  # noqa: E402

HOST_URL = "http://127.0.0.1:8080"  # the document's server
# Headers that belong to the transport, not to the API: never "undeclared".
TRANSPORT_HEADERS = {"content-type", "content-length", "connection", "date",
                     "transfer-encoding", "keep-alive", "server"}
RECORD_MAX = 1 << 20  # answers larger than this are not recorded (--record)
STAND_INS = {"token": "/orders", "ietf": "/payments", "derived": "/webhooks/{source}"}


class Contract:
    def __init__(self, spec_path):
        with open(spec_path, encoding="utf-8") as f:
            self.spec = yaml.safe_load(f)
        # problem+json is JSON; the body text/plain of /metrics is a string
        self.openapi = OpenAPI.from_dict(self.spec, config=Config(
            extra_media_type_deserializers={"application/problem+json": json.loads},
            extra_format_validators=OPENAPI_FORMATS))
        self.paths = []
        for tmpl in self.spec["paths"]:
            rx = "^" + re.sub(r"\\\{[^/]+?\\\}", "[^/]+", re.escape(tmpl)) + "$"
            self.paths.append((tmpl.count("{"), tmpl, re.compile(rx)))
        self.paths.sort(key=lambda p: p[0])  # concrete paths before templated ones
        schemas = self.spec["components"]["schemas"]
        self.problem = OAS31Validator(schemas["Problem"])
        # idemd's own problems on a gateway route (GatewayProblem less the
        # upstream's branch)
        self.own_gateway_problem = OAS31Validator(
            {"anyOf": [schemas["Problem"], schemas["UnstorableProblem"]]})

    def deref(self, obj):
        while isinstance(obj, dict) and "$ref" in obj:
            node = self.spec
            for part in obj["$ref"].lstrip("#/").split("/"):
                node = node[part.replace("~1", "/").replace("~0", "~")]
            obj = node
        return obj

    def template(self, path):
        for _, tmpl, rx in self.paths:
            if rx.match(path):
                return tmpl
        return None

    def response_object(self, tmpl, method, status):
        op = self.spec["paths"][tmpl].get(method.lower())
        if op is None:
            return None
        rs = op.get("responses", {})
        for k in (str(status), "%dXX" % (status // 100), "default"):
            if k in rs:
                return self.deref(rs[k])
        return None


def sample(path):
    """A concrete path for a stand-in template."""
    return path.replace("{source}", "stripe")


class Routes:
    """Gateway routes of config files, re-read when a file changes."""

    def __init__(self):
        self.cache = {}
        self.lock = threading.Lock()

    def get(self, config):
        if not config:
            return []
        try:
            st = os.stat(config)
        except OSError:
            return self.cache.get(config, (None, []))[1]
        with self.lock:
            hit = self.cache.get(config)
            if hit and hit[0] == (st.st_mtime_ns, st.st_size):
                return hit[1]
        try:
            with open(config, encoding="utf-8") as f:
                cfg = json.load(f)
            routes = [r for r in cfg.get("routes", []) if isinstance(r, dict)]
        except (OSError, ValueError):
            # a file idemd would refuse as a whole (SIGHUP): it keeps
            # serving the routes it had, and so does this
            routes = hit[1] if hit else []
        with self.lock:
            self.cache[config] = ((st.st_mtime_ns, st.st_size), routes)
        return routes


def kind_of(route):
    key = route.get("key", "token")
    if key == "token":
        return "token"
    if isinstance(key, str) and key.lower() == "header:idempotency-key":
        return "ietf"
    return "derived"


# ---------------------------------------------------------------- parsing

class ParseError(Exception):
    pass


def parse_head(buf, pos):
    end = buf.find(b"\r\n\r\n", pos)
    if end < 0:
        raise ParseError("incomplete head")
    lines = bytes(buf[pos:end]).decode("latin-1").split("\r\n")
    headers = []
    for ln in lines[1:]:
        name, sep, value = ln.partition(":")
        if not sep:
            raise ParseError("header line without colon")
        headers.append((name.strip().lower(), value.strip()))
    return lines[0], headers, end + 4


def read_body(buf, pos, headers, until_close):
    h = dict(headers)
    if "chunked" in h.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            eol = buf.find(b"\r\n", pos)
            if eol < 0:
                raise ParseError("incomplete chunk")
            size = int(bytes(buf[pos:eol]).split(b";")[0].strip() or b"0", 16)
            pos = eol + 2
            if size == 0:
                while True:  # trailers
                    eol = buf.find(b"\r\n", pos)
                    if eol < 0:
                        raise ParseError("incomplete trailers")
                    line, pos = buf[pos:eol], eol + 2
                    if not line:
                        return bytes(body), pos
            if pos + size + 2 > len(buf):
                raise ParseError("incomplete chunk")
            body += buf[pos:pos + size]
            pos += size + 2
    if "content-length" in h:
        n = int(h["content-length"])
        if pos + n > len(buf):
            raise ParseError("incomplete body")
        return bytes(buf[pos:pos + n]), pos + n
    if until_close:
        return bytes(buf[pos:]), len(buf)
    return b"", pos


def parse_requests(buf):
    out, pos = [], 0
    while pos < len(buf):
        try:
            line, headers, pos = parse_head(buf, pos)
            method, target, _ = line.split(" ", 2)
            body, pos = read_body(buf, pos, headers, False)
        except (ParseError, ValueError):
            break  # an unfinished request (answered early, or cut): no more pairs
        out.append((method, target, headers, body))
    return out


def parse_responses(buf, methods):
    """(status, headers, body, raw) of each final answer; raw is its bytes
    as sent (head and body, without the 1xx answers before it)."""
    out, pos, i = [], 0, 0
    while pos < len(buf) and i < len(methods):
        start = pos
        try:
            line, headers, pos = parse_head(buf, pos)
            status = int(line.split(" ", 2)[1])
        except (ParseError, ValueError, IndexError):
            break
        if 100 <= status < 200:
            continue
        try:
            if methods[i] == "HEAD" or status in (204, 304):
                body = b""
            else:
                body, pos = read_body(buf, pos, headers, True)
        except (ParseError, ValueError):
            break
        out.append((status, headers, body, bytes(buf[start:pos])))
        i += 1
    return out


# ---------------------------------------------------------------- checking

class Checker:
    def __init__(self, contract, report_path, record_path=None, check=True):
        self.contract = contract
        self.check_answers = check
        self.routes = Routes()
        self.report = open(report_path, "a", encoding="utf-8")
        self.recording = open(record_path, "a", encoding="utf-8", buffering=1) if record_path else None
        self.lock = threading.Lock()
        self.exchanges = 0
        self.violations = 0
        self.by_kind = {}
        self.recorded = 0
        self.unrecorded = 0

    def record(self, kind, violation=None, exchange=None):
        with self.lock:
            self.exchanges += 1
            self.by_kind[kind] = self.by_kind.get(kind, 0) + 1
            if violation:
                self.violations += 1
                self.report.write(json.dumps(dict(exchange, violation=violation)) + "\n")
                self.report.flush()

    def check(self, config, req, resp):
        method, target, qheaders, qbody = req
        status, headers, body, raw = resp
        path, _, query = target.partition("?")
        exchange = {"request": "%s %s" % (method, target[:300]), "status": status,
                    "headers": headers, "body": body[:1500].decode("utf-8", "replace")}
        spec_path, spec_method, kind = path, method, "api"
        on_path = [r for r in self.routes.get(config) if r.get("path") == path]
        if on_path:
            same = [r for r in on_path if str(r.get("method", "POST")).upper() == method]
            r = (same or on_path)[0]
            kind = "gateway-" + kind_of(r)
            spec_path = sample(STAND_INS[kind_of(r)])
            if same and method != "OPTIONS":
                spec_method = "POST"  # the stand-ins model every method as POST
        try:
            violation = self.validate(spec_path, spec_method, query, qheaders, status,
                                      headers, body) if self.check_answers else None
        except Exception as e:  # a crash of the checker is a violation too
            violation = "checker error: %r" % (e,)
        self.record(kind, violation, exchange)
        if self.recording is not None:
            self.keep(kind, spec_path, spec_method, query, qheaders, status, raw)

    def keep(self, kind, path, method, query, qheaders, status, raw):
        """One exchange for tests/contract/prism_replay.py: the request's
        method, path (a gateway route's stand-in), query and headers, and
        the answer's bytes as idemd sent them."""
        if len(raw) > RECORD_MAX:
            with self.lock:
                self.unrecorded += 1
            return
        line = json.dumps({"kind": kind, "method": method, "path": path, "query": query,
                           "headers": qheaders, "status": status,
                           "raw": base64.b64encode(raw).decode()})
        with self.lock:
            self.recorded += 1
            self.recording.write(line + "\n")

    def validate(self, path, method, query, qheaders, status, headers, body):
        c = self.contract
        tmpl = c.template(path)
        op = c.spec["paths"][tmpl].get(method.lower()) if tmpl else None
        hmap = {}
        for k, v in headers:
            hmap[k] = hmap[k] + ", " + v if k in hmap else v
        ctype = hmap.get("content-type", "")
        anywhere = c.spec.get("x-any-path-responses", {}).get(str(status))
        if anywhere is not None:
            return self.validate_plain(c.deref(anywhere), status, hmap, ctype, body)
        if op is None:
            # not in the document: only idemd's 404 / 405 may come back
            if status not in (404, 405):
                return "%s %s is not in the document but answered %d" % (method, path, status)
            if ctype.split(";")[0].strip() != "application/problem+json":
                return "a %d outside the document is %r, not a problem" % (status, ctype)
            if method == "HEAD":  # the problem's headers, without its body
                return "405 without Allow" if status == 405 and "allow" not in hmap else None
            try:
                problem = json.loads(body)
            except ValueError:
                return "a %d outside the document has no JSON body" % status
            errs = [e.message for e in c.problem.iter_errors(problem)]
            if errs:
                return "a %d outside the document is not a Problem: %s" % (status, "; ".join(errs))
            if status == 405 and "allow" not in hmap:
                return "405 without Allow"
            return None
        # openapi-core resolves dot segments; idemd takes them as a value
        path = "/".join("%2E" * len(seg) if seg in (".", "..") else seg
                        for seg in path.split("/"))
        rq = MockRequest(HOST_URL, method.lower(), path, args=None,
                         headers={k: v for k, v in qheaders})
        rs = MockResponse(body, status_code=status, headers=hmap, content_type=ctype)
        try:
            c.openapi.validate_response(rq, rs)
        except Exception as e:  # openapi-core's validation errors
            detail, cause = [], e
            while cause is not None:
                subs = getattr(cause, "schema_errors", None) or []
                for sub in subs:
                    detail.append("%s at /%s" % (sub.message[:300], "/".join(map(str, sub.path))))
                if not subs:
                    detail.append("%s: %s" % (type(cause).__name__, str(cause)[:300]))
                cause = cause.__cause__
            return "%s %s -> %d: %s" % (method, tmpl, status, " | ".join(detail)[:1500])
        robj = c.response_object(tmpl, method, status) or {}
        own = False
        if robj.get("x-passthrough-headers") and \
                ctype.split(";")[0].strip() == "application/problem+json":
            # idemd's own problem on a gateway route: a Problem, and only
            # the headers the document declares (the upstream's answers
            # carry whatever headers the route stores)
            try:
                doc = json.loads(body)
            except ValueError:
                doc = None
            if isinstance(doc, dict) and str(doc.get("type", "")).startswith(
                    "https://idemd.dev/problems/"):
                own = True
                errs = [e.message for e in c.own_gateway_problem.iter_errors(doc)]
                if errs:
                    return "%s %s -> %d: idemd's problem is not a Problem: %s" % (
                        method, tmpl, status, "; ".join(errs)[:800])
        if own or not robj.get("x-passthrough-headers"):
            declared = {k.lower() for k in robj.get("headers", {})}
            extra = sorted(set(hmap) - declared - TRANSPORT_HEADERS)
            if extra:
                return "%s %s -> %d sends undeclared header(s): %s" % (
                    method, tmpl, status, ", ".join(extra))
        return None


    def validate_plain(self, robj, status, hmap, ctype, body):
        """An answer any path may give (x-any-path-responses): its media
        type, a Problem body and its declared headers."""
        c = self.contract
        media = ctype.split(";")[0].strip()
        content = robj.get("content", {})
        wrong = []
        if robj.get("x-from-http-library") and media in ("", "text/html"):
            # the HTTP library's own page (documented as such): nothing of
            # idemd's in it to check
            return None
        if media not in content:
            wrong.append("its Content-Type is %r, documented: %s" % (ctype, ", ".join(content)))
        elif media == "application/problem+json":
            try:
                doc = json.loads(body)
                errs = [e.message for e in c.problem.iter_errors(doc)]
                if errs:
                    wrong.append("not a Problem: %s" % "; ".join(errs))
            except ValueError:
                wrong.append("no JSON body")
        for name, h in robj.get("headers", {}).items():
            if c.deref(h).get("required") and name.lower() not in hmap:
                wrong.append("no %s header" % name)
        return "a %d (any path): %s" % (status, "; ".join(wrong)) if wrong else None


# ---------------------------------------------------------------- relaying

class Relay:
    def __init__(self, checker, upstream, config):
        self.checker = checker
        self.upstream = upstream
        self.config = config
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self.accept_loop, daemon=True).start()

    def accept_loop(self):
        while True:
            try:
                cs, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(cs,), daemon=True).start()

    def serve(self, cs):
        try:
            us = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
        except OSError:
            # as if the port were closed: reset, no answer
            cs.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            cs.close()
            return
        us.settimeout(None)
        up, down = bytearray(), bytearray()
        open_in = {cs: True, us: True}
        peer = {cs: us, us: cs}
        log = {cs: up, us: down}
        idle_since = None
        # epoll, not select(): the relays of a stage's parallel modules
        # hold more than 1,024 descriptors at once
        sel = selectors.DefaultSelector()
        for s in (cs, us):
            sel.register(s, selectors.EVENT_READ)

        def no_more_from(s):
            if open_in[s]:
                open_in[s] = False
                sel.unregister(s)
        try:
            while open_in[us]:
                r = [key.fileobj for key, _ in sel.select(1.0)]
                if not r and not open_in[cs]:
                    # the client is gone; an upstream that keeps the
                    # connection open has nothing more to say to it
                    idle_since = idle_since or time.monotonic()
                    if time.monotonic() - idle_since > 10:
                        break
                for s in r:
                    try:
                        d = s.recv(65536)
                    except OSError:
                        d = b""
                    if d:
                        log[s] += d
                        try:
                            peer[s].sendall(d)
                        except OSError:
                            no_more_from(s)
                    else:
                        no_more_from(s)
                        try:
                            peer[s].shutdown(socket.SHUT_WR)
                        except OSError:
                            pass
                if not open_in[us]:
                    break
        finally:
            sel.close()
            for s in (cs, us):
                try:
                    s.close()
                except OSError:
                    pass
        reqs = parse_requests(up)
        resps = parse_responses(down, [r[0] for r in reqs])
        for req, resp in zip(reqs, resps):
            self.checker.check(self.config, req, resp)


class Control(BaseHTTPRequestHandler):
    relays = {}
    lock = threading.Lock()
    checker = None

    def log_message(self, *a):
        pass

    def reply(self, obj):
        data = json.dumps(obj).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        n = int(self.headers.get("Content-Length", "0"))
        req = json.loads(self.rfile.read(n) or b"{}")
        if self.path == "/register":
            key = (int(req["upstream"]), req.get("config"))
            with self.lock:
                relay = self.relays.get(key)
                if relay is None:
                    relay = self.relays[key] = Relay(self.checker, key[0], key[1])
            self.reply({"port": relay.port})
        else:
            self.send_error(404)

    def do_GET(self):
        c = self.checker
        with c.lock:
            self.reply({"exchanges": c.exchanges, "violations": c.violations,
                        "by_kind": c.by_kind, "relays": len(self.relays),
                        "recorded": c.recorded, "unrecorded": c.unrecorded})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spec", required=True)
    ap.add_argument("--report", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--record", help="append every exchange to this file (JSON lines) "
                    "for tests/contract/prism_replay.py")
    ap.add_argument("--no-check", action="store_true",
                    help="only relay and record (--record), validating nothing")
    a = ap.parse_args()
    Control.checker = Checker(Contract(a.spec), a.report, a.record, not a.no_check)
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Control)
    srv.daemon_threads = True
    with open(a.port_file + ".tmp", "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(a.port_file + ".tmp", a.port_file)
    print("contract proxy: control port %d" % srv.server_address[1], file=sys.stderr)
    srv.serve_forever()


if __name__ == "__main__":
    main()
