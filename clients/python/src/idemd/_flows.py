"""The helpers' logic, written once for the sync and the asyncio client
(no I/O here): each helper is a generator that yields the steps it needs,
an API call (:class:`~idemd._core.Call`) or user code to run
(:class:`Invoke`, :class:`InvokeAll`), and receives their results (or has
their exceptions thrown into it). ``Client`` drives a flow with blocking
calls, ``AsyncClient`` with awaits: one logic, two thin transports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import (Any, Callable, Dict, Generator, Generic, List, Optional,
                    Sequence, Tuple, Type, TypeVar, Union)

from . import _core
from ._core import UNSET
from .errors import ERRORS, IdemdError
from .types import (BatchClaimItem, BatchClaimResult, BatchCompleteItem,
                    BatchCompleteResult, Claimed, JSON, Outcome,
                    StoredResponse)

M = TypeVar("M")
T = TypeVar("T")

ReleaseOn = Tuple[Type[BaseException], ...]


@dataclass
class Invoke:
    """Run ``fn(*args)`` (awaited when it returns an awaitable)."""
    fn: Callable[..., Any]
    args: Tuple[Any, ...] = ()


@dataclass
class InvokeAll:
    """Run every ``fn(*args)``; the result is one ``(ok, value_or_exception)``
    per call, in order. The asyncio driver runs up to ``concurrency`` at
    once; a non-``Exception`` (cancellation, KeyboardInterrupt) is raised."""
    calls: List[Invoke]
    concurrency: int = 1


Step = Union["_core.Call[Any]", Invoke, InvokeAll]
Flow = Generator[Step, Any, T]


def as_outcome(value: Any) -> Outcome:
    """A handler's return value as what to store: an :class:`Outcome` as it
    is, anything else as a 200 with that JSON body."""
    return value if isinstance(value, Outcome) else Outcome(200, value)


def failure_outcome(exc: BaseException) -> Outcome:
    """What is stored when an exception outside ``release_on`` ends the work:
    the failure is final, so duplicates get it too."""
    return Outcome(500, {"error": type(exc).__name__})


def releases(exc: BaseException, release_on: ReleaseOn) -> bool:
    """True when EXC gives the claim back. Exceptions that are not
    ``Exception`` (KeyboardInterrupt, SystemExit, asyncio cancellation)
    always release: the work was interrupted, not refused."""
    return isinstance(exc, release_on) or not isinstance(exc, Exception)


# ------------------------------------------------------------------ targets

@dataclass(frozen=True)
class Target:
    """What a helper claims: a caller key under an operation, or a token."""
    operation: Optional[str] = None
    key: Optional[str] = None
    token: Optional[str] = None

    def __post_init__(self) -> None:
        if self.token is None and (self.operation is None or self.key is None):
            raise ValueError("give operation= and key=, or token=")
        if self.token is not None and (self.operation is not None or self.key is not None):
            raise ValueError("give operation= and key=, or token=, not both")


@dataclass(frozen=True)
class ClaimArgs:
    request: JSON = UNSET
    fingerprint: Optional[str] = None
    subject: Optional[str] = None
    if_match: Union[int, str, None] = None
    wait: Optional[int] = None


def claim_call(t: Target, a: ClaimArgs) -> "_core.Call[Claimed]":
    if t.token is not None:
        if a.subject is not None:
            raise ValueError("a token carries its own subject: do not pass subject=")
        return _core.claim_token(t.token, a.request, a.fingerprint, a.if_match, a.wait)
    assert t.operation is not None and t.key is not None
    return _core.claim_key(t.operation, t.key, a.request, a.fingerprint, a.subject,
                           a.if_match, a.wait)


def complete_call(t: Target, attempt: int, o: Outcome) -> "_core.Call[Any]":
    if t.token is not None:
        return _core.complete_token(t.token, attempt, o.status, o.body, o.headers, o.content)
    assert t.operation is not None and t.key is not None
    return _core.complete_key(t.operation, t.key, attempt, o.status, o.body, o.headers, o.content)


def release_call(t: Target, attempt: int) -> "_core.Call[Any]":
    if t.token is not None:
        return _core.release_token(t.token, attempt)
    assert t.operation is not None and t.key is not None
    return _core.release_key(t.operation, t.key, attempt)


def extend_call(t: Target, attempt: int, lease_seconds: Optional[int]) -> "_core.Call[Any]":
    if t.token is not None:
        return _core.extend_token(t.token, attempt, lease_seconds)
    assert t.operation is not None and t.key is not None
    return _core.extend_key(t.operation, t.key, attempt, lease_seconds)


def checkpoint_call(t: Target, attempt: int, phase: str, data: JSON) -> "_core.Call[Any]":
    if t.token is not None:
        return _core.checkpoint_token(t.token, attempt, phase, data)
    assert t.operation is not None and t.key is not None
    return _core.checkpoint_key(t.operation, t.key, attempt, phase, data)


# ------------------------------------------------------------------ claim

class ClaimState:
    """One claim held by the claim context manager or handed to a
    :meth:`run_once` function: what the work sees and what it decided."""

    def __init__(self, target: Target, release_on: ReleaseOn) -> None:
        self.target = target
        self.release_on = release_on
        self.claimed: Optional[Claimed] = None
        self.settled = False
        self.result: Any = None
        """The answer of the completion or release, once sent."""

    @property
    def replayed(self) -> bool:
        """True when the key was already completed: ``response`` is the
        stored outcome and the work must not be done again."""
        return self.claimed is not None and self.claimed.replayed

    @property
    def response(self) -> Optional[StoredResponse]:
        """The stored response: a replay's, or the one :meth:`complete` stored."""
        if self.settled and isinstance(self.result, dict) and "response" in self.result:
            r: StoredResponse = self.result["response"]
            return r
        return self.claimed.response if self.claimed is not None else None

    @property
    def attempt(self) -> Optional[int]:
        return self.claimed.attempt if self.claimed is not None else None

    @property
    def id(self) -> Optional[str]:
        """The record's id: forward it downstream as the idempotency key."""
        return self.claimed.id if self.claimed is not None else None

    @property
    def checkpoint(self) -> JSON:
        """An earlier attempt's last checkpoint (resume from it), or None."""
        return self.claimed.checkpoint if self.claimed is not None else None

    def live_attempt(self) -> int:
        if self.claimed is None:
            raise RuntimeError("not claimed yet: use the claim in a with block")
        if self.claimed.replayed:
            raise RuntimeError("this claim was replayed: the work was already done, "
                               "nothing to complete (check .replayed)")
        if self.settled:
            raise RuntimeError("this claim was already completed or released")
        assert self.claimed.attempt is not None
        return self.claimed.attempt

    def complete_call(self, outcome: Outcome) -> "_core.Call[Any]":
        return complete_call(self.target, self.live_attempt(), outcome)

    def release_call(self) -> "_core.Call[Any]":
        return release_call(self.target, self.live_attempt())

    def extend_call(self, lease_seconds: Optional[int]) -> "_core.Call[Any]":
        return extend_call(self.target, self.live_attempt(), lease_seconds)

    def checkpoint_call(self, phase: str, data: JSON) -> "_core.Call[Any]":
        return checkpoint_call(self.target, self.live_attempt(), phase, data)

    def settle(self, result: Any) -> Any:
        self.settled, self.result = True, result
        return result

    def exit_flow(self, exc: Optional[BaseException]) -> Flow[None]:
        """How a block ends: nothing to do for a replay or a claim already
        completed or released; an exception in ``release_on`` (or not an
        ``Exception``) releases, any other stores a 500 as final; a normal
        end without a completion stores 200 with no body."""
        if self.claimed is None or self.claimed.replayed or self.settled:
            return
        if exc is not None and releases(exc, self.release_on):
            call = self.release_call()
        elif exc is not None:
            call = self.complete_call(failure_outcome(exc))
        else:
            call = self.complete_call(Outcome(200, None))
        try:
            self.settle((yield call))
        except IdemdError:
            if exc is None:
                raise  # the work's result was not stored: the caller must know
            # the block's own exception is the one that matters; the lease runs out


