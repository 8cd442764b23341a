"""The asyncio client: native asyncio streams (no threads), one connection
per call (``Connection: close``), the same methods as :class:`idemd.Client`
as coroutines."""

from __future__ import annotations

import asyncio
import inspect
import ssl
from types import TracebackType
from typing import (Any, AsyncIterator, Awaitable, Callable, Dict, List, Mapping, Optional,
                    Sequence, Tuple, Type, TypeVar, Union)

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

MAX_HEAD = 64 * 1024


def _parse_response(data: bytes) -> HttpResponse:
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        raise TransportError("incomplete HTTP answer (%d bytes)" % len(data))
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise TransportError("not an HTTP answer: %r" % lines[0][:80])
    headers: Dict[str, str] = {}
    for ln in lines[1:]:
        name, _, value = ln.partition(":")
        k = name.strip().lower()
        v = value.strip()
        headers[k] = headers[k] + ", " + v if k in headers else v
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = b""
        while True:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                break
            body += rest[:size]
            rest = rest[size + 2:]
    elif "content-length" in headers:
        n = int(headers["content-length"])
        if len(rest) < n:
            raise TransportError("answer cut short: %d of %d body bytes" % (len(rest), n))
        body = rest[:n]
    else:
        body = rest
    return HttpResponse(int(parts[1]), headers, body)


