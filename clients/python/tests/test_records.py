"""Long work and records against a real idemd: extend, checkpoint (tokens
and caller keys), GET /v1/records/{id}, its events, the record list with
its keyset cursor, and the consumer helper handing the claim to the
handler."""

import asyncio
import datetime
import time

import pytest

import idemd
from conftest import POLICY, uniq


def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))


def test_extend_and_checkpoint_caller_key(client, op, key):
    c = client.claim_key(op, key, subject="u-1")
    first = ts(c.lease_expires_at)
    time.sleep(1.1)
    ext = client.extend_key(op, key, c.attempt)
    assert ts(ext["lease_expires_at"]) > first
    short = client.extend_key(op, key, c.attempt, lease_seconds=5)
    assert ts(short["lease_expires_at"]) < ts(ext["lease_expires_at"])
    cp = client.checkpoint_key(op, key, c.attempt, "card.charged", {"charge": "ch_1"})
    assert cp["checkpoint"] == {"phase": "card.charged", "data": {"charge": "ch_1"}, "attempt": 1}
    rec = client.get_key(op, key)
    assert rec["checkpoint"]["phase"] == "card.charged"
    # A takeover (after a release) hands the checkpoint to the next attempt.
    client.release_key(op, key, c.attempt)
    again = client.claim_key(op, key, subject="u-1")
    assert again.attempt == 2
    assert again.checkpoint == {"phase": "card.charged", "data": {"charge": "ch_1"}, "attempt": 1}
    # The stale attempt is fenced: 409 lease_lost, nothing written.
    with pytest.raises(idemd.LeaseLostError) as e:
        client.checkpoint_key(op, key, 1, "late")
    assert e.value.status == 409
    with pytest.raises(idemd.LeaseLostError):
        client.extend_key(op, key, 1)
    with pytest.raises(idemd.InvalidRequestError) as e:
        client.checkpoint_key(op, key, 2, "Not Valid!")
    assert e.value.code == "invalid_request"
    client.checkpoint_key(op, key, 2, "shipped")  # no data: null
    assert client.get_key(op, key)["checkpoint"] == {"phase": "shipped", "data": None, "attempt": 2}
    with pytest.raises(idemd.RecordNotFoundError):
        client.extend_key(op, uniq("never"), 1)


def test_extend_and_checkpoint_token(client, op):
    tok = client.issue(op, "u-2")["token"]
    c = client.claim_token(tok)
    assert client.extend_token(tok, c.attempt, lease_seconds=10)["lease_expires_at"]
    cp = client.checkpoint_token(tok, c.attempt, "step-1", [1, 2])
    assert cp["state"] == "in_progress" and cp["checkpoint"]["data"] == [1, 2]
    assert client.introspect(tok)["checkpoint"]["phase"] == "step-1"
    client.complete_token(tok, c.attempt, 201, {"ok": True})
    with pytest.raises(idemd.IdemdError) as e:
        client.extend_token(tok, c.attempt)
    assert e.value.status == 409 and e.value.code in ("not_in_progress", "lease_lost")


def test_get_record_and_events(client, op, key):
    c = client.claim_key(op, key, subject="u-3")
    assert c.id and len(c.id) == 32
    client.checkpoint_key(op, key, 1, "half")
    client.complete_key(op, key, 1, 201, {"done": 1})
    rec = client.get_record(c.id)
    assert rec["id"] == c.id and rec["operation"] == op and rec["state"] == "completed"
    assert rec["response"]["status"] == 201 and rec["response"]["body"] == {"done": 1}
    assert rec.get("subject") == "u-3"
    events = client.record_events(c.id)
    assert [e["event"] for e in events] == ["claimed", "checkpoint", "completed"]
    assert events[1]["phase"] == "half" and events[2]["status"] == 201
    assert all(e["by"].startswith("api_key:") for e in events)
    with pytest.raises(idemd.RecordNotFoundError) as e:
        client.get_record("0" * 32)
    assert e.value.status == 404
    with pytest.raises(idemd.RecordNotFoundError):
        client.record_events("0" * 32)


def test_list_records_pages_with_the_cursor(client):
    op = uniq("list")
    client.put_operation(op, **POLICY)
    keys = ["k-%d" % i for i in range(7)]
    ids = []
    for k in keys:
        ids.append(client.claim_key(op, k, subject="lister").id)
    client.complete_key(op, keys[0], 1, 200)
    page = client.list_records(operation=op, limit=3)
    assert len(page["records"]) == 3 and page["next_cursor"]
    seen = []
    cursor = None
    while True:
        page = client.list_records(operation=op, limit=3, cursor=cursor)
        seen += [r["id"] for r in page["records"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sorted(seen) == sorted(ids) and len(seen) == len(set(seen))
    assert seen == list(reversed(ids))  # newest claim first
    assert [r["id"] for r in client.iter_records(operation=op, page_size=2)] == seen
    in_progress = list(client.iter_records(operation=op, state="in_progress", subject="lister"))
    assert len(in_progress) == 6 and ids[0] not in [r["id"] for r in in_progress]
    assert list(client.iter_records(operation=op, older_than=3600)) == []
    assert client.list_records(operation=uniq("nothing"))["records"] == []
    with pytest.raises(idemd.InvalidRequestError):
        client.list_records(limit=0)
    with pytest.raises(idemd.InvalidRequestError):
        client.list_records(state="sleeping")


def test_consume_hands_the_claim(client, op):
    msgs = [{"id": "m-%d" % i} for i in range(3)]
    seen = {}

    def handler(m, claim):
        seen[m["id"]] = (claim.id, claim.attempt, claim.key)
        client.checkpoint_key(op, claim.key, claim.attempt, "effect.done")
        return {"ok": m["id"]}

    out = client.consume(op, msgs, key=lambda m: m["id"], handler=handler)
    assert [o.outcome for o in out] == ["processed"] * 3
    for m in msgs:
        rid, attempt, k = seen[m["id"]]
        assert attempt == 1 and k == m["id"]
        assert client.get_record(rid)["state"] == "completed"
        assert client.get_key(op, k)["id"] == rid


def test_async_long_work_and_records(aclient, op, key):
    async def main():
        c = await aclient.claim_key(op, key)
        assert (await aclient.extend_key(op, key, c.attempt, lease_seconds=3))["lease_expires_at"]
        await aclient.checkpoint_key(op, key, c.attempt, "a", {"n": 1})
        issued = await aclient.issue(op, "u")
        tok = issued["token"]
        tc = await aclient.claim_token(tok)
        await aclient.extend_token(tok, tc.attempt)
        await aclient.checkpoint_token(tok, tc.attempt, "b")
        rec = await aclient.get_record(c.id)
        assert rec["checkpoint"] == {"phase": "a", "data": {"n": 1}, "attempt": 1}
        ev = await aclient.record_events(c.id)
        assert [e["event"] for e in ev] == ["claimed", "extended", "checkpoint"]
        page = await aclient.list_records(operation=op, limit=1)
        assert len(page["records"]) == 1 and page["next_cursor"]
        rows = [r["id"] async for r in aclient.iter_records(operation=op, page_size=1)]
        assert set(rows) == {c.id, issued["id"]}

        async def handler(m, claim):
            await asyncio.sleep(0)
            return claim.id

        out = await aclient.consume(op, ["x", "y"], key=lambda m: "async-" + m, handler=handler)
        assert [o.outcome for o in out] == ["processed", "processed"]
        assert (await aclient.get_record(out[0].result))["state"] == "completed"
    asyncio.run(main())
