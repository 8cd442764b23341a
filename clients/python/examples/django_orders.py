"""An idempotent Django view: the middleware claims each POST by its
Idempotency-Key, scoped per caller (Authorization and Cookie), and takes
the subject of orders:{subject} from the URL. Run with IDEMD_URL and
IDEMD_API_KEY set (Django installed)."""

import os

import django
from django.conf import settings
from django.http import JsonResponse
from django.urls import path

OPERATION = os.environ.get("EXAMPLE_OPERATION", "order.create")
settings.configure(
    ROOT_URLCONF=__name__, ALLOWED_HOSTS=["*"], SECRET_KEY="example",
    MIDDLEWARE=["idemd.django.IdempotencyMiddleware"],
    IDEMD={"url": os.environ["IDEMD_URL"], "api_key": os.environ["IDEMD_API_KEY"],
           "operation": OPERATION,
           "subject": lambda request: request.path_params.get("user")},
)
django.setup()


def create_order(request, user):
    return JsonResponse({"order_for": user}, status=201)


urlpatterns = [path("users/<str:user>/orders", create_order)]

from django.test import Client  # noqa: E402  (the test client, in place of a server)

http = Client()
for cookie in ("session=one", "session=one", "session=two"):
    r = http.post("/users/carol/orders", {"sku": "A"}, content_type="application/json",
                  HTTP_IDEMPOTENCY_KEY="cart-9", HTTP_COOKIE=cookie)
    print(r.status_code, r["Idempotent-Replayed"], r.json())