class AsyncClient:
    """The asyncio client. Same constructor and methods as
    :class:`idemd.Client`; every method is a coroutine, ``claim`` is an
    async context manager and ``consume`` accepts async handlers."""

    def __init__(self, base_url: str, api_key: Optional[str] = None, *,
                 timeout: float = 10.0, retry: Retry = Retry(),
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        self.endpoint = Endpoint.parse(base_url)
        self.base_url = base_url
        self.api_key = api_key
        self.timeout = timeout
        self.retry = retry
        self.ssl_context = ssl_context

    async def _exchange(self, call: Call[Any]) -> HttpResponse:
        ep = self.endpoint
        ctx: Optional[ssl.SSLContext] = None
        if ep.scheme == "https":
            ctx = self.ssl_context or ssl.create_default_context()
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(ep.host, ep.port, ssl=ctx), self.timeout)
        except (OSError, asyncio.TimeoutError) as e:
            raise TransportError("cannot connect to %s:%d: %s" % (ep.host, ep.port, e or "timeout"),
                                 sent=False) from e
        try:
            host = ep.host if ep.port in (80, 443) else "%s:%d" % (ep.host, ep.port)
            body = call.encoded_body()
            headers = _core.request_headers(call, self.api_key, host)
            headers["Connection"] = "close"
            if body is not None or call.method in ("POST", "PUT"):
                headers["Content-Length"] = str(len(body or b""))
            head = "%s %s HTTP/1.1\r\n" % (call.method, ep.prefix + call.path)
            head += "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n"
            try:
                writer.write(head.encode("latin-1") + (body or b""))
                await writer.drain()
            except (BrokenPipeError, ConnectionResetError):
                pass  # idemd may answer (413, 503) and close before reading the body
            data = await asyncio.wait_for(reader.read(), self.timeout)
            return _parse_response(data)
        except (OSError, asyncio.TimeoutError, ValueError) as e:
            if isinstance(e, TransportError):
                raise
            raise TransportError("%s %s: %s" % (call.method, call.path, e or type(e).__name__)) from e
        finally:
            writer.close()
            try:
                await writer.wait_closed()
            except (OSError, ssl.SSLError):
                pass

    async def _send(self, call: Call[T], retry: Optional[Retry] = None) -> T:
        policy = retry or self.retry
        tries = 0
        while True:
            tries += 1
            try:
                return call.result(await self._exchange(call))
            except IdemdError as err:
                if tries >= policy.attempts or not call.retryable(policy, err):
                    raise
                await asyncio.sleep(policy.delay(tries, err))

    # ------------------------------------------------------------ tokens

    async def issue(self, operation: str, subject: str, *, ttl_seconds: Optional[int] = None) -> IssuedToken:
        r: IssuedToken = await self._send(_core.issue(operation, subject, ttl_seconds, None))
        return r

    async def issue_many(self, operation: str, subject: str, count: int, *,
                         ttl_seconds: Optional[int] = None) -> List[IssuedToken]:
        r: Dict[str, List[IssuedToken]] = await self._send(
            _core.issue(operation, subject, ttl_seconds, count))
        return r["tokens"]

    async def introspect(self, token: str) -> TokenInfo:
        return await self._send(_core.introspect(token))

    async def revoke(self, token: str) -> None:
        await self._send(_core.revoke(token))

    async def claim_token(self, token: str, *, request: JSON = UNSET,
                          fingerprint: Optional[str] = None,
                          if_match: Union[int, str, None] = None,
                          wait: Optional[int] = None) -> Claimed:
        return await self._send(_core.claim_token(token, request, fingerprint, if_match, wait))

    async def complete_token(self, token: str, attempt: int, status: int = 200, body: JSON = UNSET, *,
                             headers: Optional[Mapping[str, str]] = None,
                             content: Optional[bytes] = None) -> CompleteResult:
        return await self._send(_core.complete_token(token, attempt, status, body, headers, content))

    async def release_token(self, token: str, attempt: int) -> ReleaseResult:
        return await self._send(_core.release_token(token, attempt))

    async def extend_token(self, token: str, attempt: int, *,
                     lease_seconds: Optional[int] = None) -> ExtendResult:
        """A new lease for the current ATTEMPT (at most, and by default, the
        operation's ``lease_seconds``); stale attempt → LeaseLostError."""
        return await self._send(_core.extend_token(token, attempt, lease_seconds))

    async def checkpoint_token(self, token: str, attempt: int, phase: str,
                         data: JSON = UNSET) -> CheckpointResult:
        """Leaves a recovery point (PHASE ``[a-z0-9._-]{1,64}``, DATA any
        JSON up to 64 KiB) that the next attempt gets in its claim."""
        return await self._send(_core.checkpoint_token(token, attempt, phase, data))

    # ------------------------------------------------------------ caller keys

    async def claim_key(self, operation: str, key: str, *, request: JSON = UNSET,
                        fingerprint: Optional[str] = None, subject: Optional[str] = None,
                        if_match: Union[int, str, None] = None,
                        wait: Optional[int] = None) -> Claimed:
        return await self._send(_core.claim_key(operation, key, request, fingerprint, subject,
                                                if_match, wait))

    async def complete_key(self, operation: str, key: str, attempt: int, status: int = 200,
                           body: JSON = UNSET, *, headers: Optional[Mapping[str, str]] = None,
                           content: Optional[bytes] = None) -> CompleteResult:
        return await self._send(_core.complete_key(operation, key, attempt, status, body,
                                                   headers, content))

    async def release_key(self, operation: str, key: str, attempt: int) -> ReleaseResult:
        return await self._send(_core.release_key(operation, key, attempt))

    async def get_key(self, operation: str, key: str) -> KeyRecord:
        return await self._send(_core.get_key(operation, key))

    async def claim_batch(self, operation: str,
                          items: Sequence[_core.BatchClaimInput]) -> List[BatchClaimResult]:
        return await self._send(_core.claim_batch(operation, items))

    async def complete_batch(self, operation: str,
                             items: Sequence[_core.BatchCompleteInput]) -> List[BatchCompleteResult]:
        return await self._send(_core.complete_batch(operation, items))

    async def extend_key(self, operation: str, key: str, attempt: int, *,
                   lease_seconds: Optional[int] = None) -> ExtendResult:
        """As :meth:`extend_token`, for a caller key."""
        return await self._send(_core.extend_key(operation, key, attempt, lease_seconds))

    async def checkpoint_key(self, operation: str, key: str, attempt: int, phase: str,
                       data: JSON = UNSET) -> CheckpointResult:
        """As :meth:`checkpoint_token`, for a caller key."""
        return await self._send(_core.checkpoint_key(operation, key, attempt, phase, data))

    # ------------------------------------------------------------ records

    async def get_record(self, record_id: str) -> Record:
        """A record by its 32-hex id (a claim's ``id``, a token's ``id``, the
        ``Idempotency-Key`` a gateway forwarded); unknown → RecordNotFoundError."""
        return await self._send(_core.get_record(record_id))

    async def record_events(self, record_id: str) -> List[RecordEvent]:
        """The record's audit trail, oldest first."""
        return await self._send(_core.record_events(record_id))

    async def list_records(self, *, operation: Optional[str] = None, state: Optional[str] = None,
                     subject: Optional[str] = None, older_than: Optional[int] = None,
                     limit: Optional[int] = None, cursor: Optional[str] = None) -> RecordPage:
        """One page of records, newest claim first; pass the page's
        ``next_cursor`` as ``cursor`` for the next (None: last page)."""
        return await self._send(_core.list_records(operation, state, subject, older_than, limit, cursor))

    async def iter_records(self, *, operation: Optional[str] = None, state: Optional[str] = None,
                           subject: Optional[str] = None, older_than: Optional[int] = None,
                           page_size: Optional[int] = None) -> AsyncIterator[RecordRow]:
        """Every record matching the filters, following the cursor page by page."""
        cursor: Optional[str] = None
        while True:
            page = await self.list_records(operation=operation, state=state, subject=subject,
                                           older_than=older_than, limit=page_size, cursor=cursor)
            for row in page["records"]:
                yield row
            cursor = page["next_cursor"]
            if cursor is None:
                return

    # ------------------------------------------------------------ versions, operations, health

    async def get_version(self, key: str) -> Version:
        return await self._send(_core.get_version(key))

    async def bump_version(self, key: str, if_match: Union[int, str]) -> int:
        return await self._send(_core.bump_version(key, if_match))

    async def put_operation(self, name: str, *, token_ttl_seconds: int, retention_seconds: int,
                            lease_seconds: int, version_key: Optional[str] = None,
                            require_version: Optional[bool] = None, **extra: Any) -> Operation:
        return await self._send(_core.put_operation(name, token_ttl_seconds, retention_seconds,
                                                    lease_seconds, version_key, require_version,
                                                    extra))

    async def get_operation(self, name: str) -> Operation:
        return await self._send(_core.get_operation(name))

    async def list_operations(self) -> List[Operation]:
        return await self._send(_core.list_operations())

    async def health(self) -> Health:
        return await self._send(_core.health())

    async def ready(self) -> Health:
        return await self._send(_core.ready(), _core.NO_RETRY)

    # ------------------------------------------------------------ helpers

    async def _drive(self, flow: Flow[T]) -> T:
        """Runs a helper's flow (idemd._flows) with awaits."""
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
                    sem = asyncio.Semaphore(max(1, step.concurrency))
                    value = await asyncio.gather(*(_run(c, sem) for c in step.calls))
                elif isinstance(step, Invoke):
                    value = step.fn(*step.args)
                    if inspect.isawaitable(value):
                        value = await value
                else:
                    value = await self._send(step)
            except BaseException as e:  # handed to the flow, which decides
                exc = e

    def claim(self, *, operation: Optional[str] = None, key: Optional[str] = None,
              token: Optional[str] = None, request: JSON = UNSET,
              fingerprint: Optional[str] = None, subject: Optional[str] = None,
              if_match: Union[int, str, None] = None, wait: Optional[int] = None,
              release_on: ReleaseOn = (Exception,)) -> "AsyncClaim":
        """``async with client.claim(operation=..., key=..., request=...) as c:``;
        see :meth:`idemd.Client.claim`. Cancellation releases the claim."""
        return AsyncClaim(self, Target(operation, key, token), release_on,
                          ClaimArgs(request, fingerprint, subject, if_match, wait))

    async def run_once(self, fn: Callable[["AsyncClaim"], Any], *,
                       operation: Optional[str] = None, key: Optional[str] = None,
                       token: Optional[str] = None, request: JSON = UNSET,
                       fingerprint: Optional[str] = None, subject: Optional[str] = None,
                       if_match: Union[int, str, None] = None, wait: Optional[int] = None,
                       release_on: ReleaseOn = (Exception,)) -> RunResult[Any]:
        """As :meth:`idemd.Client.run_once`; FN may be a coroutine function."""
        c = AsyncClaim(self, Target(operation, key, token), release_on,
                       ClaimArgs(request, fingerprint, subject, if_match, wait))
        return await self._drive(run_once_flow(c, c.args, fn))

    async def consume(self, operation: str, messages: Sequence[M], *,
                      key: Callable[[M], str],
                      handler: Callable[[M, BatchClaimResult], Union[Any, Awaitable[Any]]],
                      request: Optional[Callable[[M], Any]] = None,
                      fingerprint: Optional[Callable[[M], str]] = None,
                      subject: Optional[Callable[[M], str]] = None,
                      release_on: ReleaseOn = (Exception,),
                      concurrency: int = 8) -> List[MessageOutcome[M]]:
        """As :meth:`idemd.Client.consume`; HANDLER may be async, and up to
        CONCURRENCY handlers run at once. Cancellation releases every claim
        whose handler has not finished."""
        return await self._drive(consume_flow(ConsumeArgs(
            operation, messages, key, handler, request, fingerprint, subject, release_on,
            concurrency)))


