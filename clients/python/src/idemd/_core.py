"""What the sync and the asyncio clients share: the requests each API call
sends, how answers are read, and the retry policy."""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import (Any, Callable, Dict, FrozenSet, Generic, List, Mapping,
                    Optional, Sequence, Tuple, TypeVar, Union, cast)
from urllib.parse import quote, urlencode, urlsplit

from .errors import (IdemdError, IdempotencyKeyInvalidError, InvalidRequestError,
                     TransportError, error_for, parse_etag)
from .types import (BatchClaimItem, BatchClaimResult, BatchCompleteItem,
                    BatchCompleteResult, Claimed, CompleteResult, Health,
                    CheckpointResult, ExtendResult, IssuedToken, JSON,
                    KeyRecord, Operation, Outcome, Record, RecordEvent,
                    RecordPage, ReleaseResult, TokenInfo, Version)

T = TypeVar("T")

USER_AGENT = "idemd-python/0.2.0"


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""Marks an argument that was not given (``None`` is a JSON value)."""


@dataclass(frozen=True)
class Retry:
    """How failed calls are retried.

    ``attempts`` is the total number of tries (1: never retry). A call is
    retried when idemd answers 409 ``request_in_progress``, 429 or 503, or
    when the connection was refused (nothing was sent). The wait before try
    n+1 is the answer's ``Retry-After`` (0 when absent) plus a random
    jitter in [0, min(max_delay, base_delay * 2**(n-1))] (full jitter,
    exponential).
    """
    attempts: int = 4
    base_delay: float = 0.2
    max_delay: float = 5.0
    statuses: FrozenSet[int] = frozenset({429, 503})
    codes: FrozenSet[str] = frozenset({"request_in_progress"})

    def retryable(self, err: IdemdError) -> bool:
        if isinstance(err, TransportError):
            return not err.sent
        return err.status in self.statuses or (err.code is not None and err.code in self.codes)

    def delay(self, tries: int, err: IdemdError) -> float:
        """Seconds to wait after the TRIES-th failed try."""
        window = min(self.max_delay, self.base_delay * (2 ** (tries - 1)))
        return (err.retry_after or 0.0) + random.uniform(0.0, window)


NO_RETRY = Retry(attempts=1)


@dataclass
class HttpResponse:
    status: int
    headers: Dict[str, str]  # lower-case names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else None


@dataclass
class Call(Generic[T]):
    """One API call: what to send, which statuses are success, how to read them."""
    method: str
    path: str
    parse: Callable[[HttpResponse], T]
    body: Any = UNSET
    headers: Dict[str, str] = field(default_factory=dict)
    ok: Tuple[int, ...] = (200,)
    auth: bool = True
    retry_in_progress: bool = True
    """False: a 409 ``request_in_progress`` is answered at once, not retried
    (a middleware passes it on to its own caller)."""

    def retryable(self, policy: "Retry", err: IdemdError) -> bool:
        if not self.retry_in_progress and err.code == "request_in_progress":
            return False
        return policy.retryable(err)

    def encoded_body(self) -> Optional[bytes]:
        if self.body is UNSET:
            return None
        return json.dumps(self.body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def result(self, resp: HttpResponse) -> T:
        if resp.status not in self.ok:
            raise error_for(resp.status, resp.headers, resp.body)
        return self.parse(resp)


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    prefix: str

    @classmethod
    def parse(cls, base_url: str) -> "Endpoint":
        u = urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("base_url must be http://host[:port] or https://...: %r" % base_url)
        port = u.port or (443 if u.scheme == "https" else 80)
        return cls(u.scheme, u.hostname, port, u.path.rstrip("/"))


def seg(value: str) -> str:
    """One path segment, percent-encoded (keys may hold / % ? # :)."""
    if not isinstance(value, str) or not value:
        raise ValueError("a path segment must be a non-empty string")
    return quote(value, safe="")


def check_key(key: str) -> str:
    """A caller key idemd would accept (1..255 bytes of 0x21-0x7E), else the
    400 ``idempotency_key_invalid`` idemd would answer, raised before sending."""
    if not isinstance(key, str):
        raise IdempotencyKeyInvalidError(400, "idempotency_key_invalid",
                                         "a caller key must be a string")
    raw = key.encode("utf-8")
    if not 1 <= len(raw) <= 255:
        raise IdempotencyKeyInvalidError(400, "idempotency_key_invalid",
                                         "a caller key is 1..255 bytes, got %d" % len(raw))
    if any(b < 0x21 or b > 0x7E for b in raw):
        raise IdempotencyKeyInvalidError(400, "idempotency_key_invalid",
                                         "a caller key holds only visible ASCII (0x21-0x7E)")
    return key


def check_attempt(attempt: Any) -> int:
    """The attempt of a complete/release/extend/checkpoint, else the 400
    ``invalid_request`` idemd would answer, raised before sending."""
    if isinstance(attempt, bool) or not isinstance(attempt, int):
        raise InvalidRequestError(400, "invalid_request", "field attempt is required "
                                  "(the attempt of the claim being finished)")
    if not 1 <= attempt <= 2147483647:
        raise InvalidRequestError(400, "invalid_request",
                                  "field attempt must be an integer from 1 to 2147483647")
    return attempt


def request_headers(call: Call[Any], api_key: Optional[str], host: str) -> Dict[str, str]:
    h = {"Host": host, "User-Agent": USER_AGENT, "Accept": "application/json"}
    if call.auth and api_key:
        h["Authorization"] = "Bearer " + api_key
    if call.body is not UNSET:
        h["Content-Type"] = "application/json"
    h.update(call.headers)
    return h


def _json(resp: HttpResponse) -> Any:
    return resp.json()


def _none(resp: HttpResponse) -> None:
    return None


def _claimed(resp: HttpResponse) -> Claimed:
    c = Claimed.from_json(resp.json())
    if resp.headers.get("idempotent-replayed", "").lower() == "true":
        c.replayed = True
    return c


def _etag_str(v: Union[int, str]) -> str:
    return '"%d"' % v if isinstance(v, int) else v


def _claim_headers(if_match: Union[int, str, None], wait: Optional[int]) -> Dict[str, str]:
    h: Dict[str, str] = {}
    if if_match is not None:
        h["If-Match"] = _etag_str(if_match)
    if wait is not None:
        h["Prefer"] = "wait=%d" % wait
    return h


def _claim_body(request: JSON, fingerprint: Optional[str], subject: Optional[str]) -> Dict[str, Any]:
    b: Dict[str, Any] = {}
    if request is not UNSET:
        b["request"] = request
    if fingerprint is not None:
        b["fingerprint"] = fingerprint
    if subject is not None:
        b["subject"] = subject
    return b


def _outcome(attempt: int, status: int, body: JSON, headers: Optional[Mapping[str, str]],
             content: Optional[bytes]) -> Dict[str, Any]:
    o = Outcome(status, None if body is UNSET else body, dict(headers) if headers else None, content)
    b = {"attempt": check_attempt(attempt)}
    b.update(o.to_json())
    return b


# ------------------------------------------------------------------ calls

def issue(operation: str, subject: str, ttl_seconds: Optional[int], count: Optional[int]) -> Call[Any]:
    b: Dict[str, Any] = {"operation": operation, "subject": subject}
    if ttl_seconds is not None:
        b["ttl_seconds"] = ttl_seconds
    if count is not None:
        b["count"] = count
    return Call("POST", "/v1/tokens", _json, b, ok=(201,))


def introspect(token: str) -> Call[TokenInfo]:
    return Call("GET", "/v1/tokens/" + seg(token), cast(Callable[[HttpResponse], TokenInfo], _json))


def revoke(token: str) -> Call[None]:
    return Call("DELETE", "/v1/tokens/" + seg(token), _none, ok=(204,))


def claim_token(token: str, request: JSON, fingerprint: Optional[str],
                if_match: Union[int, str, None], wait: Optional[int]) -> Call[Claimed]:
    return Call("POST", "/v1/tokens/%s/claim" % seg(token), _claimed,
                _claim_body(request, fingerprint, None), _claim_headers(if_match, wait), ok=(200, 201))


def complete_token(token: str, attempt: int, status: int, body: JSON,
                   headers: Optional[Mapping[str, str]], content: Optional[bytes]) -> Call[CompleteResult]:
    return Call("POST", "/v1/tokens/%s/complete" % seg(token),
                cast(Callable[[HttpResponse], CompleteResult], _json),
                _outcome(attempt, status, body, headers, content))


def release_token(token: str, attempt: int) -> Call[ReleaseResult]:
    return Call("POST", "/v1/tokens/%s/release" % seg(token),
                cast(Callable[[HttpResponse], ReleaseResult], _json), {"attempt": check_attempt(attempt)})


def _extend_body(attempt: int, lease_seconds: Optional[int]) -> Dict[str, Any]:
    b: Dict[str, Any] = {"attempt": check_attempt(attempt)}
    if lease_seconds is not None:
        b["lease_seconds"] = lease_seconds
    return b


def _checkpoint_body(attempt: int, phase: str, data: JSON) -> Dict[str, Any]:
    b: Dict[str, Any] = {"attempt": check_attempt(attempt), "phase": phase}
    if data is not UNSET:
        b["data"] = data
    return b


def extend_token(token: str, attempt: int, lease_seconds: Optional[int]) -> Call[ExtendResult]:
    return Call("POST", "/v1/tokens/%s/extend" % seg(token),
                cast(Callable[[HttpResponse], ExtendResult], _json), _extend_body(attempt, lease_seconds))


def checkpoint_token(token: str, attempt: int, phase: str, data: JSON) -> Call[CheckpointResult]:
    return Call("POST", "/v1/tokens/%s/checkpoint" % seg(token),
                cast(Callable[[HttpResponse], CheckpointResult], _json),
                _checkpoint_body(attempt, phase, data))


def _key_path(operation: str, key: str) -> str:
    return "/v1/operations/%s/keys/%s" % (seg(operation), seg(check_key(key)))


def claim_key(operation: str, key: str, request: JSON, fingerprint: Optional[str],
              subject: Optional[str], if_match: Union[int, str, None],
              wait: Optional[int]) -> Call[Claimed]:
    return Call("POST", _key_path(operation, key) + "/claim", _claimed,
                _claim_body(request, fingerprint, subject), _claim_headers(if_match, wait), ok=(200, 201))


def complete_key(operation: str, key: str, attempt: int, status: int, body: JSON,
                 headers: Optional[Mapping[str, str]], content: Optional[bytes]) -> Call[CompleteResult]:
    return Call("POST", _key_path(operation, key) + "/complete",
                cast(Callable[[HttpResponse], CompleteResult], _json),
                _outcome(attempt, status, body, headers, content))


def release_key(operation: str, key: str, attempt: int) -> Call[ReleaseResult]:
    return Call("POST", _key_path(operation, key) + "/release",
                cast(Callable[[HttpResponse], ReleaseResult], _json), {"attempt": check_attempt(attempt)})


def get_key(operation: str, key: str) -> Call[KeyRecord]:
    return Call("GET", _key_path(operation, key), cast(Callable[[HttpResponse], KeyRecord], _json))


def extend_key(operation: str, key: str, attempt: int,
               lease_seconds: Optional[int]) -> Call[ExtendResult]:
    return Call("POST", _key_path(operation, key) + "/extend",
                cast(Callable[[HttpResponse], ExtendResult], _json), _extend_body(attempt, lease_seconds))


def checkpoint_key(operation: str, key: str, attempt: int, phase: str,
                   data: JSON) -> Call[CheckpointResult]:
    return Call("POST", _key_path(operation, key) + "/checkpoint",
                cast(Callable[[HttpResponse], CheckpointResult], _json),
                _checkpoint_body(attempt, phase, data))


def get_record(record_id: str) -> Call[Record]:
    return Call("GET", "/v1/records/" + seg(record_id), cast(Callable[[HttpResponse], Record], _json))


def record_events(record_id: str) -> Call[List[RecordEvent]]:
    def parse(resp: HttpResponse) -> List[RecordEvent]:
        return cast(List[RecordEvent], resp.json()["events"])
    return Call("GET", "/v1/records/%s/events" % seg(record_id), parse)


def list_records(operation: Optional[str], state: Optional[str], subject: Optional[str],
                 older_than: Optional[int], limit: Optional[int],
                 cursor: Optional[str]) -> Call[RecordPage]:
    q: List[Tuple[str, str]] = []
    for name, value in (("operation", operation), ("state", state), ("subject", subject),
                        ("older_than", older_than), ("limit", limit), ("cursor", cursor)):
        if value is not None:
            q.append((name, str(value)))
    path = "/v1/records" + ("?" + urlencode(q, quote_via=quote) if q else "")
    return Call("GET", path, cast(Callable[[HttpResponse], RecordPage], _json))


BatchClaimInput = Union[BatchClaimItem, Mapping[str, Any]]
BatchCompleteInput = Union[BatchCompleteItem, Mapping[str, Any]]


def claim_batch(operation: str, items: Sequence[BatchClaimInput]) -> Call[List[BatchClaimResult]]:
    def parse(resp: HttpResponse) -> List[BatchClaimResult]:
        return [BatchClaimResult.from_json(i) for i in resp.json()["items"]]
    body = [i.to_json() if isinstance(i, BatchClaimItem) else dict(i) for i in items]
    return Call("POST", "/v1/operations/%s/claims" % seg(operation), parse, {"items": body})


def complete_batch(operation: str, items: Sequence[BatchCompleteInput]) -> Call[List[BatchCompleteResult]]:
    def parse(resp: HttpResponse) -> List[BatchCompleteResult]:
        return [BatchCompleteResult.from_json(i) for i in resp.json()["items"]]
    body = [i.to_json() if isinstance(i, BatchCompleteItem) else dict(i) for i in items]
    return Call("POST", "/v1/operations/%s/completions" % seg(operation), parse, {"items": body})


def get_version(key: str) -> Call[Version]:
    return Call("GET", "/v1/versions/" + seg(key), cast(Callable[[HttpResponse], Version], _json))


def bump_version(key: str, if_match: Union[int, str]) -> Call[int]:
    def parse(resp: HttpResponse) -> int:
        return int(resp.json()["version"])
    return Call("POST", "/v1/versions/" + seg(key), parse, headers={"If-Match": _etag_str(if_match)})


def put_operation(name: str, token_ttl_seconds: int, retention_seconds: int, lease_seconds: int,
                  version_key: Optional[str], require_version: Optional[bool],
                  extra: Mapping[str, Any]) -> Call[Operation]:
    b: Dict[str, Any] = {"token_ttl_seconds": token_ttl_seconds,
                         "retention_seconds": retention_seconds, "lease_seconds": lease_seconds}
    if version_key is not None:
        b["version_key"] = version_key
    if require_version is not None:
        b["require_version"] = require_version
    b.update(extra)
    return Call("PUT", "/v1/operations/" + seg(name),
                cast(Callable[[HttpResponse], Operation], _json), b, ok=(200, 201))


def get_operation(name: str) -> Call[Operation]:
    return Call("GET", "/v1/operations/" + seg(name), cast(Callable[[HttpResponse], Operation], _json))


def list_operations() -> Call[List[Operation]]:
    def parse(resp: HttpResponse) -> List[Operation]:
        return cast(List[Operation], resp.json()["operations"])
    return Call("GET", "/v1/operations", parse)


def health() -> Call[Health]:
    return Call("GET", "/healthz", cast(Callable[[HttpResponse], Health], _json), auth=False)


def ready() -> Call[Health]:
    return Call("GET", "/readyz", cast(Callable[[HttpResponse], Health], _json), ok=(200, 503), auth=False)


def version_etag(resp_headers: Mapping[str, str]) -> Optional[int]:
    return parse_etag(resp_headers.get("etag"))
