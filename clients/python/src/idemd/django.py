"""Django middleware: makes views idempotent by caller key or token from the
``Idempotency-Key`` header. Configured in settings::

    MIDDLEWARE = [..., "django.contrib.auth.middleware.AuthenticationMiddleware",
                  "idemd.django.IdempotencyMiddleware"]
    IDEMD = {"url": "http://127.0.0.1:8080", "api_key": "...",
             "operation": "order.create", "paths": ["/orders"],
             "subject": lambda r: str(r.native.user.pk)}

``IDEMD`` takes the options of :class:`idemd._web.Options` (``subject`` a
function of the request, or a dotted path to one); ``r.native`` is the
HttpRequest and ``r.path_params`` the URL's keyword arguments. Keys are
scoped per caller (``scope_headers``, default Authorization and Cookie);
for a guarded operation without ``subject`` the middleware refuses to
start (ImproperlyConfigured). Django is imported only by this module."""

from __future__ import annotations

from typing import Any, Callable, Dict

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.urls import Resolver404, resolve
from django.utils.module_loading import import_string

from ._check import policy_now
from ._web import Options, WebRequest, WebResponse, exchange_flow
from .client import Client

_OPTION_NAMES = ("operation", "by", "header", "subject", "scope_headers", "paths", "methods",
                 "required", "wait", "max_body", "release")


class IdempotencyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        conf: Dict[str, Any] = dict(getattr(settings, "IDEMD", None) or {})
        if "url" not in conf:
            raise ImproperlyConfigured('settings.IDEMD needs "url" (and "api_key")')
        unknown = set(conf) - set(_OPTION_NAMES) - {"url", "api_key", "check"}
        if unknown:
            raise ImproperlyConfigured("settings.IDEMD: unknown option(s) %s" % sorted(unknown))
        if isinstance(conf.get("subject"), str):
            conf["subject"] = import_string(conf["subject"])
        self.client = Client(conf["url"], conf.get("api_key"))
        try:
            self.options = Options(**{k: conf[k] for k in _OPTION_NAMES if k in conf})
        except ValueError as e:
            raise ImproperlyConfigured("settings.IDEMD: %s" % e) from e
        if conf.get("check", True):
            refusal = self.options.refusal(policy_now(self.client, self.options.operation))
            if refusal:
                raise ImproperlyConfigured(refusal)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if not self.options.applies(request.method or "GET", request.path):
            return self.get_response(request)
        headers = {k.lower(): v for k, v in request.headers.items()}
        try:
            params: Dict[str, Any] = dict(resolve(request.path_info).kwargs)
        except Resolver404:
            params = {}
        req = WebRequest(request.method or "GET", request.path, request.META.get("QUERY_STRING", ""),
                         headers, request.body, request, params)

        def handler() -> WebResponse:
            r = self.get_response(request)
            body = b"".join(r) if r.streaming else r.content
            return WebResponse(r.status_code, [(k, v) for k, v in r.items()
                                               if k.lower() != "content-length"], body)

        resp = self.client._drive(exchange_flow(self.options, req, handler))
        out = HttpResponse(resp.body, status=resp.status)
        del out["Content-Type"]
        for k, v in resp.headers:
            out[k] = v
        return out


