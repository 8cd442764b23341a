"""The sync client against a real idemd: every endpoint, errors, retries."""

import os
import re
import threading
import time

import pytest

import idemd
from conftest import API_KEY, API_KEY_2, LIMITED_URL, POLICY, URL, uniq


def test_health_and_ready(client):
    assert client.health() == {"status": "ok"}
    assert client.ready()["status"] == "ready"


def test_operations_put_get_list(client):
    name = uniq("op")
    created = client.put_operation(name, version_key="orders:{subject}", **POLICY)
    assert created["name"] == name and created["version_key"] == "orders:{subject}"
    replaced = client.put_operation(name, token_ttl_seconds=60, retention_seconds=120, lease_seconds=5)
    assert replaced["lease_seconds"] == 5 and "version_key" not in replaced
    assert client.get_operation(name)["token_ttl_seconds"] == 60
    assert name in [o["name"] for o in client.list_operations()]
    with pytest.raises(idemd.NotFoundError) as e:
        client.get_operation(uniq("missing"))
    assert e.value.status == 404 and e.value.code == "not_found"


def test_issue_introspect_revoke(client, op):
    t = client.issue(op, "user-1", ttl_seconds=600)
    assert t["operation"] == op and t["subject"] == "user-1" and len(t["id"]) == 32
    many = client.issue_many(op, "user-1", 3)
    assert len({x["token"] for x in many}) == 3
    info = client.introspect(t["token"])
    assert info["state"] == "issued" and info["attempt"] == 0
    client.revoke(t["token"])
    client.revoke(t["token"])  # idempotent
    assert client.introspect(t["token"])["state"] == "revoked"
    with pytest.raises(idemd.TokenRevokedError) as e:
        client.claim_token(t["token"])
    assert e.value.status == 410 and e.value.detail


def test_token_claim_complete_replay(client, op):
    tok = client.issue(op, "user-2")["token"]
    c = client.claim_token(tok, request={"cart": "c-1", "amount": 42})
    assert not c.replayed and c.state == "in_progress" and c.attempt == 1 and c.lease_expires_at
    with pytest.raises(idemd.TokenInUseError):
        client.revoke(tok)
    done = client.complete_token(tok, 1, 201, {"order_id": "o-1"}, headers={"location": "/orders/o-1"})
    assert done["state"] == "completed" and done["response"]["status"] == 201
    again = client.claim_token(tok, request={"amount": 42, "cart": "c-1"})
    assert again.replayed and again.response is not None
    assert again.response["body"] == {"order_id": "o-1"}
    assert again.response["headers"]["location"] == "/orders/o-1"
    with pytest.raises(idemd.FingerprintMismatchError) as e:
        client.claim_token(tok, request={"cart": "c-2"})
    assert e.value.status == 422
    with pytest.raises(idemd.CompletionConflictError):
        client.complete_token(tok, 1, 500)


def test_token_release_takeover_and_fencing(client, op):
    tok = client.issue(op, "user-3")["token"]
    assert client.claim_token(tok).attempt == 1
    assert client.release_token(tok, 1) == {"state": "issued", "attempt": 1}
    with pytest.raises(idemd.NotInProgressError):
        client.release_token(tok, 1)
    assert client.claim_token(tok).attempt == 2
    with pytest.raises(idemd.LeaseLostError) as e:
        client.complete_token(tok, 1, 200)
    assert e.value.status == 409
    client.complete_token(tok, 2, 200, content=b"\x00raw\xff", headers={"content-type": "application/octet-stream"})
    r = client.introspect(tok)["response"]
    assert idemd.response_bytes(r) == b"\x00raw\xff"


def test_token_errors(client, op):
    with pytest.raises(idemd.TokenMalformedError):
        client.claim_token("not a token!")
    tok = client.issue(op, "user-4")["token"]
    with pytest.raises(idemd.TokenInvalidError):
        client.claim_token(tok[:-2] + ("AA" if not tok.endswith("AA") else "BB"))
    other = idemd.Client(URL, API_KEY_2)
    with pytest.raises(idemd.TokenScopeMismatchError):
        other.claim_token(tok)
    with pytest.raises(idemd.UnauthorizedError) as e:
        idemd.Client(URL, "idk_wrong").list_operations()
    assert e.value.status == 401
    with pytest.raises(idemd.OperationUnknownError):
        client.issue(uniq("nope"), "u")
    with pytest.raises(idemd.InvalidRequestError):
        client.issue(op, "")


def test_caller_key_claim_complete_replay(client, op):
    key = "evt/1%2F?#:" + uniq("x")  # needs percent-encoding in the path
    c = client.claim_key(op, key, request={"amount": 500}, subject="user-42")
    assert c.attempt == 1 and re.fullmatch(r"[0-9a-f]{32}", c.id or "")
    rec = client.get_key(op, key)
    assert rec["key"] == key and rec["state"] == "in_progress" and rec["subject"] == "user-42"
    client.complete_key(op, key, 1, 201, {"order_id": "o-7"})
    again = client.claim_key(op, key, request={"amount": 500}, subject="user-42")
    assert again.replayed and again.id == c.id and again.response["body"] == {"order_id": "o-7"}
    assert client.get_key(op, key)["state"] == "completed"


