"""Shapes of what idemd sends and takes (see api/openapi.yaml)."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, TypedDict

JSON = Any
"""Any JSON value (what ``json.loads`` returns)."""


class _StoredResponseBase(TypedDict):
    status: int
    headers: Dict[str, str]


class StoredResponse(_StoredResponseBase, total=False):
    """A stored outcome: ``body`` (JSON, ``None`` when empty) or
    ``body_base64`` (raw bytes, standard base64)."""
    body: JSON
    body_base64: str


def response_bytes(response: StoredResponse) -> bytes:
    """The stored body as bytes (JSON bodies compact, UTF-8; empty → b"")."""
    import json
    if "body_base64" in response:
        return base64.b64decode(response["body_base64"])
    body = response.get("body")
    if body is None:
        return b""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class _IssuedTokenBase(TypedDict):
    token: str
    id: str
    operation: str
    subject: str
    expires_at: str


class IssuedToken(_IssuedTokenBase, total=False):
    version: int


class _TokenInfoBase(TypedDict):
    id: str
    operation: str
    subject: str
    state: str
    expires_at: str
    attempt: int


class TokenInfo(_TokenInfoBase, total=False):
    lease_expires_at: str
    response: StoredResponse
    checkpoint: JSON


class _KeyRecordBase(TypedDict):
    id: str
    operation: str
    key: str
    state: str
    expires_at: str
    attempt: int


class KeyRecord(_KeyRecordBase, total=False):
    subject: str
    lease_expires_at: str
    response: StoredResponse
    checkpoint: JSON


class CompleteResult(TypedDict):
    state: str
    response: StoredResponse
    expires_at: str


class ReleaseResult(TypedDict):
    state: str
    attempt: int


class Version(TypedDict):
    key: str
    version: int


class _OperationBase(TypedDict):
    name: str
    token_ttl_seconds: int
    retention_seconds: int
    lease_seconds: int
    require_version: bool


class Operation(_OperationBase, total=False):
    version_key: str


class Checkpoint(TypedDict):
    """The latest recovery point of a record: ``phase``, ``data`` (JSON or
    None) and the ``attempt`` that left it."""
    phase: str
    data: JSON
    attempt: int


class ExtendResult(TypedDict, total=False):
    """The answer to extend: the new ``lease_expires_at`` (and the state)."""
    state: str
    attempt: int
    lease_expires_at: str


class CheckpointResult(TypedDict):
    state: str
    checkpoint: Checkpoint


class _RecordBase(TypedDict):
    id: str
    operation: str
    state: str
    expires_at: str
    attempt: int


class Record(_RecordBase, total=False):
    """``GET /v1/records/{id}``: as introspection plus ``operation``;
    ``state`` may be ``lease_expired``; ``replays`` counts the duplicates
    that got the stored response (it may lag by up to 10 s)."""
    subject: str
    key: str
    lease_expires_at: str
    response: StoredResponse
    checkpoint: Checkpoint
    replays: int


class _RecordRowBase(TypedDict):
    id: str
    operation: str
    state: str
    attempt: int
    claimed_at: str
    expires_at: str


class RecordRow(_RecordRowBase, total=False):
    """One row of ``GET /v1/records`` (no stored response)."""
    subject: str
    lease_expires_at: str


class RecordPage(TypedDict):
    """One page of ``GET /v1/records``: ``next_cursor`` None on the last."""
    records: List[RecordRow]
    next_cursor: Optional[str]


class _RecordEventBase(TypedDict):
    at: str
    event: str
    by: str


class RecordEvent(_RecordEventBase, total=False):
    """One audit event: ``claimed``, ``taken_over``, ``extended``,
    ``checkpoint`` (with ``phase``), ``completed`` (with ``status``),
    ``released``, ``revoked``, ``expired``."""
    attempt: int
    status: int
    phase: str


class Health(TypedDict, total=False):
    status: str
    reason: str


@dataclass
class Claimed:
    """The answer to a claim (token, caller key, or one batch item).

    ``replayed`` is True when the key was already completed: ``response``
    holds the stored outcome and the work must not run again. Otherwise the
    caller holds the lease for ``attempt`` until ``lease_expires_at`` and
    must complete or release it.
    """
    state: str
    replayed: bool
    attempt: Optional[int] = None
    lease_expires_at: Optional[str] = None
    id: Optional[str] = None
    response: Optional[StoredResponse] = None
    checkpoint: JSON = None
    raw: Dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "Claimed":
        return cls(state=str(obj.get("state")), replayed=obj.get("state") == "completed",
                   attempt=obj.get("attempt"), lease_expires_at=obj.get("lease_expires_at"),
                   id=obj.get("id"), response=obj.get("response"),
                   checkpoint=obj.get("checkpoint"), raw=dict(obj))


@dataclass
class BatchClaimItem:
    """One item of a batch claim (``request`` None: none sent)."""
    key: str
    fingerprint: Optional[str] = None
    request: JSON = None
    subject: Optional[str] = None

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"key": self.key}
        if self.fingerprint is not None:
            out["fingerprint"] = self.fingerprint
        if self.request is not None:
            out["request"] = self.request
        if self.subject is not None:
            out["subject"] = self.subject
        return out


@dataclass
class BatchClaimResult:
    """One item of a batch claim's answer: ``status`` and ``code`` are what
    a single claim of that key would have answered (201 new, 200 replay with
    ``response``, 409 ``request_in_progress``, 422, ...). ``id`` is the
    record's 32-hex id; a takeover (201 with ``attempt`` > 1) carries the
    last ``checkpoint`` left by an earlier attempt."""
    key: str
    status: int
    code: Optional[str] = None
    id: Optional[str] = None
    attempt: Optional[int] = None
    lease_expires_at: Optional[str] = None
    response: Optional[StoredResponse] = None
    checkpoint: Optional[Checkpoint] = None
    raw: Dict[str, Any] = field(default_factory=dict)

    @property
    def claimed(self) -> bool:
        return self.status == 201

    @property
    def replayed(self) -> bool:
        return self.status == 200

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "BatchClaimResult":
        return cls(key=str(obj.get("key")), status=int(obj.get("status", 0)),
                   code=obj.get("code"), id=obj.get("id"), attempt=obj.get("attempt"),
                   lease_expires_at=obj.get("lease_expires_at"),
                   response=obj.get("response"), checkpoint=obj.get("checkpoint"),
                   raw=dict(obj))


@dataclass
class Outcome:
    """What to store for a claim: an HTTP-like status, headers and a body
    (any JSON value, or raw bytes in ``content``)."""
    status: int = 200
    body: JSON = None
    headers: Optional[Dict[str, str]] = None
    content: Optional[bytes] = None

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"status": self.status}
        if self.headers:
            out["headers"] = dict(self.headers)
        if self.content is not None:
            out["body_base64"] = base64.b64encode(self.content).decode("ascii")
        elif self.body is not None:
            out["body"] = self.body
        return out


@dataclass
class BatchCompleteItem:
    """One item of a batch completion."""
    key: str
    attempt: int
    outcome: Outcome = field(default_factory=Outcome)

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"key": self.key, "attempt": self.attempt}
        out.update(self.outcome.to_json())
        return out


@dataclass
class BatchCompleteResult:
    """One item of a batch completion's answer: 200 stored, else the code
    (``lease_lost``, ``not_in_progress``, ``completion_conflict``, ...)."""
    key: str
    status: int
    code: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == 200

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> "BatchCompleteResult":
        return cls(key=str(obj.get("key")), status=int(obj.get("status", 0)),
                   code=obj.get("code"), raw=dict(obj))

