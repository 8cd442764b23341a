"""``@idempotent``: a function that runs at most once per key, as AWS Lambda
Powertools' decorator does::

    @idempotent(client, operation="payment.capture",
                key=lambda payment_id, amount: "capture:" + payment_id)
    def capture(payment_id: str, amount: int) -> dict:
        return provider.charge(payment_id, amount)

A first call runs the function and stores its return value (any JSON value,
or an :class:`~idemd.Outcome`); a repeat with the same key returns the
stored body without running it; the same key with other arguments raises
``FingerprintMismatchError``. ``request`` says what identifies a call
(default: its arguments); ``caller`` (a function of the arguments, e.g. the
signed-in user) scopes the key per caller, as the middlewares scope it by
Authorization and Cookie; ``subject`` fills a guarded operation's
``version_key`` (required for one: the decorator refuses to be applied
without it). A coroutine function needs an :class:`~idemd.AsyncClient`."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Optional, TypeVar, Union, cast

from ._check import policy_now
from ._flows import ReleaseOn
from ._web import guarded_without_subject, scoped_key
from .aio import AsyncClient
from .client import Client

F = TypeVar("F", bound=Callable[..., Any])


def idempotent(client: Union[Client, AsyncClient], *, operation: str,
               key: Callable[..., str], request: Optional[Callable[..., Any]] = None,
               subject: Optional[Callable[..., str]] = None,
               caller: Optional[Callable[..., str]] = None,
               release_on: ReleaseOn = (Exception,), check: bool = True) -> Callable[[F], F]:
    if check:
        policy = policy_now(client, operation)
        refusal = guarded_without_subject(policy, subject is not None) if policy else None
        if refusal:
            raise ValueError(refusal.replace("this middleware", "this decorator"))

    def identity(args: Any, kwargs: Any) -> Any:
        return request(*args, **kwargs) if request else {"args": list(args), "kwargs": kwargs}

    def target(args: Any, kwargs: Any) -> Any:
        k = key(*args, **kwargs)
        if caller is not None:
            k = scoped_key(k, {"caller": caller(*args, **kwargs)}, ("caller",))
        return dict(operation=operation, key=k, request=identity(args, kwargs),
                    subject=subject(*args, **kwargs) if subject else None, release_on=release_on)

    def wrap(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            if not isinstance(client, AsyncClient):
                raise TypeError("@idempotent on a coroutine function needs an idemd.AsyncClient")
            aclient = client

            @functools.wraps(fn)
            async def run_async(*args: Any, **kwargs: Any) -> Any:
                r = await aclient.run_once(lambda _c: fn(*args, **kwargs), **target(args, kwargs))
                return r.response.get("body") if r.replayed else r.value
            return cast(F, run_async)
        if not isinstance(client, Client):
            raise TypeError("@idempotent on a plain function needs an idemd.Client")
        sclient = client

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            r: Any = sclient.run_once(lambda _c: fn(*args, **kwargs), **target(args, kwargs))
            return r.response.get("body") if r.replayed else r.value
        return cast(F, run)
    return wrap