def test_caller_key_release_and_errors(client, op, key):
    client.claim_key(op, key)
    client.release_key(op, key, 1)
    assert client.get_key(op, key)["state"] == "issued"
    assert client.claim_key(op, key).attempt == 2
    with pytest.raises(idemd.LeaseLostError):
        client.release_key(op, key, 1)
    with pytest.raises(idemd.RecordNotFoundError) as e:
        client.get_key(op, uniq("never"))
    assert e.value.status == 404
    with pytest.raises(idemd.RecordNotFoundError):
        client.complete_key(op, uniq("never"), 1, 200)
    with pytest.raises(idemd.IdempotencyKeyInvalidError):
        client.claim_key(op, "with space")
    with pytest.raises(idemd.IdempotencyKeyInvalidError):
        client.claim_key(op, "x" * 256)


def test_versions(client):
    k = "orders:" + uniq("user")
    assert client.get_version(k) == {"key": k, "version": 0}
    assert client.bump_version(k, 0) == 1
    assert client.bump_version(k, '"1"') == 2
    with pytest.raises(idemd.VersionMismatchError) as e:
        client.bump_version(k, 0)
    assert e.value.status == 412 and e.value.current_version == 2


def test_version_guarded_claim(client):
    name = uniq("op")
    client.put_operation(name, version_key="orders:{subject}", **POLICY)
    subject = uniq("user")
    tab1 = client.issue(name, subject)["token"]
    tab2 = client.issue(name, subject)["token"]
    client.claim_token(tab1)
    with pytest.raises(idemd.VersionMismatchError) as e:
        client.claim_token(tab2)
    assert e.value.current_version == 1
    assert client.claim_token(tab2, if_match=1).attempt == 1
    with pytest.raises(idemd.InvalidRequestError):
        client.claim_key(name, uniq("k"))  # a guarded operation needs a subject


def test_error_classes_match_the_api_reference():
    src = os.environ.get("IDEMD_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..", "..")
    with open(os.path.join(src, "api", "openapi.yaml")) as f:
        text = f.read()
    block = text.split("    Problem:", 1)[1].split("enum:", 1)[1]
    codes = []
    for line in block.splitlines()[1:]:
        m = re.match(r"^\s+- ([a-z_]+)$", line)
        if not m:
            break
        codes.append(m.group(1))
    assert len(codes) > 20
    assert sorted(idemd.ERRORS) == sorted(codes)
    for code, cls in idemd.ERRORS.items():
        assert issubclass(cls, idemd.IdemdError) and cls.code_name == code
        assert getattr(idemd, cls.__name__) is cls


def test_retry_request_in_progress_until_replayed(client, op, key):
    client.claim_key(op, key)
    no_retry = idemd.Client(URL, API_KEY, retry=idemd.Retry(attempts=1))
    with pytest.raises(idemd.RequestInProgressError) as e:
        no_retry.claim_key(op, key)
    assert e.value.status == 409 and e.value.retry_after == 1
    timer = threading.Timer(0.5, lambda: client.complete_key(op, key, 1, 200, {"done": True}))
    timer.start()
    t0 = time.monotonic()
    patient = idemd.Client(URL, API_KEY, retry=idemd.Retry(attempts=5, base_delay=0.05))
    c = patient.claim_key(op, key)
    timer.join()
    assert c.replayed and c.response["body"] == {"done": True}
    assert time.monotonic() - t0 >= 0.95  # honoured Retry-After: 1


def test_retry_rate_limited():
    name = uniq("op")
    main = idemd.Client(URL, API_KEY_2)
    main.put_operation(name, **POLICY)
    once = idemd.Client(LIMITED_URL, API_KEY_2, retry=idemd.Retry(attempts=1))
    with pytest.raises(idemd.RateLimitedError) as e:
        for _ in range(3):
            once.issue(name, "u")
    assert e.value.status == 429 and e.value.retry_after is not None
    t0 = time.monotonic()
    idemd.Client(LIMITED_URL, API_KEY_2, retry=idemd.Retry(attempts=6, base_delay=0.05)).issue(name, "u")
    assert time.monotonic() - t0 >= 0.5


def test_retry_unavailable_is_bounded(op, key):
    c = idemd.Client(LIMITED_URL, API_KEY, retry=idemd.Retry(attempts=2, base_delay=0.01))
    t0 = time.monotonic()
    with pytest.raises(idemd.UnavailableError) as e:
        c.claim_key(op, key, request="x" * (1200 * 1024))  # over the 1 MiB in-flight budget
    assert e.value.status == 503 and e.value.retry_after is not None
    assert time.monotonic() - t0 >= e.value.retry_after  # one wait between the two tries


def test_connection_refused_is_a_transport_error():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    c = idemd.Client("http://127.0.0.1:%d" % port, API_KEY,
                     retry=idemd.Retry(attempts=2, base_delay=0.01))
    with pytest.raises(idemd.TransportError) as e:
        c.health()
    assert e.value.status is None and e.value.sent is False