@dataclass
class RunResult(Generic[T]):
    """What :meth:`Client.run_once` did.

    ``replayed``: the key was completed before and the function did not run;
    ``response`` is the stored response (the replayed one, or the one just
    stored); ``value`` the function's return value (None when replayed);
    ``claim`` idemd's answer to the claim (``id``, ``attempt``)."""
    replayed: bool
    response: StoredResponse
    claim: Claimed
    value: Optional[T] = None


S = TypeVar("S", bound=ClaimState)


def run_once_flow(state: S, args: ClaimArgs, fn: Callable[[S], Any]) -> Flow[RunResult[Any]]:
    claimed: Claimed = yield claim_call(state.target, args)
    state.claimed = claimed
    if claimed.replayed:
        assert claimed.response is not None
        return RunResult(True, claimed.response, claimed)
    try:
        value = yield Invoke(fn, (state,))
    except BaseException as exc:
        yield from state.exit_flow(exc)
        raise
    if not state.settled:
        state.settle((yield state.complete_call(as_outcome(value))))
    response = state.response
    assert response is not None
    return RunResult(False, response, claimed, value)


# ------------------------------------------------------------------ consumer

@dataclass
class MessageOutcome(Generic[M]):
    """What happened to one message of :meth:`Client.consume`.

    ``outcome`` is one of:

    * ``"processed"``: new; the handler ran and its result (``result``) is
      stored;
    * ``"replayed"``: already done before; the handler did not run and
      ``response`` is the stored outcome;
    * ``"in_progress"``: another consumer holds it right now; the handler
      did not run (redeliver later);
    * ``"failed"``: the handler raised ``error``; the claim was released
      (``retry`` True) or, for an exception outside ``release_on``, the
      failure was stored (``retry`` False);
    * ``"rejected"``: idemd refused the claim (``status``/``code``, e.g. 422
      ``fingerprint_mismatch``, 400 ``idempotency_key_invalid``);
    * ``"lost"``: the handler ran but its result was not stored (``code``
      ``lease_lost``: the lease ran out and another consumer took over).

    ``retry`` says whether the message should be delivered again
    (``in_progress`` and released failures); ack the others.
    """
    message: M
    key: str
    outcome: str
    result: Any = None
    response: Optional[StoredResponse] = None
    error: Optional[BaseException] = None
    status: Optional[int] = None
    code: Optional[str] = None
    retry: bool = False
    attempt: Optional[int] = None


