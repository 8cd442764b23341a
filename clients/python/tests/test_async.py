"""The asyncio client: the same calls as coroutines, the async claim, the
async consumer, retries and cancellation."""

import asyncio
import time

import pytest

import idemd
from conftest import API_KEY, URL, uniq


def run(coro):
    return asyncio.run(coro)


def test_async_calls(aclient, op, key):
    async def main():
        assert await aclient.health() == {"status": "ok"}
        assert (await aclient.ready())["status"] == "ready"
        assert op in [o["name"] for o in await aclient.list_operations()]
        assert (await aclient.get_operation(op))["lease_seconds"] == 30
        t = await aclient.issue(op, "u")
        assert len(await aclient.issue_many(op, "u", 2)) == 2
        c = await aclient.claim_token(t["token"], request={"a": 1})
        assert c.attempt == 1
        await aclient.complete_token(t["token"], 1, 201, {"x": 1})
        assert (await aclient.claim_token(t["token"], request={"a": 1})).replayed
        assert (await aclient.introspect(t["token"]))["state"] == "completed"
        t2 = (await aclient.issue(op, "u"))["token"]
        await aclient.revoke(t2)
        await aclient.claim_token((await aclient.issue(op, "u"))["token"])
        k = key + "/odd%key"
        await aclient.claim_key(op, k, subject="u")
        assert (await aclient.get_key(op, k))["key"] == k
        await aclient.release_key(op, k, 1)
        assert (await aclient.claim_key(op, k)).attempt == 2
        await aclient.complete_key(op, k, 2, 200, content=b"bytes")
        assert idemd.response_bytes((await aclient.get_key(op, k))["response"]) == b"bytes"
        vk = "v:" + uniq("k")
        assert (await aclient.get_version(vk))["version"] == 0
        assert await aclient.bump_version(vk, 0) == 1
        with pytest.raises(idemd.VersionMismatchError):
            await aclient.bump_version(vk, 0)
        with pytest.raises(idemd.RecordNotFoundError):
            await aclient.get_key(op, uniq("never"))
        with pytest.raises(idemd.TokenRevokedError):
            await aclient.claim_token(t2)
        put = await aclient.put_operation(uniq("op"), token_ttl_seconds=60, retention_seconds=60,
                                          lease_seconds=5)
        assert put["lease_seconds"] == 5
    run(main())


def test_async_batches(aclient, op):
    async def main():
        a, b = uniq("k"), uniq("k")
        res = await aclient.claim_batch(op, [{"key": a}, {"key": b}])
        assert [r.status for r in res] == [201, 201]
        out = await aclient.complete_batch(op, [{"key": a, "attempt": 1, "status": 200, "body": 1},
                                                {"key": b, "attempt": 1, "status": 204}])
        assert all(o.ok for o in out)
    run(main())


def test_async_claim_context(aclient, op, key):
    async def main():
        async with aclient.claim(operation=op, key=key, request={"a": 1}) as c:
            assert not c.replayed
            await c.complete(201, {"id": 1})
        async with aclient.claim(operation=op, key=key, request={"a": 1}) as c:
            assert c.replayed and c.response["body"] == {"id": 1}
        other = uniq("k")
        with pytest.raises(ValueError):
            async with aclient.claim(operation=op, key=other):
                raise ValueError()
        assert (await aclient.get_key(op, other))["state"] == "issued"

        async def work(claim):
            await asyncio.sleep(0)
            return {"async": claim.attempt}
        k = uniq("k")
        r = await aclient.run_once(work, operation=op, key=k)
        assert not r.replayed and r.value == {"async": 1} and r.response["body"] == {"async": 1}
        again = await aclient.run_once(work, operation=op, key=k)
        assert again.replayed and again.response == r.response
    run(main())


def test_async_cancellation_releases(aclient, op, key):
    async def main():
        started = asyncio.Event()

        async def holder():
            async with aclient.claim(operation=op, key=key):
                started.set()
                await asyncio.sleep(30)
        task = asyncio.create_task(holder())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert (await aclient.get_key(op, key))["state"] == "issued"
    run(main())


def test_async_retry_in_progress(aclient, op, key):
    async def main():
        await aclient.claim_key(op, key)
        patient = idemd.AsyncClient(URL, API_KEY, retry=idemd.Retry(attempts=5, base_delay=0.05))

        async def finish_later():
            await asyncio.sleep(0.5)
            await aclient.complete_key(op, key, 1, 200, {"late": 1})
        t0 = time.monotonic()
        c, _ = await asyncio.gather(patient.claim_key(op, key), finish_later())
        assert c.replayed and time.monotonic() - t0 >= 0.95
        once = idemd.AsyncClient(URL, API_KEY, retry=idemd.Retry(attempts=1))
        k2 = uniq("k")
        await aclient.claim_key(op, k2)
        with pytest.raises(idemd.RequestInProgressError) as e:
            await once.claim_key(op, k2)
        assert e.value.retry_after == 1
    run(main())


def test_async_consume(aclient, op):
    async def main():
        ids = [uniq("evt") for _ in range(4)]
        await aclient.claim_key(op, ids[1])
        await aclient.complete_key(op, ids[1], 1, 200, {"old": True})

        async def handler(m, claim):
            await asyncio.sleep(0.01)
            if m == ids[2]:
                raise RuntimeError("flaky")
            return {"m": m}
        out = await aclient.consume(op, ids, key=lambda m: m, handler=handler, concurrency=2)
        assert [o.outcome for o in out] == ["processed", "replayed", "failed", "processed"]
        assert (await aclient.get_key(op, ids[2]))["state"] == "issued"
        assert (await aclient.get_key(op, ids[3]))["response"]["body"] == {"m": ids[3]}
    run(main())
