"""Client for idemd, the idempotency service.

``Client`` (sync, http.client) and ``AsyncClient`` (asyncio streams) cover
the whole HTTP API; ``Client.claim`` is a context manager that completes on
success and releases on a retryable exception, and ``Client.consume``
processes a batch of queue messages exactly once each; ``idemd.kafka``
does it for a Kafka consumer's polls (confluent-kafka), offsets included.
"""

from ._core import UNSET, Retry
from ._flows import MessageOutcome, RunResult
from .aio import AsyncClaim, AsyncClient
from .client import Claim, Client
from .decorator import idempotent
from . import kafka
from ._web import caller_scope, scoped_key
from .errors import (IdemdError, TransportError, ERRORS,
    InvalidRequestError,
    IdempotencyKeyMissingError,
    TokenMalformedError,
    UnauthorizedError,
    TokenInvalidError,
    TokenScopeMismatchError,
    NotFoundError,
    MethodNotAllowedError,
    RequestInProgressError,
    LeaseLostError,
    NotInProgressError,
    IdempotencyKeyInvalidError,
    RecordNotFoundError,
    CompletionConflictError,
    TokenInUseError,
    TokenExpiredError,
    TokenRevokedError,
    VersionMismatchError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
    FingerprintMismatchError,
    OperationUnknownError,
    VersionRequiredError,
    RateLimitedError,
    UnavailableError,
    CorsOriginDeniedError,
    UpstreamUnavailableError,
    UpstreamInvalidError,
    UpstreamTimeoutError,
    InternalError,)
from .types import (BatchClaimItem, BatchClaimResult, BatchCompleteItem,
                    BatchCompleteResult, Checkpoint, CheckpointResult, Claimed,
                    CompleteResult, ExtendResult, Health, IssuedToken,
                    KeyRecord, Operation, Outcome, Record, RecordEvent,
                    RecordPage, RecordRow, ReleaseResult, StoredResponse,
                    TokenInfo, Version, response_bytes)

__version__ = "0.2.0"

__all__ = [
    "Client", "AsyncClient", "Claim", "AsyncClaim", "Retry", "UNSET",
    "MessageOutcome", "RunResult", "idempotent", "kafka", "caller_scope", "scoped_key", "Outcome", "Claimed", "BatchClaimItem", "BatchClaimResult",
    "BatchCompleteItem", "BatchCompleteResult", "CompleteResult", "Health",
    "IssuedToken", "KeyRecord", "Operation", "ReleaseResult", "StoredResponse",
    "TokenInfo", "Version", "response_bytes", "Checkpoint", "CheckpointResult",
    "ExtendResult", "Record", "RecordEvent", "RecordPage", "RecordRow", "ERRORS", "IdemdError", "TransportError",
    "InvalidRequestError",
    "IdempotencyKeyMissingError",
    "TokenMalformedError",
    "UnauthorizedError",
    "TokenInvalidError",
    "TokenScopeMismatchError",
    "NotFoundError",
    "MethodNotAllowedError",
    "RequestInProgressError",
    "LeaseLostError",
    "NotInProgressError",
    "IdempotencyKeyInvalidError",
    "RecordNotFoundError",
    "CompletionConflictError",
    "TokenInUseError",
    "TokenExpiredError",
    "TokenRevokedError",
    "VersionMismatchError",
    "PayloadTooLargeError",
    "UnsupportedMediaTypeError",
    "FingerprintMismatchError",
    "OperationUnknownError",
    "VersionRequiredError",
    "RateLimitedError",
    "UnavailableError",
    "CorsOriginDeniedError",
    "UpstreamUnavailableError",
    "UpstreamInvalidError",
    "UpstreamTimeoutError",
    "InternalError",
]
