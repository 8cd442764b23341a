"""Reading an operation's policy when an integration is set up, so that
one configured for a guarded operation it can never fill refuses to
start rather than at its first request."""

from __future__ import annotations

from typing import Any, Optional

from .errors import NotFoundError, OperationUnknownError, TransportError
from .types import Operation


def policy_now(client: Any, operation: Optional[str]) -> Optional[Operation]:
    """The operation's policy, read with a blocking call (also for an
    AsyncClient: set-up runs before its event loop serves); None when the
    operation does not exist yet or idemd cannot be reached (then nothing
    can be checked, and idemd itself refuses a claim without a subject)."""
    from .client import Client
    if operation is None:
        return None
    sync = client if isinstance(client, Client) else Client(
        client.base_url, client.api_key, timeout=client.timeout, retry=client.retry,
        ssl_context=client.ssl_context)
    try:
        return sync.get_operation(operation)
    except (NotFoundError, OperationUnknownError, TransportError):
        return None
