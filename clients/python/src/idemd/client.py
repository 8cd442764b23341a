"""The synchronous client (standard library only: http.client)."""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from types import TracebackType
from typing import (Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence,
                    Tuple, Type, TypeVar, Union)

from . import _core
from ._core import UNSET, Call, Endpoint, HttpResponse, Retry
from ._flows import (ClaimArgs, ClaimState, ConsumeArgs, Flow, Invoke, InvokeAll, M,
                     MessageOutcome, ReleaseOn, RunResult, Target, claim_call,
                     consume_flow, run_once_flow)
from .errors import IdemdError, TransportError
from .types import (BatchClaimResult, BatchCompleteItem, BatchCompleteResult,
                    CheckpointResult, Claimed, CompleteResult, ExtendResult,
                    Health, IssuedToken, JSON, KeyRecord, Operation, Outcome,
                    Record, RecordEvent, RecordPage, RecordRow, ReleaseResult,
                    StoredResponse, TokenInfo, Version)

T = TypeVar("T")
R = TypeVar("R")


class Client:
    """A client for one idemd endpoint and one tenant's API key.

    Thread-safe: every call opens its own connection. Calls answered 409
    ``request_in_progress``, 429 or 503 are retried per ``retry``
    (:class:`Retry`); every other refusal raises the
    :class:`~idemd.errors.IdemdError` subclass of its problem code.
    """

    def __init__(self, base_url: str, api_key: Optional[str] = None, *,
                 timeout: float = 10.0, retry: Retry = Retry(),
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self.endpoint = Endpoint.parse(base_url)
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = timeout
        self.retry = retry
        self.ssl_context = ssl_context

    # ------------------------------------------------------------ transport

    def _exchange(self, call: Call[Any]) -> HttpResponse:
        ep = self.endpoint
        conn: http.client.HTTPConnection
        if ep.scheme == "https":
            conn = http.client.HTTPSConnection(ep.host, ep.port, timeout=self.timeout,
                                               context=self.ssl_context)
        else:
            conn = http.client.HTTPConnection(ep.host, ep.port, timeout=self.timeout)
        host = ep.host if ep.port in (80, 443) else "%s:%d" % (ep.host, ep.port)
        try:
            try:
                conn.connect()
            except ConnectionRefusedError as e:
                raise TransportError("connection refused: %s" % e, sent=False) from e
            except (OSError, socket.timeout) as e:
                raise TransportError("cannot connect: %s" % e, sent=False) from e
            try:
                conn.request(call.method, ep.prefix + call.path, body=call.encoded_body(),
                             headers=_core.request_headers(call, self.api_key, host))
            except (BrokenPipeError, ConnectionResetError):
                pass  # idemd may answer (413, 503) and close before reading the body
            r = conn.getresponse()
            body = r.read()
            headers: Dict[str, str] = {}
            for k, v in r.getheaders():
                k = k.lower()
                headers[k] = headers[k] + ", " + v if k in headers else v
            return HttpResponse(r.status, headers, body)
        except (OSError, http.client.HTTPException) as e:
            if isinstance(e, TransportError):
                raise
            raise TransportError("%s %s: %s" % (call.method, call.path, e or type(e).__name__)) from e
        finally:
            conn.close()

    def _send(self, call: Call[T], retry: Optional[Retry] = None) -> T:
        policy = retry or self.retry
        tries = 0
        while True:
            tries += 1
            try:
                return call.result(self._exchange(call))
            except IdemdError as err:
                if tries >= policy.attempts or not call.retryable(policy, err):
                    raise
                time.sleep(policy.delay(tries, err))

    # ------------------------------------------------------------ tokens

    def issue(self, operation: str, subject: str, *, ttl_seconds: Optional[int] = None) -> IssuedToken:
        """Issues one token (``POST /v1/tokens``)."""
        r: IssuedToken = self._send(_core.issue(operation, subject, ttl_seconds, None))
        return r

    def issue_many(self, operation: str, subject: str, count: int, *,
                   ttl_seconds: Optional[int] = None) -> List[IssuedToken]:
        """Issues COUNT (1..100) distinct tokens in one call."""
        r: Dict[str, List[IssuedToken]] = self._send(_core.issue(operation, subject, ttl_seconds, count))
        return r["tokens"]

    def introspect(self, token: str) -> TokenInfo:
        return self._send(_core.introspect(token))

    def revoke(self, token: str) -> None:
        """Revokes an unused token (idempotent); in use → TokenInUseError."""
        self._send(_core.revoke(token))

    def claim_token(self, token: str, *, request: JSON = UNSET, fingerprint: Optional[str] = None,
                    if_match: Union[int, str, None] = None, wait: Optional[int] = None) -> Claimed:
        """Claims a token: ``replayed`` True with the stored ``response``, or
        a new ``attempt`` to complete or release. ``wait`` sends
        ``Prefer: wait=N`` (wait for an in-progress duplicate to finish)."""
        return self._send(_core.claim_token(token, request, fingerprint, if_match, wait))

    def complete_token(self, token: str, attempt: int, status: int = 200, body: JSON = UNSET, *,
                       headers: Optional[Mapping[str, str]] = None,
                       content: Optional[bytes] = None) -> CompleteResult:
        """Stores the outcome: ``body`` any JSON, or raw bytes in ``content``."""
        return self._send(_core.complete_token(token, attempt, status, body, headers, content))

    def release_token(self, token: str, attempt: int) -> ReleaseResult:
        return self._send(_core.release_token(token, attempt))

    def extend_token(self, token: str, attempt: int, *,
                     lease_seconds: Optional[int] = None) -> ExtendResult:
        """A new lease for the current ATTEMPT (at most, and by default, the
        operation's ``lease_seconds``); stale attempt → LeaseLostError."""
        return self._send(_core.extend_token(token, attempt, lease_seconds))

    def checkpoint_token(self, token: str, attempt: int, phase: str,
                         data: JSON = UNSET) -> CheckpointResult:
        """Leaves a recovery point (PHASE ``[a-z0-9._-]{1,64}``, DATA any
        JSON up to 64 KiB) that the next attempt gets in its claim."""
        return self._send(_core.checkpoint_token(token, attempt, phase, data))

    # ------------------------------------------------------------ caller keys

    def claim_key(self, operation: str, key: str, *, request: JSON = UNSET,
                  fingerprint: Optional[str] = None, subject: Optional[str] = None,
                  if_match: Union[int, str, None] = None, wait: Optional[int] = None) -> Claimed:
        """Claims a caller key under OPERATION (the key is percent-encoded)."""
        return self._send(_core.claim_key(operation, key, request, fingerprint, subject, if_match, wait))

    def complete_key(self, operation: str, key: str, attempt: int, status: int = 200,
                     body: JSON = UNSET, *, headers: Optional[Mapping[str, str]] = None,
                     content: Optional[bytes] = None) -> CompleteResult:
        return self._send(_core.complete_key(operation, key, attempt, status, body, headers, content))

    def release_key(self, operation: str, key: str, attempt: int) -> ReleaseResult:
        return self._send(_core.release_key(operation, key, attempt))

    def get_key(self, operation: str, key: str) -> KeyRecord:
        """Introspects a caller key's record; never claimed → RecordNotFoundError."""
        return self._send(_core.get_key(operation, key))

    def claim_batch(self, operation: str,
                    items: Sequence[_core.BatchClaimInput]) -> List[BatchClaimResult]:
        """Claims 1..500 distinct keys in one call; each result is what a
        single claim would have answered (check ``status``/``code``)."""
        return self._send(_core.claim_batch(operation, items))

    def complete_batch(self, operation: str,
                       items: Sequence[_core.BatchCompleteInput]) -> List[BatchCompleteResult]:
        """Completes 1..500 claimed keys in one call."""
        return self._send(_core.complete_batch(operation, items))

    def extend_key(self, operation: str, key: str, attempt: int, *,
                   lease_seconds: Optional[int] = None) -> ExtendResult:
        """As :meth:`extend_token`, for a caller key."""
        return self._send(_core.extend_key(operation, key, attempt, lease_seconds))

    def checkpoint_key(self, operation: str, key: str, attempt: int, phase: str,
                       data: JSON = UNSET) -> CheckpointResult:
        """As :meth:`checkpoint_token`, for a caller key."""
        return self._send(_core.checkpoint_key(operation, key, attempt, phase, data))

    # ------------------------------------------------------------ records

    def get_record(self, record_id: str) -> Record:
        """A record by its 32-hex id (a claim's ``id``, a token's ``id``, the
        ``Idempotency-Key`` a gateway forwarded); unknown → RecordNotFoundError."""
        return self._send(_core.get_record(record_id))

    def record_events(self, record_id: str) -> List[RecordEvent]:
        """The record's audit trail, oldest first."""
        return self._send(_core.record_events(record_id))

    def list_records(self, *, operation: Optional[str] = None, state: Optional[str] = None,
                     subject: Optional[str] = None, older_than: Optional[int] = None,
                     limit: Optional[int] = None, cursor: Optional[str] = None) -> RecordPage:
        """One page of records, newest claim first; pass the page's
        ``next_cursor`` as ``cursor`` for the next (None: last page)."""
        return self._send(_core.list_records(operation, state, subject, older_than, limit, cursor))

    def iter_records(self, *, operation: Optional[str] = None, state: Optional[str] = None,
                     subject: Optional[str] = None, older_than: Optional[int] = None,
                     page_size: Optional[int] = None) -> Iterator[RecordRow]:
        """Every record matching the filters, following the cursor page by page."""
        cursor: Optional[str] = None
        while True:
            page = self.list_records(operation=operation, state=state, subject=subject,
                                     older_than=older_than, limit=page_size, cursor=cursor)
            yield from page["records"]
            cursor = page["next_cursor"]
            if cursor is None:
                return

    # ------------------------------------------------------------ versions, operations, health

    def get_version(self, key: str) -> Version:
        return self._send(_core.get_version(key))

    def bump_version(self, key: str, if_match: Union[int, str]) -> int:
        """Bumps from IF_MATCH (an int or ``'"N"'``) to N+1; stale → VersionMismatchError."""
        return self._send(_core.bump_version(key, if_match))

    def put_operation(self, name: str, *, token_ttl_seconds: int, retention_seconds: int,
                      lease_seconds: int, version_key: Optional[str] = None,
                      require_version: Optional[bool] = None, **extra: Any) -> Operation:
        """Creates or replaces a policy; EXTRA passes newer policy fields."""
        return self._send(_core.put_operation(name, token_ttl_seconds, retention_seconds,
                                              lease_seconds, version_key, require_version, extra))

    def get_operation(self, name: str) -> Operation:
        return self._send(_core.get_operation(name))

    def list_operations(self) -> List[Operation]:
        return self._send(_core.list_operations())

    def health(self) -> Health:
        """``GET /healthz``."""
        return self._send(_core.health())

    def ready(self) -> Health:
        """``GET /readyz``: ``{"status":"ready"}`` or ``{"status":"not_ready","reason"}``."""
        return self._send(_core.ready(), _core.NO_RETRY)

    # ------------------------------------------------------------ helpers

    def _drive(self, flow: Flow[T]) -> T:
        """Runs a helper's flow (idemd._flows) with blocking calls."""
        value: Any = None
        exc: Optional[BaseException] = None
        while True:
            try:
                step = flow.throw(exc) if exc is not None else flow.send(value)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            value, exc = None, None
            try:
                if isinstance(step, InvokeAll):
                    value = [_run(c) for c in step.calls]
                elif isinstance(step, Invoke):
                    value = step.fn(*step.args)
                else:
                    value = self._send(step)
            except BaseException as e:  # handed to the flow, which decides
                exc = e

    def claim(self, *, operation: Optional[str] = None, key: Optional[str] = None,
              token: Optional[str] = None, request: JSON = UNSET,
              fingerprint: Optional[str] = None, subject: Optional[str] = None,
              if_match: Union[int, str, None] = None, wait: Optional[int] = None,
              release_on: ReleaseOn = (Exception,)) -> "Claim":
        """A claim as a context manager, by ``operation=`` and ``key=`` or by ``token=``::

            with client.claim(operation="order.create", key=key, request=payload) as c:
                if c.replayed:
                    return c.response            # done before: the stored outcome
                c.complete(201, {"order_id": make_order(payload)})   # stored now

        On entry the key is claimed (errors such as
        ``FingerprintMismatchError`` raise there). ``c.complete(...)`` and
        ``c.release()`` act at once and return idemd's answer. A block that
        ends without either: an exception in ``release_on`` (default any
        ``Exception``) releases the claim so that a retry may run it again,
        any other stores a 500 ``{"error": "<class name>"}`` as final (the
        exception is re-raised either way); a normal end stores 200 with no
        body.
        """
        return Claim(self, Target(operation, key, token), release_on,
                     ClaimArgs(request, fingerprint, subject, if_match, wait))

    def run_once(self, fn: Callable[["Claim"], R], *, operation: Optional[str] = None,
                 key: Optional[str] = None, token: Optional[str] = None,
                 request: JSON = UNSET, fingerprint: Optional[str] = None,
                 subject: Optional[str] = None, if_match: Union[int, str, None] = None,
                 wait: Optional[int] = None,
                 release_on: ReleaseOn = (Exception,)) -> RunResult[R]:
        """Runs ``fn(claim)`` at most once for the key (or token).

        FN's return value is stored: an :class:`Outcome`, or any JSON value
        as a 200 body. A duplicate gets the stored response and FN does not
        run (``result.replayed``). ``claim`` has the record's ``id``, the
        ``attempt``, ``checkpoint`` and ``extend``/``checkpoint`` calls.
        Exceptions as for :meth:`claim`."""
        c = Claim(self, Target(operation, key, token), release_on,
                  ClaimArgs(request, fingerprint, subject, if_match, wait))
        return self._drive(run_once_flow(c, c.args, fn))

    def consume(self, operation: str, messages: Sequence[M], *, key: Callable[[M], str],
                handler: Callable[[M, BatchClaimResult], Any],
                request: Optional[Callable[[M], Any]] = None,
                fingerprint: Optional[Callable[[M], str]] = None,
                subject: Optional[Callable[[M], str]] = None,
                release_on: ReleaseOn = (Exception,)) -> List[MessageOutcome[M]]:
        """Processes a batch of at-least-once messages exactly once each.

        Claims every message's key (``key(message)``) in one batch call,
        runs ``handler(message, claim)`` only for the new ones (``claim``:
        the item's :class:`BatchClaimResult`, with the record's ``id`` to
        forward downstream and the ``attempt``), stores their results in one
        batch completion, and releases those whose handler raised an
        instance of ``release_on`` (others store a 500 as final). Returns
        one :class:`MessageOutcome` per message, in order; a message whose
        key repeats within the batch shares the first one's outcome.
        """
        return self._drive(consume_flow(ConsumeArgs(operation, messages, key, handler, request,
                                                    fingerprint, subject, release_on)))


def _run(call: Invoke) -> Tuple[bool, Any]:
    try:
        return True, call.fn(*call.args)
    except Exception as e:
        return False, e


class Claim(ClaimState):
    """A claim made by :meth:`Client.claim`; use it in a ``with`` block."""

    def __init__(self, client: Client, target: Target, release_on: ReleaseOn,
                 args: ClaimArgs) -> None:
        super().__init__(target, release_on)
        self._client = client
        self.args = args

    def __enter__(self) -> "Claim":
        self.claimed = self._client._send(claim_call(self.target, self.args))
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        self._client._drive(self.exit_flow(exc))

    def complete(self, status: int = 200, body: JSON = None,
                 headers: Optional[Mapping[str, str]] = None, *,
                 content: Optional[bytes] = None) -> CompleteResult:
        """Stores the outcome now and returns idemd's answer (its ``response``
        is what duplicates get)."""
        r: CompleteResult = self.settle(self._client._send(
            self.complete_call(Outcome(status, body, dict(headers) if headers else None, content))))
        return r

    def release(self) -> ReleaseResult:
        """Gives the claim back now, so that a retry runs the work again."""
        r: ReleaseResult = self.settle(self._client._send(self.release_call()))
        return r

    def extend(self, lease_seconds: Optional[int] = None) -> ExtendResult:
        """A fresh lease for this attempt."""
        r: ExtendResult = self._client._send(self.extend_call(lease_seconds))
        return r

    def save_checkpoint(self, phase: str, data: JSON = UNSET) -> CheckpointResult:
        """Leaves a recovery point that the next attempt gets as ``checkpoint``."""
        r: CheckpointResult = self._client._send(self.checkpoint_call(phase, data))
        return r
