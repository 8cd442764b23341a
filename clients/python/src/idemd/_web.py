"""What the web integrations share (no I/O, no framework here): the caller
scope of a key, the request's identity (its fingerprint), the check that a
guarded operation's subject can be filled, and the flow of one idempotent
request (claim, replay or run the handler, store or release), driven by
the ASGI and Django middlewares through a client's ``_drive``."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import (Any, Callable, Dict, List, Mapping, Optional, Sequence,
                    Tuple, Union)

from ._core import check_key
from ._flows import Flow, Invoke
from .errors import IdemdError, IdempotencyKeyInvalidError, TransportError
from .types import Claimed, Operation, Outcome, StoredResponse, response_bytes

DEFAULT_SCOPE_HEADERS: Tuple[str, ...] = ("authorization", "cookie")
"""The headers that tell callers apart, as on the gateway's routes."""

DEFAULT_METHODS: Tuple[str, ...] = ("POST", "PUT", "PATCH", "DELETE")

# Never stored with an answer (idemd refuses them in a completion).
_UNSTORED = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
             "proxy-connection", "te", "trailer", "trailers", "transfer-encoding", "upgrade",
             "content-length", "set-cookie", "date", "idempotent-replayed"}


def caller_scope(headers: Mapping[str, str], names: Sequence[str]) -> str:
    """32 hex digits naming the caller: SHA-256 over ``name "\\n" value
    "\\n"`` for each of NAMES (lower-case, in order; an absent header has
    an empty value). Every idemd middleware computes the same."""
    h = hashlib.sha256()
    for name in names:
        n = name.lower()
        h.update(n.encode("latin-1") + b"\n" + headers.get(n, "").encode("latin-1") + b"\n")
    return h.hexdigest()[:32]


def scoped_key(key: str, headers: Mapping[str, str], names: Sequence[str]) -> str:
    """KEY within the caller's scope: ``<caller_scope>:<key>``, so that two
    callers sending the same key are two records (NAMES empty: KEY as it
    is). Over 255 bytes → 400 ``idempotency_key_invalid``."""
    check_key(key)
    if not names:
        return key
    scoped = caller_scope(headers, names) + ":" + key
    if len(scoped) > 255:
        raise IdempotencyKeyInvalidError(
            400, "idempotency_key_invalid",
            "a key is at most 222 bytes when scoped per caller (got %d)" % len(key))
    return scoped


def header_key(value: Optional[str]) -> Optional[str]:
    """An Idempotency-Key value: bare, or a quoted sf-string."""
    if value is None:
        return None
    v = value.strip()
    if len(v) >= 2 and v[0] == '"' and v[-1] == '"':
        v = v[1:-1].replace('\\"', '"').replace("\\\\", "\\")
    return v or None


def request_identity(method: str, path: str, query: str, body: bytes) -> Dict[str, Any]:
    """What a middleware sends as the claim's ``request``: method, path,
    query and the body, parsed when it is JSON (one fingerprint rule: the
    same JSON meaning is the same request), else as text, or its SHA-256
    when it is not UTF-8."""
    ident: Dict[str, Any] = {"method": method, "path": path, "query": query}
    if not body:
        ident["body"] = None
        return ident
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        ident["body_sha256"] = hashlib.sha256(body).hexdigest()
        return ident
    try:
        ident["json"] = json.loads(text)
    except ValueError:
        ident["body"] = text
    return ident


def guarded_without_subject(policy: Operation, has_subject: bool) -> Optional[str]:
    """The refusal of a middleware that can never fill a guarded
    operation's subject, or None when it can."""
    vk = policy.get("version_key")
    if has_subject or not isinstance(vk, str) or "{subject}" not in vk:
        return None
    return ("idemd: operation %s guards the version counter %s, and this middleware has no "
            "subject: pass subject= (a function of the request returning the caller's user "
            "id, from the principal, a header or a path parameter), or use by=\"token\" "
            "(a token carries its subject)" % (policy.get("name"), vk))


@dataclass
class WebRequest:
    """A request as the integrations see it; ``native`` is the framework's
    own (an ASGI scope, a Django HttpRequest), ``path_params`` the route's
    parameters where the framework resolves them first (Django)."""
    method: str
    path: str
    query: str
    headers: Dict[str, str]  # lower-case names, repeated values joined with ", "
    body: bytes
    native: Any = None
    path_params: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class WebResponse:
    status: int
    headers: List[Tuple[str, str]]
    body: bytes


@dataclass
class Options:
    """How a middleware makes requests idempotent (see docs/clients/python.md)."""
    operation: Optional[str] = None
    by: str = "key"
    header: str = "Idempotency-Key"
    subject: Optional[Callable[[WebRequest], Optional[str]]] = None
    scope_headers: Sequence[str] = DEFAULT_SCOPE_HEADERS
    paths: Optional[Sequence[str]] = None
    methods: Sequence[str] = DEFAULT_METHODS
    required: bool = True
    wait: Optional[int] = None
    max_body: int = 1 << 20
    release: Callable[[int], bool] = lambda status: status >= 500

    def __post_init__(self) -> None:
        if self.by not in ("key", "token"):
            raise ValueError('by must be "key" or "token"')
        if self.by == "key" and not self.operation:
            raise ValueError('operation= is required with by="key"')
        self.methods = tuple(m.upper() for m in self.methods)
        self.scope_headers = tuple(h.lower() for h in self.scope_headers)

    def applies(self, method: str, path: str) -> bool:
        return method.upper() in self.methods and (self.paths is None or path in self.paths)

    def refusal(self, policy: Optional[Operation]) -> Optional[str]:
        if self.by != "key" or policy is None:
            return None
        return guarded_without_subject(policy, self.subject is not None)


