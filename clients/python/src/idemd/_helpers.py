"""Logic of the claim context manager and of the consumer helper that the
sync and the asyncio clients share (no I/O here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import (Any, Callable, Dict, Generic, List, Optional, Sequence,
                    Tuple, Type, TypeVar, Union)

from .errors import ERRORS, IdemdError
from .types import (BatchClaimItem, BatchClaimResult, Claimed, JSON, Outcome,
                    StoredResponse)

M = TypeVar("M")

ReleaseOn = Tuple[Type[BaseException], ...]


def as_outcome(value: Any) -> Outcome:
    """A handler's or body's return value as what to store: an
    :class:`Outcome` as it is, anything else as a 200 with that JSON body."""
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


class ClaimState:
    """The state of one claim made by the context manager."""

    def __init__(self, operation: Optional[str], key: Optional[str], token: Optional[str],
                 release_on: ReleaseOn) -> None:
        if token is None and (operation is None or key is None):
            raise ValueError("claim needs an operation and a key, or token=")
        if token is not None and (operation is not None or key is not None):
            raise ValueError("claim takes an operation and a key, or token=, not both")
        self.operation = operation
        self.key = key
        self.token = token
        self.release_on = release_on
        self.claimed: Optional[Claimed] = None
        self._outcome: Optional[Outcome] = None
        self._release = False
        self.result: Any = None
        """The completion's answer (``CompleteResult``) or the release's, after exit."""

    # What the body sees.
    @property
    def replayed(self) -> bool:
        """True when the key was already completed: ``response`` is the stored
        outcome and the work must not be done again."""
        return self.claimed is not None and self.claimed.replayed

    @property
    def response(self) -> Optional[StoredResponse]:
        """The stored response of a replay (None for a new claim)."""
        return self.claimed.response if self.claimed is not None else None

    @property
    def attempt(self) -> Optional[int]:
        return self.claimed.attempt if self.claimed is not None else None

    @property
    def id(self) -> Optional[str]:
        return self.claimed.id if self.claimed is not None else None

    def complete(self, status: int = 200, body: JSON = None,
                 headers: Optional[Dict[str, str]] = None, *,
                 content: Optional[bytes] = None) -> None:
        """Sets the outcome stored when the block ends normally."""
        self._check_live()
        self._outcome = Outcome(status, body, headers, content)

    def set_result(self, value: Any) -> None:
        """Sets the outcome from a value: an :class:`Outcome`, or a JSON body (200)."""
        self._check_live()
        self._outcome = as_outcome(value)

    def release(self) -> None:
        """Gives the claim back when the block ends (no exception needed)."""
        self._check_live()
        self._release = True

    def _check_live(self) -> None:
        if self.claimed is None:
            raise RuntimeError("not claimed yet: use the claim in a with block")
        if self.claimed.replayed:
            raise RuntimeError("this claim was replayed: the work was already done, "
                               "nothing to complete (check .replayed)")

    def exit_action(self, exc: Optional[BaseException]) -> Tuple[str, Optional[Outcome]]:
        """("none"|"release"|"complete", outcome) for how the block ended."""
        if self.claimed is None or self.claimed.replayed:
            return "none", None
        if exc is not None:
            if releases(exc, self.release_on):
                return "release", None
            return "complete", self._outcome or failure_outcome(exc)
        if self._release:
            return "release", None
        return "complete", self._outcome or Outcome(200, None)


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


KeyFn = Callable[[M], str]
OptFn = Optional[Callable[[M], Any]]


def batch_items(messages: Sequence[M], key: Callable[[M], str], request: OptFn[M],
                fingerprint: OptFn[M], subject: OptFn[M]) -> Tuple[List[str], List[BatchClaimItem], Dict[str, int]]:
    """Keys per message, the batch items (one per distinct key) and the
    index of the first message of each key."""
    keys: List[str] = []
    items: List[BatchClaimItem] = []
    first: Dict[str, int] = {}
    for i, m in enumerate(messages):
        k = key(m)
        if not isinstance(k, str):
            raise TypeError("the key function must return a str, got %r" % (k,))
        keys.append(k)
        if k in first:
            continue
        first[k] = i
        items.append(BatchClaimItem(
            k, fingerprint=fingerprint(m) if fingerprint else None,
            request=request(m) if request else None,
            subject=subject(m) if subject else None))
    return keys, items, first


def classify(message: M, res: BatchClaimResult) -> Optional[MessageOutcome[M]]:
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
    retry = res.status in (429, 503)
    return MessageOutcome(message, res.key, "rejected", error=err, status=res.status,
                          code=res.code, retry=retry)


def copy_for_duplicates(messages: Sequence[M], keys: List[str], first: Dict[str, int],
                        done: Dict[int, MessageOutcome[M]]) -> List[MessageOutcome[M]]:
    out: List[MessageOutcome[M]] = []
    for i, m in enumerate(messages):
        o = done[first[keys[i]]]
        if first[keys[i]] == i:
            out.append(o)
        else:
            out.append(MessageOutcome(m, o.key, o.outcome, o.result, o.response, o.error,
                                      o.status, o.code, o.retry, o.attempt))
    return out


Handler = Callable[[M], Any]
HandlerResult = Union[Outcome, JSON]
