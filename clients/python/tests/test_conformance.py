"""The clients' conformance suite (clients/conformance/*.json, format in
its README.md), run against the Python client: one test per scenario."""

import base64
import glob
import json
import os
import re
import secrets
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

import idemd
from idemd import ERRORS, IdemdError, Outcome, TransportError

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.environ.get("IDEMD_SOURCE_DIR") or os.path.join(HERE, "..", "..", "..")
DIR = os.path.join(SOURCE, "clients", "conformance")
FILES = sorted(glob.glob(os.path.join(DIR, "*.json")))

SCENARIO_FIELDS = {"name", "description", "clients", "steps"}
STEP_FIELDS = {"op", "args", "client", "stub", "expect", "save", "background", "await", "note"}
EXPECT_FIELDS = {"result", "error", "requests", "sent", "min_elapsed_ms", "max_elapsed_ms"}
CLIENT_FIELDS = {"server", "api_key", "retry"}


class ScenarioError(AssertionError):
    pass


# ------------------------------------------------------------------ stub server

class Stub:
    """An HTTP server answering from a per-step list, recording requests."""

    def __init__(self):
        self.lock = threading.Lock()
        self.answers = []
        self.requests = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _handle(self):
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                with stub.lock:
                    stub.requests.append({
                        "method": self.command, "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body})
                    if stub.answers:
                        a = stub.answers.pop(0) if len(stub.answers) > 1 else stub.answers[0]
                    else:
                        a = {"status": 599, "body_text": "the scenario gave the stub no answer"}
                status = a["status"]
                headers = dict(a.get("headers") or {})
                if "body" in a:
                    payload = json.dumps(a["body"]).encode()
                    ctype = "application/problem+json" if status >= 400 else "application/json"
                elif "body_text" in a:
                    payload = a["body_text"].encode()
                    ctype = "text/plain"
                else:
                    payload, ctype = b"", None
                self.send_response(status)
                if ctype and not any(k.lower() == "content-type" for k in headers):
                    self.send_header("Content-Type", ctype)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def arm(self, answers):
        with self.lock:
            self.answers = list(answers or [])
            self.requests = []

    def taken(self):
        with self.lock:
            return list(self.requests)

    def close(self):
        self.server.shutdown()
        self.server.server_close()


# ------------------------------------------------------------------ patterns and variables

VAR = re.compile(r"\$\{([A-Za-z0-9_.]+)\}")


def expand(value, env):
    if isinstance(value, str):
        m = VAR.fullmatch(value)
        if m:
            return lookup(env, m.group(1))

        def text(mo):
            v = lookup(env, mo.group(1))
            if isinstance(v, str):
                return v
            if isinstance(v, bool):
                return "true" if v else "false"
            if isinstance(v, (int, float)):
                return str(v)
            return json.dumps(v, separators=(",", ":"))
        return VAR.sub(text, value)
    if isinstance(value, list):
        return [expand(v, env) for v in value]
    if isinstance(value, dict):
        return {k: expand(v, env) for k, v in value.items()}
    return value


def lookup(env, name):
    if name not in env:
        raise ScenarioError("undefined variable ${%s}" % name)
    return env[name]


def at_path(value, path):
    cur = value
    for part in path.split("."):
        if isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        elif isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            raise ScenarioError("save: no %r in %s" % (path, json.dumps(value)[:500]))
    return cur


def is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def deep_eq(a, b):
    if is_num(a) and is_num(b):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(deep_eq(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(deep_eq(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


TYPES = {
    "string": lambda v: isinstance(v, str),
    "number": is_num,
    "integer": lambda v: is_num(v) and float(v).is_integer(),
    "boolean": lambda v: isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "null": lambda v: v is None,
}


def match(pattern, actual, where="$"):
    """None when ACTUAL matches PATTERN, else a description of the first mismatch."""
    if isinstance(pattern, dict) and len(pattern) == 1 and next(iter(pattern)).startswith("$"):
        op, arg = next(iter(pattern.items()))
        ok = {
            "$type": lambda: TYPES[arg](actual),
            "$regex": lambda: isinstance(actual, str) and re.search(arg, actual) is not None,
            "$gte": lambda: is_num(actual) and actual >= arg,
            "$lte": lambda: is_num(actual) and actual <= arg,
            "$len": lambda: (isinstance(actual, list) and len(actual) == arg) or
                            (isinstance(actual, str) and len(actual.encode()) == arg),
            "$eq": lambda: deep_eq(arg, actual),
            "$not_eq": lambda: not deep_eq(arg, actual),
            "$absent": lambda: actual is None,
        }.get(op)
        if ok is None:
            raise ScenarioError("unknown operator %s" % op)
        return None if ok() else "%s: %s does not satisfy %s" % (where, json.dumps(actual), json.dumps(pattern))
    if isinstance(pattern, dict):
        if not isinstance(actual, dict):
            return "%s: expected an object, got %s" % (where, json.dumps(actual))
        for k, p in pattern.items():
            if isinstance(p, dict) and p == {"$absent": True}:
                if actual.get(k) is not None:
                    return "%s.%s: expected absent, got %s" % (where, k, json.dumps(actual[k]))
                continue
            if k not in actual:
                return "%s.%s: missing (have %s)" % (where, k, sorted(actual))
            d = match(p, actual[k], "%s.%s" % (where, k))
            if d:
                return d
        return None
    if isinstance(pattern, list):
        if not isinstance(actual, list) or len(actual) != len(pattern):
            return "%s: expected an array of %d, got %s" % (where, len(pattern), json.dumps(actual)[:300])
        for i, (p, a) in enumerate(zip(pattern, actual)):
            d = match(p, a, "%s[%d]" % (where, i))
            if d:
                return d
        return None
    if deep_eq(pattern, actual):
        return None
    return "%s: expected %s, got %s" % (where, json.dumps(pattern), json.dumps(actual))


# ------------------------------------------------------------------ ops

class Retryable(Exception):
    """The handler's retryable failure (the claim helper releases)."""


class Final(Exception):
    """The handler's final failure (the claim helper stores a 500)."""


def opt(args, *names):
    return {n: args[n] for n in names if n in args}


def claimed(c):
    d = dict(c.raw)
    d["replayed"] = bool(c.replayed)
    return d


def outcome_args(a):
    kw = {}
    if "headers" in a:
        kw["headers"] = a["headers"]
    if "body_base64" in a:
        kw["content"] = base64.b64decode(a["body_base64"])
    return kw


def make_handler(spec, calls):
    spec = spec or {}

    def handler(*_):
        calls.append(1)
        if spec.get("fail") == "release":
            raise Retryable("conformance: retryable failure")
        if spec.get("fail") == "final":
            raise Final("conformance: final failure")
        return Outcome(spec.get("status", 200), spec.get("body"), spec.get("headers"))
    return handler


def run_op(c, op, a):
    if op == "sleep":
        time.sleep(a["ms"] / 1000.0)
        return None
    if op == "put_operation":
        rest = {k: v for k, v in a.items() if k != "name"}
        return c.put_operation(a["name"], **rest)
    if op == "get_operation":
        return c.get_operation(a["name"])
    if op == "list_operations":
        return {"operations": c.list_operations()}
    if op == "issue":
        return c.issue(a["operation"], a["subject"], **opt(a, "ttl_seconds"))
    if op == "issue_many":
        return {"tokens": c.issue_many(a["operation"], a["subject"], a["count"], **opt(a, "ttl_seconds"))}
    if op == "introspect":
        return c.introspect(a["token"])
    if op == "revoke":
        return c.revoke(a["token"])
    if op == "claim_token":
        return claimed(c.claim_token(a["token"], **opt(a, "request", "fingerprint", "if_match", "wait")))
    if op == "complete_token":
        return c.complete_token(a["token"], a.get("attempt"), a.get("status", 200),
                                a.get("body", idemd.UNSET), **outcome_args(a))
    if op == "release_token":
        return c.release_token(a["token"], a.get("attempt"))
    if op == "extend_token":
        return c.extend_token(a["token"], a.get("attempt"), **opt(a, "lease_seconds"))
    if op == "checkpoint_token":
        return c.checkpoint_token(a["token"], a.get("attempt"), a["phase"], a.get("data", idemd.UNSET))
    if op == "claim_key":
        return claimed(c.claim_key(a["operation"], a["key"],
                                   **opt(a, "request", "fingerprint", "subject", "if_match", "wait")))
    if op == "complete_key":
        return c.complete_key(a["operation"], a["key"], a.get("attempt"), a.get("status", 200),
                              a.get("body", idemd.UNSET), **outcome_args(a))
    if op == "release_key":
        return c.release_key(a["operation"], a["key"], a.get("attempt"))
    if op == "extend_key":
        return c.extend_key(a["operation"], a["key"], a.get("attempt"), **opt(a, "lease_seconds"))
    if op == "checkpoint_key":
        return c.checkpoint_key(a["operation"], a["key"], a.get("attempt"), a["phase"],
                                a.get("data", idemd.UNSET))
    if op == "get_key":
        return c.get_key(a["operation"], a["key"])
    if op == "claim_batch":
        return {"items": [r.raw for r in c.claim_batch(a["operation"], a["items"])]}
    if op == "complete_batch":
        return {"items": [r.raw for r in c.complete_batch(a["operation"], a["items"])]}
    if op == "get_version":
        return c.get_version(a["key"])
    if op == "bump_version":
        return {"version": c.bump_version(a["key"], a["if_match"])}
    if op == "get_record":
        return c.get_record(a["id"])
    if op == "record_events":
        return {"events": c.record_events(a["id"])}
    if op == "list_records":
        return c.list_records(**opt(a, "operation", "state", "subject", "older_than", "limit", "cursor"))
    if op == "scoped_key":
        names = a.get("scope_headers", ["authorization", "cookie"])
        return {"key": idemd.scoped_key(a["key"], a["headers"], names)}
    if op == "run_once":
        calls = []
        r = c.run_once(make_handler(a.get("handler"), calls), release_on=(Retryable,),
                       **opt(a, "operation", "key", "token", "request", "fingerprint", "subject",
                             "wait"))
        assert r.replayed == (not calls)
        return {"ran": bool(calls), "replayed": r.replayed, "response": r.response}
    if op == "consume":
        return consume(c, a)
    raise ScenarioError("unknown op %r" % op)


def consume(c, a):
    messages = a["messages"]
    spec = a.get("handler") or {}
    fail = {k: "release" for k in spec.get("release") or []}
    fail.update({k: "final" for k in spec.get("final") or []})
    handled = []
    lock = threading.Lock()

    def handler(m, claim):
        with lock:
            handled.append(m["key"])
        kind = fail.get(m["key"])
        if kind == "release":
            raise Retryable("conformance: retryable failure")
        if kind == "final":
            raise Final("conformance: final failure")
        return Outcome(200, {"handled": m["key"]})

    kw = {}
    if any("request" in m for m in messages):
        kw["request"] = lambda m: m.get("request")
    outs = c.consume(a["operation"], messages, key=lambda m: m["key"], handler=handler,
                     release_on=(Retryable,), **kw)
    rows = []
    for o in outs:
        row = {"key": o.key, "outcome": o.outcome, "retry": bool(o.retry),
               "status": o.status, "code": o.code}
        if o.response is not None:
            row["response"] = o.response
        rows.append(row)
    return {"handled": sorted(handled), "outcomes": rows}


# ------------------------------------------------------------------ the runner

def check_error(pattern, err, handler_errors):
    if pattern.get("handler"):
        if not isinstance(err, (Retryable, Final)):
            return "expected the handler's own error, got %r" % (err,)
        return None
    if not isinstance(err, IdemdError) or isinstance(err, TransportError):
        return "expected an IdemdError, got %r" % (err,)
    if "code" in pattern:
        code = pattern["code"]
        if code is None:
            if err.code is not None or type(err) is not IdemdError:
                return "expected a non-problem IdemdError, got %r" % (err,)
        else:
            cls = ERRORS.get(code)
            if cls is None:
                return "the client has no error class for %s" % code
            if not isinstance(err, cls) or err.code != code:
                return "expected %s (%s), got %s %r" % (cls.__name__, code, type(err).__name__, err)
    if "status" in pattern and err.status != pattern["status"]:
        return "expected status %s, got %s (%r)" % (pattern["status"], err.status, err)
    if "retry_after" in pattern and (err.retry_after is None or
                                     abs(err.retry_after - pattern["retry_after"]) > 1e-6):
        return "expected retry_after %s, got %s" % (pattern["retry_after"], err.retry_after)
    if "problem" in pattern:
        r = match(pattern["problem"], err.problem, "$.error.problem")
        if r:
            return r
    if "current_version" in pattern:
        cv = getattr(err, "current_version", None)
        if cv != pattern["current_version"]:
            return "expected current_version %s, got %s" % (pattern["current_version"], cv)
    return None


def run_scenario(path):
    with open(path, encoding="utf-8") as f:
        sc = json.load(f)
    name = os.path.basename(path)[:-5]
    extra = set(sc) - SCENARIO_FIELDS
    if extra:
        raise ScenarioError("unknown scenario fields %s" % sorted(extra))
    if sc.get("name") != name:
        raise ScenarioError("name %r is not the file's name %r" % (sc.get("name"), name))
    env = {"run": "c" + secrets.token_hex(6), "run_long_key": "k" * 256, "run_max_key": "k" * 255}
    configs = dict(sc.get("clients") or {})
    configs.setdefault("default", {})
    stub = None
    clients = {}
    for cname, cfg in configs.items():
        extra = set(cfg) - CLIENT_FIELDS
        if extra:
            raise ScenarioError("client %s: unknown fields %s" % (cname, sorted(extra)))
        server = cfg.get("server", "main")
        if server == "stub":
            if stub is None:
                stub = Stub()
            url = stub.url
        else:
            url = {"main": os.environ["IDEMD_URL"], "limited": os.environ["IDEMD_LIMITED_URL"]}[server]
        key = cfg.get("api_key", "acme")
        if isinstance(key, dict):
            key = key["literal"]
        else:
            key = {"acme": os.environ["IDEMD_API_KEY"], "globex": os.environ.get("IDEMD_API_KEY_2"),
                   "none": None}[key]
        r = dict({"attempts": 3, "base_delay_ms": 10, "max_delay_ms": 100}, **(cfg.get("retry") or {}))
        retry = idemd.Retry(attempts=r["attempts"], base_delay=r["base_delay_ms"] / 1000.0,
                            max_delay=r["max_delay_ms"] / 1000.0)
        clients[cname] = (idemd.Client(url, key, retry=retry), server == "stub")
    pool = ThreadPoolExecutor(max_workers=8)
    background = {}
    try:
        for i, step in enumerate(sc["steps"]):
            where = "step %d (%s)" % (i + 1, step.get("op") or "await " + str(step.get("await")))
            extra = set(step) - STEP_FIELDS
            if extra:
                raise ScenarioError("%s: unknown fields %s" % (where, sorted(extra)))
            expect = expand(step.get("expect") or {}, env)
            extra = set(expect) - EXPECT_FIELDS
            if extra:
                raise ScenarioError("%s: unknown expect fields %s" % (where, sorted(extra)))
            if "await" in step:
                fut, is_stub, t0 = background.pop(step["await"])
                outcome = wait_outcome(fut)
                elapsed = outcome[2] - t0
                taken = stub.taken() if is_stub else None
            else:
                client, is_stub = clients[step.get("client", "default")]
                args = expand(step.get("args") or {}, env)
                if is_stub:
                    stub.arm(expand(step.get("stub"), env))
                elif "stub" in step:
                    raise ScenarioError("%s: stub answers for a client that is not on the stub" % where)
                t0 = time.monotonic()

                def call(client=client, op=step["op"], args=args):
                    try:
                        r = run_op(client, op, args)
                        return ("ok", r, time.monotonic())
                    except Exception as e:  # noqa: BLE001 - checked against the scenario
                        return ("err", e, time.monotonic())

                if "background" in step:
                    background[step["background"]] = (pool.submit(call), is_stub, t0)
                    continue
                outcome = call()
                elapsed = outcome[2] - t0
                taken = stub.taken() if is_stub else None
            kind, value = outcome[0], outcome[1]
            if "error" in expect:
                if kind != "err":
                    raise ScenarioError("%s: expected an error %s, got result %s"
                                        % (where, expect["error"], json.dumps(value, default=str)[:500]))
                d = check_error(expect["error"], value, None)
                if d:
                    raise ScenarioError("%s: %s" % (where, d))
            else:
                if kind != "ok":
                    raise ScenarioError("%s: unexpected error %s: %r" % (where, type(value).__name__, value))
                result = json.loads(json.dumps(value))
                if "result" in expect:
                    d = match(expect["result"], result)
                    if d:
                        raise ScenarioError("%s: result %s\n  %s" % (where, json.dumps(result)[:800], d))
                for var, p in (step.get("save") or {}).items():
                    env[var] = at_path(result, p)
            if "requests" in expect or "sent" in expect:
                if taken is None:
                    raise ScenarioError("%s: requests/sent need a stub client" % where)
                if "requests" in expect and len(taken) != expect["requests"]:
                    raise ScenarioError("%s: expected %d requests, the stub got %d: %s"
                                        % (where, expect["requests"], len(taken),
                                           [(r["method"], r["path"]) for r in taken]))
                for j, p in enumerate(expect.get("sent") or []):
                    if j >= len(taken):
                        raise ScenarioError("%s: request %d was not sent" % (where, j + 1))
                    d = match(p, taken[j], "request[%d]" % j)
                    if d:
                        raise ScenarioError("%s: %s" % (where, d))
            ms = elapsed * 1000.0
            if "min_elapsed_ms" in expect and ms < expect["min_elapsed_ms"]:
                raise ScenarioError("%s: took %.0f ms, expected at least %s" % (where, ms, expect["min_elapsed_ms"]))
            if "max_elapsed_ms" in expect and ms > expect["max_elapsed_ms"]:
                raise ScenarioError("%s: took %.0f ms, expected at most %s" % (where, ms, expect["max_elapsed_ms"]))
        if background:
            raise ScenarioError("background calls never awaited: %s" % sorted(background))
    finally:
        pool.shutdown(wait=True)
        if stub is not None:
            stub.close()


def wait_outcome(fut: Future):
    return fut.result(timeout=120)


@pytest.mark.parametrize("path", FILES, ids=[os.path.basename(p)[:-5] for p in FILES])
def test_conformance(path):
    run_scenario(path)


def test_scenarios_found():
    assert len(FILES) >= 5, "no scenarios in %s" % DIR
