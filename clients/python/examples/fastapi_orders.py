"""An idempotent FastAPI route: POST /orders runs once per Idempotency-Key
and caller; the signed-in user (here a header set by the auth proxy) is
the subject that fills order.create's guard, orders:{subject}. Run with
IDEMD_URL and IDEMD_API_KEY set (FastAPI and httpx installed)."""

import os

from fastapi import FastAPI
from fastapi.testclient import TestClient

import idemd
from idemd.asgi import IdempotencyMiddleware

client = idemd.AsyncClient(os.environ["IDEMD_URL"], os.environ["IDEMD_API_KEY"])
OPERATION = os.environ.get("EXAMPLE_OPERATION", "order.create")
app = FastAPI()
orders = []


@app.post("/orders", status_code=201)
async def create_order(order: dict) -> dict:
    orders.append(order)
    return {"order_id": "o-%d" % len(orders), "sku": order["sku"]}


app.add_middleware(IdempotencyMiddleware, client=client, operation=OPERATION,
                   paths=["/orders"], subject=lambda request: request.headers.get("x-user-id"))

with TestClient(app) as http:  # in production: uvicorn, gunicorn, ...
    alice = {"Idempotency-Key": "cart-7", "X-User-Id": "alice",
             "Authorization": "Bearer alice-session"}
    bob = {"Idempotency-Key": "cart-7", "X-User-Id": "bob", "Authorization": "Bearer bob-session"}
    for headers in (alice, alice, bob):
        r = http.post("/orders", json={"sku": "A"}, headers=headers)
        print(r.status_code, r.headers["idempotent-replayed"], r.json())
    r = http.post("/orders", json={"sku": "B"}, headers=alice)  # same key, another order
    print(r.status_code, r.json()["code"])
