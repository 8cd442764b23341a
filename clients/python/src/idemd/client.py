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
from ._helpers import (ClaimState, M, MessageOutcome, ReleaseOn, as_outcome,
                       batch_items, classify, copy_for_duplicates,
                       failure_outcome, releases)
from .errors import IdemdError, TransportError
from .types import (BatchClaimResult, BatchCompleteItem, BatchCompleteResult,
                    CheckpointResult, Claimed, CompleteResult, ExtendResult,
                    Health, IssuedToken, JSON, KeyRecord, Operation, Outcome,
                    Record, RecordEvent, RecordPage, RecordRow, ReleaseResult,
                    StoredResponse, TokenInfo, Version)

T = TypeVar("T")


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
                if tries >= policy.attempts or not policy.retryable(err):
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

    def claim(self, operation: Optional[str] = None, key: Optional[str] = None, *,
              token: Optional[str] = None, request: JSON = UNSET,
              fingerprint: Optional[str] = None, subject: Optional[str] = None,
              if_match: Union[int, str, None] = None, wait: Optional[int] = None,
              release_on: ReleaseOn = (Exception,)) -> "Claim":
        """A claim as a context manager, by caller key or by ``token=``::

            with client.claim("order.create", key, request=payload) as c:
                if c.replayed:
                    return c.response        # done before: the stored outcome
                c.complete(201, {"order_id": make_order(payload)})

        On entry the key is claimed (errors such as
        ``FingerprintMismatchError`` raise there). On a normal exit the
        outcome set with ``c.complete(...)``/``c.set_result(...)`` is stored
        (nothing set: 200 with an empty body). An exception that is an
        instance of ``release_on`` (default: any ``Exception``) releases the
        claim so that a retry may run it again; any other exception stores
        what was set, else a 500 ``{"error": "<class name>"}``, as final.
        The exception is re-raised either way.
        """
        return Claim(self, operation, key, token, release_on,
                     request, fingerprint, subject, if_match, wait)

    def run_once(self, operation: Optional[str], key: Optional[str], fn: Callable[[], Any], *,
                 token: Optional[str] = None, request: JSON = UNSET,
                 fingerprint: Optional[str] = None, subject: Optional[str] = None,
                 if_match: Union[int, str, None] = None, wait: Optional[int] = None,
                 release_on: ReleaseOn = (Exception,)) -> StoredResponse:
        """Runs FN at most once for the key and returns the stored response.

        FN's return value is stored: an :class:`Outcome`, or any JSON value
        as a 200 body. A duplicate gets the stored response and FN does not
        run. Exceptions as for :meth:`claim`."""
        with self.claim(operation, key, token=token, request=request, fingerprint=fingerprint,
                        subject=subject, if_match=if_match, wait=wait, release_on=release_on) as c:
            if c.replayed:
                assert c.response is not None
                return c.response
            c.set_result(fn())
        assert c.result is not None
        return c.result["response"]  # type: ignore[no-any-return]

    def consume(self, operation: str, messages: Sequence[M], key: Callable[[M], str],
                handler: Callable[..., Any], *, request: Optional[Callable[[M], Any]] = None,
                fingerprint: Optional[Callable[[M], str]] = None,
                subject: Optional[Callable[[M], str]] = None,
                release_on: ReleaseOn = (Exception,),
                with_claim: bool = False) -> List[MessageOutcome[M]]:
        """Processes a batch of at-least-once messages exactly once each.

        Claims every message's key (``key(message)``) in one batch call,
        runs ``handler(message)`` only for the new ones, stores their
        results in one batch completion, and releases those whose handler
        raised an instance of ``release_on`` (others store a 500 as final).
        Returns one :class:`MessageOutcome` per message, in order; a message
        whose key repeats within the batch shares the first one's outcome.

        With ``with_claim=True`` the handler is called as
        ``handler(message, claim)``: ``claim`` is the message's
        :class:`BatchClaimResult` (``id``, the record's id, to forward as the
        downstream idempotency key; ``attempt`` for extend and checkpoint;
        ``checkpoint`` left by an earlier attempt).
        """
        if not messages:
            return []
        keys, items, first = batch_items(messages, key, request, fingerprint, subject)
        claims = self.claim_batch(operation, items)
        done: Dict[int, MessageOutcome[M]] = {}
        todo: List[Tuple[int, BatchClaimResult]] = []
        for res in claims:
            i = first[res.key]
            o = classify(messages[i], res)
            if o is None:
                todo.append((i, res))
            else:
                done[i] = o
        completions: List[BatchCompleteItem] = []
        pending: Dict[str, MessageOutcome[M]] = {}
        try:
            for n, (i, res) in enumerate(todo):
                m = messages[i]
                attempt = res.attempt or 0
                try:
                    value = handler(m, res) if with_claim else handler(m)
                except BaseException as exc:
                    if releases(exc, release_on):
                        done[i] = MessageOutcome(m, res.key, "failed", error=exc, retry=True,
                                                 attempt=attempt, status=res.status)
                        self._release_quietly(operation, res.key, attempt)
                        if not isinstance(exc, Exception):
                            raise
                        continue
                    outcome = failure_outcome(exc)
                    done[i] = MessageOutcome(m, res.key, "failed", error=exc, attempt=attempt,
                                             status=res.status)
                else:
                    outcome = as_outcome(value)
                    done[i] = MessageOutcome(m, res.key, "processed", result=value,
                                             attempt=attempt, status=res.status)
                completions.append(BatchCompleteItem(res.key, attempt, outcome))
                pending[res.key] = done[i]
        except BaseException:
            for i, res in todo:
                if i not in done:
                    self._release_quietly(operation, res.key, res.attempt or 0)
            self._complete_all(operation, completions, pending)
            raise
        self._complete_all(operation, completions, pending)
        return copy_for_duplicates(messages, keys, first, done)

    def _complete_all(self, operation: str, completions: List[BatchCompleteItem],
                      pending: Dict[str, MessageOutcome[Any]]) -> None:
        if not completions:
            return
        for r in self.complete_batch(operation, completions):
            if not r.ok and r.key in pending:
                o = pending[r.key]
                o.outcome, o.status, o.code, o.retry = "lost", r.status, r.code, False

    def _release_quietly(self, operation: str, key: str, attempt: int) -> None:
        try:
            self.release_key(operation, key, attempt)
        except IdemdError:
            pass  # the lease will run out; the next delivery takes over