def problem(status: int, code: str, detail: str,
            headers: Sequence[Tuple[str, str]] = ()) -> WebResponse:
    body = {"type": "https://idemd.dev/problems/" + code, "title": _TITLES.get(status, "Error"),
            "status": status, "detail": detail, "code": code}
    return WebResponse(status, [("content-type", "application/problem+json"),
                                ("cache-control", "no-store"), *headers],
                       json.dumps(body).encode("utf-8"))


_TITLES = {400: "Bad Request", 413: "Content Too Large", 503: "Service Unavailable"}


def error_response(err: IdemdError) -> WebResponse:
    """idemd's refusal as it is (its problem unchanged, Retry-After, ETag);
    idemd unreachable: 503 ``unavailable``."""
    if isinstance(err, TransportError) or err.status is None or not err.code:
        return problem(503, "unavailable", "idemd is unreachable: try again", [("retry-after", "1")])
    extra = [(h, err.headers[h]) for h in ("retry-after", "etag") if h in err.headers]
    if not err.problem:
        return problem(err.status, err.code, err.detail, extra)
    return WebResponse(err.status, [("content-type", "application/problem+json"),
                                    ("cache-control", "no-store"), *extra],
                       json.dumps(err.problem).encode("utf-8"))


def stored_response(resp: Optional[StoredResponse], replayed: bool) -> WebResponse:
    r: StoredResponse = resp or {"status": 200, "headers": {}}
    headers = [(k.lower(), v) for k, v in (r.get("headers") or {}).items()]
    if r.get("body") is not None and not any(k == "content-type" for k, _ in headers):
        headers.append(("content-type", "application/json"))
    headers.append(("idempotent-replayed", "true" if replayed else "false"))
    return WebResponse(r["status"], headers, response_bytes(r))


def outcome_of(resp: WebResponse) -> Outcome:
    """What to store of the handler's answer: its status, storable headers
    and body (parsed when it is JSON, else the bytes)."""
    headers: Dict[str, str] = {}
    for k, v in resp.headers:
        k = k.lower()
        if k in _UNSTORED or k.startswith("access-control-"):
            continue
        headers[k] = headers[k] + ", " + v if k in headers else v
    ctype = headers.get("content-type", "")
    if resp.body and ("/json" in ctype or "+json" in ctype):
        try:
            return Outcome(resp.status, json.loads(resp.body.decode("utf-8")), headers or None)
        except ValueError:
            pass
    return Outcome(resp.status, None, headers or None, resp.body if resp.body else None)


def _wait(opts: Options, req: WebRequest) -> Optional[int]:
    if opts.wait is not None:
        return opts.wait
    p = req.headers.get("prefer", "").strip()
    if p.startswith("wait="):
        try:
            n = int(p[5:].split(",")[0].strip())
        except ValueError:
            return None
        return n if n > 0 else None
    return None


def exchange_flow(opts: Options, req: WebRequest,
                  handler: Callable[[], Any]) -> Flow[WebResponse]:
    """One request through the middleware: the key from the header (scoped
    per caller), the claim (with the subject and the request's If-Match),
    then a replay, idemd's refusal unchanged, or the handler's answer,
    stored (or, for a status ``release`` names, released) and sent with
    ``Idempotent-Replayed: false``. HANDLER returns a :class:`WebResponse`
    (or an awaitable of one)."""
    from . import _core
    raw = header_key(req.headers.get(opts.header.lower()))
    if raw is None:
        if not opts.required:
            r: WebResponse = yield Invoke(handler)
            return r
        return problem(400, "idempotency_key_missing", "the %s header is required" % opts.header)
    if len(req.body) > opts.max_body:
        return problem(413, "payload_too_large", "the request body is over %d bytes" % opts.max_body)
    ident = request_identity(req.method, req.path, req.query, req.body)
    if_match = req.headers.get("if-match")
    try:
        subject = opts.subject(req) if opts.subject is not None else None
        if opts.by == "token":
            call = _core.claim_token(raw, ident, None, if_match, _wait(opts, req))
            key = raw
        else:
            assert opts.operation is not None
            key = scoped_key(raw, req.headers, opts.scope_headers)
            call = _core.claim_key(opts.operation, key, ident, None, subject or None, if_match,
                                   _wait(opts, req))
        call.retry_in_progress = False  # a duplicate in progress: 409 to the caller at once
        claimed: Claimed = yield call
    except IdemdError as err:
        return error_response(err)
    if claimed.replayed:
        return stored_response(claimed.response, True)
    assert claimed.attempt is not None
    if opts.by == "token":
        release = _core.release_token(raw, claimed.attempt)
    else:
        assert opts.operation is not None
        release = _core.release_key(opts.operation, key, claimed.attempt)
    try:
        resp = yield Invoke(handler)
    except BaseException:
        try:
            yield release
        except IdemdError:
            pass  # the lease runs out
        raise
    try:
        if opts.release(resp.status):
            yield release
        else:
            o = outcome_of(resp)
            if opts.by == "token":
                done = yield _core.complete_token(raw, claimed.attempt, o.status, o.body,
                                                  o.headers, o.content)
            else:
                assert opts.operation is not None
                done = yield _core.complete_key(opts.operation, key, claimed.attempt, o.status,
                                                o.body, o.headers, o.content)
            return stored_response(done.get("response"), False)  # what duplicates will get
    except IdemdError:
        pass  # not stored: the answer goes out anyway, a retry runs the handler again
    return WebResponse(resp.status, [*resp.headers, ("idempotent-replayed", "false")], resp.body)
