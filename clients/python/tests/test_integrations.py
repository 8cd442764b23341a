"""The integrations against a real idemd: the @idempotent decorator, the
ASGI middleware under FastAPI and Starlette (their TestClient) and the
Django middleware (Django's test Client). tests/clients.sh installs the
frameworks, pinned, into the virtualenv the tests run in."""

import asyncio
import json

import pytest

import idemd
from idemd._web import caller_scope, scoped_key
from conftest import API_KEY, POLICY, URL, uniq

fastapi = pytest.importorskip("fastapi")
django = pytest.importorskip("django")
from fastapi.testclient import TestClient  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.responses import JSONResponse  # noqa: E402
from starlette.routing import Route  # noqa: E402

from idemd.asgi import IdempotencyMiddleware as AsgiIdempotency  # noqa: E402


def guarded(client):
    name = uniq("guarded")
    client.put_operation(name, version_key="orders:{subject}", **POLICY)
    return name


# ------------------------------------------------------------------ decorator

def test_decorator_runs_once_per_key_and_caller(client, op):
    runs = []

    @idemd.idempotent(client, operation=op, key=lambda pid, amount, user: "capture:" + pid,
                      caller=lambda pid, amount, user: user)
    def capture(pid, amount, user):
        runs.append((pid, user))
        return {"charge": "ch_" + pid, "amount": amount}

    pid = uniq("p")
    assert capture(pid, 5, "alice") == {"charge": "ch_" + pid, "amount": 5}
    assert capture(pid, 5, "alice") == {"charge": "ch_" + pid, "amount": 5}
    assert runs == [(pid, "alice")]
    capture(pid, 5, "bob")                       # same key, another caller: another record
    assert runs == [(pid, "alice"), (pid, "bob")]
    with pytest.raises(idemd.FingerprintMismatchError):
        capture(pid, 6, "alice")


def test_decorator_async_and_guarded(client, aclient):
    op = guarded(client)
    with pytest.raises(ValueError, match="subject="):
        idemd.idempotent(aclient, operation=op, key=lambda k: k)
    runs = []

    @idemd.idempotent(aclient, operation=op, key=lambda k, user: k, subject=lambda k, user: user)
    async def order(k, user):
        runs.append(k)
        return {"order": k}

    k = uniq("o")
    user = uniq("u")

    async def main():
        return [await order(k, user), await order(k, user)]
    assert asyncio.run(main()) == [{"order": k}, {"order": k}] and runs == [k]
    assert client.get_version("orders:" + user)["version"] == 1   # the subject filled the guard


# ------------------------------------------------------------------ ASGI

def make_fastapi(aclient, op, **options):
    app = fastapi.FastAPI()
    runs = []

    @app.post("/orders")
    async def create(payload: dict):
        runs.append(payload)
        return JSONResponse({"order": len(runs), "sku": payload.get("sku")}, status_code=201)

    @app.post("/fail")
    async def fail(payload: dict):
        runs.append(payload)
        return JSONResponse({"error": "later"}, status_code=503)

    @app.get("/free")
    async def free():
        return {"free": True}

    app.add_middleware(AsgiIdempotency, client=aclient, operation=op, **options)
    return app, runs


def test_fastapi_replays_and_scopes_per_caller(aclient, op):
    app, runs = make_fastapi(aclient, op)
    with TestClient(app) as http:
        alice = {"Idempotency-Key": "k-1", "Authorization": "Bearer alice"}
        first = http.post("/orders", json={"sku": "A"}, headers=alice)
        assert first.status_code == 201 and first.headers["idempotent-replayed"] == "false"
        again = http.post("/orders", json={"sku": "A"}, headers=alice)
        assert again.status_code == 201 and again.headers["idempotent-replayed"] == "true"
        assert again.json() == first.json() == {"order": 1, "sku": "A"}
        bob = http.post("/orders", json={"sku": "A"},
                        headers={"Idempotency-Key": "k-1", "Authorization": "Bearer bob"})
        assert bob.headers["idempotent-replayed"] == "false" and bob.json()["order"] == 2
        other = http.post("/orders", json={"sku": "B"}, headers=alice)
        assert other.status_code == 422 and other.json()["code"] == "fingerprint_mismatch"
        missing = http.post("/orders", json={"sku": "A"})
        assert missing.status_code == 400 and missing.json()["code"] == "idempotency_key_missing"
        assert http.get("/free").json() == {"free": True}
        for _ in range(2):
            failed = http.post("/fail", json={}, headers=alice | {"Idempotency-Key": "k-2"})
            assert failed.status_code == 503   # released: the retry runs again
        assert len(runs) == 4
    scope = caller_scope({"authorization": "Bearer alice"}, ["authorization", "cookie"])
    rec = idemd.Client(URL, API_KEY).get_key(op, scope + ":k-1")
    assert rec["state"] == "completed" and rec["response"]["status"] == 201