class Claim(ClaimState):
    """A claim made by :meth:`Client.claim`; use it in a ``with`` block."""

    def __init__(self, client: Client, operation: Optional[str], key: Optional[str],
                 token: Optional[str], release_on: ReleaseOn, request: JSON,
                 fingerprint: Optional[str], subject: Optional[str],
                 if_match: Union[int, str, None], wait: Optional[int]) -> None:
        super().__init__(operation, key, token, release_on)
        self._client = client
        self._args = (request, fingerprint, subject, if_match, wait)

    def __enter__(self) -> "Claim":
        request, fingerprint, subject, if_match, wait = self._args
        c = self._client
        if self.token is not None:
            self.claimed = c.claim_token(self.token, request=request, fingerprint=fingerprint,
                                         if_match=if_match, wait=wait)
        else:
            assert self.operation is not None and self.key is not None
            self.claimed = c.claim_key(self.operation, self.key, request=request,
                                       fingerprint=fingerprint, subject=subject,
                                       if_match=if_match, wait=wait)
        return self

    def __exit__(self, exc_type: Optional[Type[BaseException]], exc: Optional[BaseException],
                 tb: Optional[TracebackType]) -> None:
        action, outcome = self.exit_action(exc)
        if action == "none":
            return
        assert self.claimed is not None and self.claimed.attempt is not None
        attempt = self.claimed.attempt
        c = self._client
        try:
            if action == "release":
                if self.token is not None:
                    self.result = c.release_token(self.token, attempt)
                else:
                    assert self.operation is not None and self.key is not None
                    self.result = c.release_key(self.operation, self.key, attempt)
            else:
                assert outcome is not None
                if self.token is not None:
                    self.result = c.complete_token(self.token, attempt, outcome.status,
                                                   outcome.body, headers=outcome.headers,
                                                   content=outcome.content)
                else:
                    assert self.operation is not None and self.key is not None
                    self.result = c.complete_key(self.operation, self.key, attempt, outcome.status,
                                                 outcome.body, headers=outcome.headers,
                                                 content=outcome.content)
        except IdemdError:
            if exc is None:
                raise  # the work's result was not stored: the caller must know
            # the block's own exception is the one that matters; the lease runs out
