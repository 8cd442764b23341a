"""ASGI middleware (FastAPI, Starlette, any ASGI app): makes routes
idempotent by caller key or token from the ``Idempotency-Key`` header::

    app.add_middleware(idemd.asgi.IdempotencyMiddleware, client=idemd.AsyncClient(url, key),
                       operation="order.create", paths=["/orders"],
                       subject=lambda r: r.headers.get("x-user-id"))

Keys are scoped per caller (``scope_headers``, default Authorization and
Cookie, hashed into the key); ``subject`` fills a guarded operation's
``version_key`` and must be given for one (the middleware refuses to be
built otherwise). Standard library only: no framework is imported."""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Dict, List, MutableMapping, Optional, Sequence, Tuple

from ._check import policy_now
from ._web import (DEFAULT_METHODS, DEFAULT_SCOPE_HEADERS, Options, WebRequest, WebResponse,
                   exchange_flow)
from .aio import AsyncClient

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class IdempotencyMiddleware:
    """The middleware; options as :class:`idemd._web.Options` (``operation``,
    ``by``, ``header``, ``subject``, ``scope_headers``, ``paths``,
    ``methods``, ``required``, ``wait``, ``max_body``, ``release``)."""

    def __init__(self, app: ASGIApp, *, client: AsyncClient, operation: Optional[str] = None,
                 by: str = "key", header: str = "Idempotency-Key",
                 subject: Optional[Callable[[WebRequest], Optional[str]]] = None,
                 scope_headers: Sequence[str] = DEFAULT_SCOPE_HEADERS,
                 paths: Optional[Sequence[str]] = None,
                 methods: Sequence[str] = DEFAULT_METHODS, required: bool = True,
                 wait: Optional[int] = None, max_body: int = 1 << 20,
                 release: Callable[[int], bool] = lambda status: status >= 500,
                 check: bool = True) -> None:
        self.app = app
        self.client = client
        self.options = Options(operation, by, header, subject, scope_headers, paths, methods,
                               required, wait, max_body, release)
        refusal = self.options.refusal(policy_now(client, operation)) if check else None
        if refusal:
            raise ValueError(refusal)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.options.applies(scope["method"], scope["path"]):
            await self.app(scope, receive, send)
            return
        body = b""
        more = True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            more = msg.get("more_body", False)
            if len(body) > self.options.max_body:
                break
        headers: Dict[str, str] = {}
        for k, v in scope.get("headers", []):
            name, value = k.decode("latin-1").lower(), v.decode("latin-1")
            headers[name] = headers[name] + ", " + value if name in headers else value
        req = WebRequest(scope["method"], scope["path"], scope.get("query_string", b"").decode("latin-1"),
                         headers, body, scope)

        async def handler() -> WebResponse:
            return await _run_app(self.app, scope, body)

        resp = await self.client._drive(exchange_flow(self.options, req, handler))
        raw = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in resp.headers]
        raw.append((b"content-length", str(len(resp.body)).encode("ascii")))
        await send({"type": "http.response.start", "status": resp.status, "headers": raw})
        await send({"type": "http.response.body", "body": resp.body})


async def _run_app(app: ASGIApp, scope: Scope, body: bytes) -> WebResponse:
    """Runs the downstream app on the buffered body and buffers its answer."""
    sent = False
    status = 500
    headers: List[Tuple[str, str]] = []
    chunks: List[bytes] = []

    async def receive() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return {"type": "http.disconnect"}

    async def send(msg: Message) -> None:
        nonlocal status
        if msg["type"] == "http.response.start":
            status = msg["status"]
            headers.extend((k.decode("latin-1"), v.decode("latin-1")) for k, v in msg.get("headers", []))
        elif msg["type"] == "http.response.body":
            chunks.append(msg.get("body", b""))

    await app(scope, receive, send)
    return WebResponse(status, [(k, v) for k, v in headers if k.lower() != "content-length"],
                       b"".join(chunks))