async def _run(call: Invoke, sem: asyncio.Semaphore) -> Tuple[bool, Any]:
    async with sem:
        try:
            value = call.fn(*call.args)
            if inspect.isawaitable(value):
                value = await value
            return True, value
        except Exception as e:
            return False, e


class AsyncClaim(ClaimState):
    """A claim made by :meth:`AsyncClient.claim`; use it in ``async with``."""

    def __init__(self, client: AsyncClient, target: Target, release_on: ReleaseOn,
                 args: ClaimArgs) -> None:
        super().__init__(target, release_on)
        self._client = client
        self.args = args

    async def __aenter__(self) -> "AsyncClaim":
        claimed: Claimed = await self._client._send(claim_call(self.target, self.args))
        self.claimed = claimed
        return self

    async def __aexit__(self, exc_type: Optional[Type[BaseException]],
                        exc: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await self._client._drive(self.exit_flow(exc))

    async def complete(self, status: int = 200, body: JSON = None,
                       headers: Optional[Mapping[str, str]] = None, *,
                       content: Optional[bytes] = None) -> CompleteResult:
        """As :meth:`idemd.Claim.complete`."""
        r: CompleteResult = self.settle(await self._client._send(
            self.complete_call(Outcome(status, body, dict(headers) if headers else None, content))))
        return r

    async def release(self) -> ReleaseResult:
        r: ReleaseResult = self.settle(await self._client._send(self.release_call()))
        return r

    async def extend(self, lease_seconds: Optional[int] = None) -> ExtendResult:
        r: ExtendResult = await self._client._send(self.extend_call(lease_seconds))
        return r

    async def save_checkpoint(self, phase: str, data: JSON = UNSET) -> CheckpointResult:
        r: CheckpointResult = await self._client._send(self.checkpoint_call(phase, data))
        return r
