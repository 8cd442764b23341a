"""Errors raised by the idemd clients.

Every error idemd answers is an RFC 9457 problem with a stable ``code``;
each code has its own exception class, and all of them (with
:class:`TransportError` for a network failure and a plain
:class:`IdemdError` for an answer that is not a problem) derive from
:class:`IdemdError`. Branch on the class or on ``err.code``, never on the
detail text.
"""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any, Dict, Mapping, Optional, Type


class IdemdError(Exception):
    """An idemd call failed.

    ``status`` is the HTTP status (``None`` when no answer came), ``code``
    the problem code (``None`` when the answer was not a problem),
    ``detail`` the human-readable explanation, ``retry_after`` the
    ``Retry-After`` header in seconds (``None`` when absent) and
    ``problem`` the whole problem object.
    """

    code_name: Optional[str] = None

    def __init__(self, status: Optional[int], code: Optional[str], detail: str,
                 retry_after: Optional[float] = None,
                 problem: Optional[Mapping[str, Any]] = None,
                 headers: Optional[Mapping[str, str]] = None) -> None:
        super().__init__("%s%s: %s" % (status if status is not None else "no answer",
                                       " " + code if code else "", detail))
        self.status = status
        self.code = code
        self.detail = detail
        self.retry_after = retry_after
        self.problem: Dict[str, Any] = dict(problem or {})
        self.headers: Dict[str, str] = dict(headers or {})


class TransportError(IdemdError):
    """No HTTP answer: connection refused or reset, timeout, malformed reply.

    ``sent`` is False when the request certainly never reached idemd
    (connection refused), which is the only case the client retries.
    """

    def __init__(self, detail: str, sent: bool = True) -> None:
        super().__init__(None, None, detail)
        self.sent = sent


class InvalidRequestError(IdemdError):
    code_name = "invalid_request"


class IdempotencyKeyMissingError(IdemdError):
    code_name = "idempotency_key_missing"


class TokenMalformedError(IdemdError):
    code_name = "token_malformed"


class UnauthorizedError(IdemdError):
    code_name = "unauthorized"


class TokenInvalidError(IdemdError):
    code_name = "token_invalid"


class TokenScopeMismatchError(IdemdError):
    code_name = "token_scope_mismatch"


class NotFoundError(IdemdError):
    code_name = "not_found"


class MethodNotAllowedError(IdemdError):
    code_name = "method_not_allowed"


class RequestInProgressError(IdemdError):
    code_name = "request_in_progress"


class LeaseLostError(IdemdError):
    code_name = "lease_lost"


class NotInProgressError(IdemdError):
    code_name = "not_in_progress"


class IdempotencyKeyInvalidError(IdemdError):
    code_name = "idempotency_key_invalid"


class RecordNotFoundError(IdemdError):
    code_name = "record_not_found"


class CompletionConflictError(IdemdError):
    code_name = "completion_conflict"


class TokenInUseError(IdemdError):
    code_name = "token_in_use"


class TokenExpiredError(IdemdError):
    code_name = "token_expired"


class TokenRevokedError(IdemdError):
    code_name = "token_revoked"


class VersionMismatchError(IdemdError):
    """412: the precondition is stale. ``current_version`` is the counter's
    value from the answer's ``ETag`` (``None`` if it had none)."""

    code_name = "version_mismatch"

    @property
    def current_version(self) -> Optional[int]:
        return parse_etag(self.headers.get("etag"))


class PayloadTooLargeError(IdemdError):
    code_name = "payload_too_large"


class UnsupportedMediaTypeError(IdemdError):
    code_name = "unsupported_media_type"


class FingerprintMismatchError(IdemdError):
    code_name = "fingerprint_mismatch"


class OperationUnknownError(IdemdError):
    code_name = "operation_unknown"


class VersionRequiredError(IdemdError):
    code_name = "version_required"


class RateLimitedError(IdemdError):
    code_name = "rate_limited"


class UnavailableError(IdemdError):
    code_name = "unavailable"


class CorsOriginDeniedError(IdemdError):
    code_name = "cors_origin_denied"


class UpstreamUnavailableError(IdemdError):
    code_name = "upstream_unavailable"


class UpstreamInvalidError(IdemdError):
    code_name = "upstream_invalid"


class UpstreamTimeoutError(IdemdError):
    code_name = "upstream_timeout"


class InternalError(IdemdError):
    code_name = "internal"


ERRORS: Dict[str, Type[IdemdError]] = {
    cls.code_name: cls for cls in (
        InvalidRequestError, IdempotencyKeyMissingError, TokenMalformedError,
        UnauthorizedError, TokenInvalidError, TokenScopeMismatchError,
        NotFoundError, MethodNotAllowedError, RequestInProgressError,
        LeaseLostError, NotInProgressError, IdempotencyKeyInvalidError,
        RecordNotFoundError, CompletionConflictError, TokenInUseError,
        TokenExpiredError, TokenRevokedError, VersionMismatchError,
        PayloadTooLargeError, UnsupportedMediaTypeError,
        FingerprintMismatchError, OperationUnknownError, VersionRequiredError,
        RateLimitedError, UnavailableError, CorsOriginDeniedError,
        UpstreamUnavailableError, UpstreamInvalidError, UpstreamTimeoutError,
        InternalError)
    if cls.code_name is not None
}
"""Problem code → exception class, one per code of the API reference."""


def parse_etag(value: Optional[str]) -> Optional[int]:
    """``"7"`` → 7; anything else (weak, absent, not a number) → None."""
    if value is None:
        return None
    v = value.strip()
    if len(v) >= 3 and v[0] == '"' and v[-1] == '"' and v[1:-1].isdigit():
        return int(v[1:-1])
    return None


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """Delta-seconds or an HTTP date → seconds from now (never negative)."""
    if value is None:
        return None
    v = value.strip()
    if v.isdigit():
        return float(v)
    try:
        when = email.utils.parsedate_to_datetime(v)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def error_for(status: int, headers: Mapping[str, str], body: bytes) -> IdemdError:
    """The exception for a non-2xx answer (headers with lower-case names)."""
    problem: Dict[str, Any] = {}
    try:
        parsed = json.loads(body.decode("utf-8")) if body else None
        if isinstance(parsed, dict):
            problem = parsed
    except (ValueError, UnicodeDecodeError):
        pass
    raw_code = problem.get("code")
    code: Optional[str] = raw_code if isinstance(raw_code, str) else None
    detail = problem.get("detail")
    if not isinstance(detail, str):
        detail = body[:200].decode("utf-8", "replace") if body and not problem else "HTTP %d" % status
    cls: Type[IdemdError] = ERRORS.get(code, IdemdError) if code else IdemdError
    return cls(status, code, detail, parse_retry_after(headers.get("retry-after")),
               problem, headers)