def test_fastapi_guarded_operation_needs_a_subject(client, aclient):
    op = guarded(client)
    app, runs = make_fastapi(aclient, op)
    with pytest.raises(ValueError, match="subject="):
        with TestClient(app):
            pass
    user = uniq("u")
    app, runs = make_fastapi(aclient, op, subject=lambda r: r.headers.get("x-user-id"),
                             scope_headers=["x-user-id"])
    with TestClient(app) as http:
        h = {"Idempotency-Key": "k-1", "X-User-Id": user}
        assert http.post("/orders", json={"sku": "A"}, headers=h).status_code == 201
        assert http.post("/orders", json={"sku": "A"}, headers=h).headers["idempotent-replayed"] == "true"
    assert client.get_version("orders:" + user)["version"] == 1
    assert client.get_key(op, scoped_key("k-1", {"x-user-id": user}, ["x-user-id"]))["state"] == "completed"


def test_starlette_by_token(client, aclient, op):
    async def pay(request):
        return JSONResponse({"paid": (await request.json())["amount"]}, status_code=201)
    app = Starlette(routes=[Route("/pay", pay, methods=["POST"])])
    app.add_middleware(AsgiIdempotency, client=aclient, by="token")
    tok = client.issue(op, "u-1")["token"]
    with TestClient(app) as http:
        a = http.post("/pay", json={"amount": 5}, headers={"Idempotency-Key": tok})
        b = http.post("/pay", json={"amount": 5}, headers={"Idempotency-Key": '"%s"' % tok})
        assert (a.status_code, a.headers["idempotent-replayed"]) == (201, "false")
        assert (b.status_code, b.headers["idempotent-replayed"], b.json()) == (201, "true", {"paid": 5})
        bad = http.post("/pay", json={"amount": 5}, headers={"Idempotency-Key": "x" + tok})
        assert bad.status_code in (400, 403) and bad.json()["code"] in ("token_malformed", "token_invalid")


# ------------------------------------------------------------------ Django

def _django(op_name, **extra):
    from django.conf import settings
    if not settings.configured:
        settings.configure(DEBUG=False, ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"],
                           SECRET_KEY="test", MIDDLEWARE=[], INSTALLED_APPS=[],
                           DEFAULT_CHARSET="utf-8")
        django.setup()
    settings.IDEMD = dict(url=URL, api_key=API_KEY, operation=op_name, **extra)
    from django.test import Client as DjangoClient
    from django.test.utils import override_settings
    return DjangoClient, override_settings


DJANGO_RUNS = []


def django_order(request, shop):
    from django.http import JsonResponse
    DJANGO_RUNS.append(shop)
    return JsonResponse({"shop": shop, "n": len(DJANGO_RUNS), "body": json.loads(request.body)},
                        status=201)


def _urls():
    from django.urls import path
    return [path("shops/<str:shop>/orders", django_order)]


def __getattr__(name):   # ROOT_URLCONF's urlpatterns, built once Django is configured
    if name == "urlpatterns":
        return _urls()
    raise AttributeError(name)


def test_django_middleware(client):
    op = guarded(client)
    DjangoClient, override_settings = _django(op)
    from django.core.exceptions import ImproperlyConfigured
    from idemd.django import IdempotencyMiddleware
    with pytest.raises(ImproperlyConfigured, match="subject="):
        IdempotencyMiddleware(lambda r: None)
    mw = ["idemd.django.IdempotencyMiddleware"]
    shop = uniq("shop")
    conf = dict(url=URL, api_key=API_KEY, operation=op, subject=lambda r: r.path_params["shop"])
    with override_settings(MIDDLEWARE=mw, IDEMD=conf):
        http = DjangoClient()
        h = {"HTTP_IDEMPOTENCY_KEY": "k-1", "HTTP_COOKIE": "session=alice"}
        a = http.post("/shops/%s/orders" % shop, {"sku": "A"}, content_type="application/json", **h)
        b = http.post("/shops/%s/orders" % shop, {"sku": "A"}, content_type="application/json", **h)
        assert (a.status_code, a["Idempotent-Replayed"]) == (201, "false")
        assert (b.status_code, b["Idempotent-Replayed"]) == (201, "true")
        assert json.loads(b.content) == json.loads(a.content)
        c = http.post("/shops/%s/orders" % shop, {"sku": "A"}, content_type="application/json",
                      HTTP_IDEMPOTENCY_KEY="k-1", HTTP_COOKIE="session=bob")
        assert c["Idempotent-Replayed"] == "false" and json.loads(c.content)["n"] == 2
        d = http.post("/shops/%s/orders" % shop, {"sku": "B"}, content_type="application/json", **h)
        assert d.status_code == 422 and json.loads(d.content)["code"] == "fingerprint_mismatch"
    assert DJANGO_RUNS.count(shop) == 2
    assert client.get_version("orders:" + shop)["version"] == 2   # subject from the path