OptFn = Optional[Callable[[M], Any]]


@dataclass
class ConsumeArgs(Generic[M]):
    operation: str
    messages: Sequence[M]
    key: Callable[[M], str]
    handler: Callable[[M, BatchClaimResult], Any]
    request: OptFn[M] = None
    fingerprint: OptFn[M] = None
    subject: OptFn[M] = None
    release_on: ReleaseOn = (Exception,)
    concurrency: int = 1
    done: Dict[int, MessageOutcome[M]] = field(default_factory=dict)


def _batch_items(a: ConsumeArgs[M]) -> Tuple[List[str], List[BatchClaimItem], Dict[str, int]]:
    """Keys per message, the batch items (one per distinct key) and the
    index of the first message of each key."""
    keys: List[str] = []
    items: List[BatchClaimItem] = []
    first: Dict[str, int] = {}
    for i, m in enumerate(a.messages):
        k = a.key(m)
        if not isinstance(k, str):
            raise TypeError("the key function must return a str, got %r" % (k,))
        keys.append(k)
        if k in first:
            continue
        first[k] = i
        items.append(BatchClaimItem(
            k, fingerprint=a.fingerprint(m) if a.fingerprint else None,
            request=a.request(m) if a.request else None,
            subject=a.subject(m) if a.subject else None))
    return keys, items, first


def _classify(message: M, res: BatchClaimResult) -> Optional[MessageOutcome[M]]:
    """The outcome of a claim item that does not run the handler, or None (201)."""
    if res.status == 201:
        return None
    if res.status == 200:
        return MessageOutcome(message, res.key, "replayed", response=res.response, status=200)
    if res.code == "request_in_progress":
        return MessageOutcome(message, res.key, "in_progress", status=res.status,
                              code=res.code, retry=True)
    err = ERRORS.get(res.code or "", IdemdError)(res.status, res.code, "batch claim item refused",
                                                 problem=res.raw)
    return MessageOutcome(message, res.key, "rejected", error=err, status=res.status,
                          code=res.code, retry=res.status in (429, 503))


def consume_flow(a: ConsumeArgs[M]) -> Flow[List[MessageOutcome[M]]]:
    """One batch claim, the handler only for the new keys, one batch
    completion, a release per retryable failure."""
    if not a.messages:
        return []
    keys, items, first = _batch_items(a)
    claims: List[BatchClaimResult] = yield _core.claim_batch(a.operation, items)
    done = a.done
    todo: List[Tuple[int, BatchClaimResult]] = []
    for res in claims:
        i = first[res.key]
        o = _classify(a.messages[i], res)
        if o is None:
            todo.append((i, res))
        else:
            done[i] = o
    completions: List[BatchCompleteItem] = []
    pending: Dict[str, MessageOutcome[M]] = {}
    releases_due: List[Tuple[str, int]] = []
    try:
        ran = yield InvokeAll([Invoke(a.handler, (a.messages[i], res)) for i, res in todo],
                              a.concurrency)
    except BaseException:
        for i, res in todo:
            yield from _release_ignoring(a.operation, res.key, res.attempt or 0)
        raise
    for (i, res), (ok, value) in zip(todo, ran):
        m, attempt = a.messages[i], res.attempt or 0
        if not ok and releases(value, a.release_on):
            done[i] = MessageOutcome(m, res.key, "failed", error=value, retry=True,
                                     attempt=attempt, status=res.status)
            releases_due.append((res.key, attempt))
            continue
        if ok:
            outcome = as_outcome(value)
            done[i] = MessageOutcome(m, res.key, "processed", result=value, attempt=attempt,
                                     status=res.status)
        else:
            outcome = failure_outcome(value)
            done[i] = MessageOutcome(m, res.key, "failed", error=value, attempt=attempt,
                                     status=res.status)
        completions.append(BatchCompleteItem(res.key, attempt, outcome))
        pending[res.key] = done[i]
    for key, attempt in releases_due:
        yield from _release_ignoring(a.operation, key, attempt)
    if completions:
        stored: List[BatchCompleteResult] = yield _core.complete_batch(a.operation, completions)
        for r in stored:
            if not r.ok and r.key in pending:
                o = pending[r.key]
                o.outcome, o.status, o.code, o.retry = "lost", r.status, r.code, False
    out: List[MessageOutcome[M]] = []
    for i, m in enumerate(a.messages):
        o = done[first[keys[i]]]
        if first[keys[i]] == i:
            out.append(o)
        else:
            out.append(MessageOutcome(m, o.key, o.outcome, o.result, o.response, o.error,
                                      o.status, o.code, o.retry, o.attempt))
    return out


def _release_ignoring(operation: str, key: str, attempt: int) -> Flow[None]:
    try:
        yield _core.release_key(operation, key, attempt)
    except IdemdError:
        pass  # the lease will run out; the next delivery takes over
