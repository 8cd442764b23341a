"""The claim context manager, run_once, batches and the consumer helper."""

import pytest

import idemd
from conftest import uniq


class Boom(Exception):
    pass


class Declined(Exception):
    pass


def test_claim_completes_with_what_was_set(client, op, key):
    with client.claim(operation=op, key=key, request={"amount": 5}) as c:
        assert not c.replayed and c.attempt == 1 and c.id
        done = c.complete(201, {"order_id": "o-1"}, {"location": "/orders/o-1"})
        # stored at once, not at the block's end
        assert done["state"] == "completed" and client.get_key(op, key)["state"] == "completed"
        assert c.response == done["response"]
    assert c.result["state"] == "completed"
    rec = client.get_key(op, key)
    assert rec["state"] == "completed"
    assert rec["response"] == {"status": 201, "headers": {"location": "/orders/o-1"},
                               "body": {"order_id": "o-1"}}


def test_claim_duplicate_gets_the_stored_response(client, op, key):
    with client.claim(operation=op, key=key) as c:
        c.complete(201, {"n": 1})
    ran = []
    with client.claim(operation=op, key=key) as dup:
        if not dup.replayed:
            ran.append(1)
        with pytest.raises(RuntimeError):
            dup.complete(200, {"n": 2})
    assert ran == [] and dup.replayed
    assert dup.response["status"] == 201 and dup.response["body"] == {"n": 1}


def test_claim_nothing_set_stores_200_empty(client, op, key):
    with client.claim(operation=op, key=key):
        pass
    assert client.get_key(op, key)["response"] == {"status": 200, "headers": {}, "body": None}


def test_claim_exception_releases_and_reraises(client, op, key):
    with pytest.raises(Boom):
        with client.claim(operation=op, key=key) as c:
            raise Boom()
    rec = client.get_key(op, key)
    assert rec["state"] == "issued" and rec["attempt"] == 1
    with client.claim(operation=op, key=key) as c:
        assert c.attempt == 2
        c.complete(200, {"ok": True})
    assert client.get_key(op, key)["response"]["body"] == {"ok": True}


def test_claim_exception_outside_release_on_is_final(client, op, key):
    with pytest.raises(Declined):
        with client.claim(operation=op, key=key, release_on=(Boom,)):
            raise Declined("card declined")
    rec = client.get_key(op, key)
    assert rec["state"] == "completed"
    assert rec["response"]["status"] == 500 and rec["response"]["body"] == {"error": "Declined"}
    with pytest.raises(Declined):
        with client.claim(operation=op, key=uniq("k"), release_on=(Boom,)) as c:
            c.complete(402, {"error": "declined"})
            raise Declined()
    with client.claim(operation=op, key=key) as again:
        assert again.replayed and again.response["status"] == 500


def test_claim_explicit_release(client, op, key):
    with client.claim(operation=op, key=key) as c:
        c.release()
    assert client.get_key(op, key)["state"] == "issued"


def test_claim_token_form(client, op):
    tok = client.issue(op, "user-9")["token"]
    with client.claim(token=tok, request={"a": 1}) as c:
        c.complete(201, {"id": 9})
    with client.claim(token=tok, request={"a": 1}) as c:
        assert c.replayed and c.response["body"] == {"id": 9}
    with pytest.raises(ValueError):
        client.claim(operation=op, key="k", token=tok)
    with pytest.raises(TypeError):
        client.claim(op, "k")  # keyword arguments only


def test_claim_refusal_raises_on_entry(client, op, key):
    with client.claim(operation=op, key=key, request={"a": 1}) as c:
        c.complete(200)
    with pytest.raises(idemd.FingerprintMismatchError):
        with client.claim(operation=op, key=key, request={"a": 2}):
            pytest.fail("the body must not run")


def test_run_once(client, op, key):
    calls = []

    def work(claim):
        calls.append(claim.attempt)
        assert claim.id and not claim.replayed
        return idemd.Outcome(201, {"order": len(calls)})

    first = client.run_once(work, operation=op, key=key)
    second = client.run_once(work, operation=op, key=key)
    assert calls == [1]
    assert not first.replayed and second.replayed
    assert first.value == idemd.Outcome(201, {"order": 1}) and second.value is None
    assert first.response == second.response == {"status": 201, "headers": {}, "body": {"order": 1}}
    assert first.claim.id == second.claim.id or second.claim.id is None
    r = client.run_once(lambda c: [1, 2], operation=op, key=uniq("k"))
    assert (r.replayed, r.value, r.response) == (False, [1, 2], {"status": 200, "headers": {}, "body": [1, 2]})


def test_batch_claim_and_complete(client, op):
    done = uniq("k")
    client.claim_key(op, done)
    client.complete_key(op, done, 1, 201, {"n": 0})
    busy = uniq("k")
    client.claim_key(op, busy)
    new = uniq("k")
    res = client.claim_batch(op, [idemd.BatchClaimItem(new, request={"x": 1}),
                                  {"key": done}, {"key": busy}, {"key": "bad key"}])
    assert [r.key for r in res] == [new, done, busy, "bad key"]
    assert res[0].status == 201 and res[0].attempt == 1 and res[0].id and res[0].claimed
    assert res[1].status == 200 and res[1].replayed and res[1].response["body"] == {"n": 0}
    assert res[2].status == 409 and res[2].code == "request_in_progress"
    assert res[3].status == 400 and res[3].code == "idempotency_key_invalid"
    out = client.complete_batch(op, [idemd.BatchCompleteItem(new, 1, idemd.Outcome(201, {"n": 1})),
                                     {"key": busy, "attempt": 7, "status": 200}])
    assert out[0].ok and out[0].key == new
    assert out[1].status == 409 and out[1].code == "lease_lost"
    assert client.get_key(op, new)["response"]["body"] == {"n": 1}


def test_consume(client, op):
    ids = [uniq("evt") for _ in range(5)]
    client.claim_key(op, ids[1])
    client.complete_key(op, ids[1], 1, 200, {"seen": "before"})
    client.claim_key(op, ids[2])  # another consumer holds it
    messages = [{"id": ids[0], "n": 0}, {"id": ids[1], "n": 1}, {"id": ids[2], "n": 2},
                {"id": ids[3], "n": 3, "fail": True}, {"id": ids[4], "n": 4},
                {"id": ids[0], "n": 0}]  # redelivered within the batch
    handled = []

    def handler(m, claim):
        assert claim.attempt >= 1 and claim.key == m["id"]
        handled.append(m["n"])
        if m.get("fail"):
            raise Boom("transient")
        return {"handled": m["n"]}

    out = client.consume(op, messages, key=lambda m: m["id"], handler=handler)
    assert sorted(handled) == [0, 3, 4]
    assert [o.outcome for o in out] == ["processed", "replayed", "in_progress", "failed",
                                        "processed", "processed"]
    assert [o.retry for o in out] == [False, False, True, True, False, False]
    assert out[0].result == {"handled": 0} and out[1].response["body"] == {"seen": "before"}
    assert isinstance(out[3].error, Boom)
    assert client.get_key(op, ids[0])["response"]["body"] == {"handled": 0}
    assert client.get_key(op, ids[3])["state"] == "issued"
    # Redelivery: only the failed one runs again.
    handled.clear()
    messages[3]["fail"] = False
    again = client.consume(op, messages[:5], key=lambda m: m["id"], handler=handler)
    assert handled == [3]
    assert [o.outcome for o in again] == ["replayed", "replayed", "in_progress", "processed", "replayed"]
