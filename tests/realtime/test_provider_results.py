"""Where providers' results live (``app/realtime/provider_results.py``), in this process and
in Redis (two stores on one Redis namespace: two replicas):

- no lost wake-up: a read gets a result posted at any point of its protocol — before it
  watches, between its watch and its look, between its look and its in-flight lock, while
  it dispatches, while it waits — whichever replica posts it (every interleaving, checked
  one by one);
- waiting readers of one key share one copy of the result;
- the cache keeps at most its cap of bytes, evicting the least recently read (in process)
  or the first to expire (Redis) first: a property over random puts and gets, against a
  model.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import redis.asyncio as aioredis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from taskhub.realtime.provider_results import (
    LocalProviderResults,
    ProviderResults,
    RedisProviderResults,
    ResultWatch,
    StoredResult,
    result_key,
)
from taskhub.rules.providers import ProviderRecord, request_hash
from taskhub.rules.records import Principal
from taskhub.services import providers as service
from taskhub.services.users import create_user
from taskhub.store.database import Database
from tests.support.databases import REDIS_URL

STEPS = ("before-watch", "after-watch", "after-look", "in-dispatch", "while-waiting")
# Long enough that a lost wake-up shows as a read without its result.
WAIT = 5.0
PARAMS = {"index": "1"}


@contextlib.asynccontextmanager
async def redis_pair(cap: int = 1 << 20) -> AsyncIterator[tuple[RedisProviderResults, ...]]:
    """Two started Redis stores under one fresh namespace (two replicas), deleted after."""
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    stores = (
        RedisProviderResults(REDIS_URL, namespace, cap),
        RedisProviderResults(REDIS_URL, namespace, cap),
    )
    for store in stores:
        await store.start()
    try:
        yield stores
    finally:
        for store in stores:
            await store.close()
        async with aioredis.Redis.from_url(REDIS_URL) as client:
            keys = [key async for key in client.scan_iter(f"{namespace}:*")]
            if keys:
                await client.delete(*keys)


@dataclass
class Stepped:
    """A results store that posts the result at one ``step`` of a read's protocol (through
    ``poster``: this store, or another replica's)."""

    inner: ProviderResults
    poster: ProviderResults
    step: str
    key: str
    result: StoredResult
    posted: list[str] = field(default_factory=list)

    async def post(self) -> None:
        self.posted.append(self.step)
        await self.poster.put(self.key, self.result, 60)

    async def get(self, key: str) -> StoredResult | None:
        if self.step == "after-watch":
            await self.post()
        found = await self.inner.get(key)
        if self.step == "after-look":
            await self.post()
        return found

    async def claim(self, key: str, ttl: float) -> bool:
        return await self.inner.claim(key, ttl)

    async def release(self, key: str) -> None:
        await self.inner.release(key)

    async def put(self, key: str, result: StoredResult, ttl: float) -> None:
        await self.inner.put(key, result, ttl)

    def watch(self, key: str) -> contextlib.AbstractContextManager[ResultWatch]:
        return self.inner.watch(key)

    def release_all(self) -> None:
        self.inner.release_all()

    @property
    def stored_bytes(self) -> int:
        return self.inner.stored_bytes


@pytest.fixture
async def provider(db: Database) -> tuple[Principal, ProviderRecord]:
    user_id, _token = await create_user(db, "owner")
    owner = Principal(user_id, "owner", False)
    registration, _events = await service.register_provider(
        db,
        owner,
        "lab",
        category="frames",
        name="traj",
        schema={},
        content_type="application/octet-stream",
        worker_id=None,
        allowed_categories=None,
        superuser_categories=[],
    )
    return owner, registration.provider


async def read_with_post_at(
    db: Database,
    store: ProviderResults,
    poster: ProviderResults,
    step: str,
    owner: Principal,
    record: ProviderRecord,
) -> tuple[StoredResult | None, list[str]]:
    key = result_key(record.id, request_hash(PARAMS))
    expected = StoredResult(f"answer posted {step}".encode())
    stepped = Stepped(store, poster, step, key, expected)
    background: list[asyncio.Task[None]] = []

    async def dispatch(_provider: ProviderRecord, _digest: str, _params: str) -> None:
        if step == "in-dispatch":
            await stepped.post()
        elif step == "while-waiting":  # posted once the reader is waiting
            background.append(asyncio.create_task(stepped.post()))

    if step == "before-watch":
        await stepped.post()
    read = await service.read_provider(
        db,
        stepped,
        owner,
        "lab",
        record.full_name,
        PARAMS,
        wait=WAIT,
        inflight_seconds=30,
        superuser_categories=(),
        dispatch=dispatch,
    )
    await asyncio.gather(*background)
    assert read.result is None or read.result == expected
    return read.result, stepped.posted


@pytest.mark.parametrize("step", STEPS)
async def test_no_wake_up_is_lost_in_process(db, provider, step):
    owner, record = provider
    store = LocalProviderResults(1 << 20)
    result, posted = await read_with_post_at(db, store, store, step, owner, record)
    assert posted == [step]
    assert result is not None, f"a result posted {step} was missed"


@pytest.mark.parametrize("poster", ["same-replica", "other-replica"])
@pytest.mark.parametrize("step", STEPS)
async def test_no_wake_up_is_lost_across_replicas(db, provider, step, poster):
    owner, record = provider
    async with redis_pair() as (a, b):
        result, posted = await read_with_post_at(
            db, a, a if poster == "same-replica" else b, step, owner, record
        )
    assert posted == [step]
    assert result is not None, f"a result posted {step} on the {poster} was missed"


@pytest.mark.parametrize("kind", ["local", "redis"])
async def test_waiting_readers_of_a_key_share_one_copy_of_the_result(kind):
    data = b"x" * (3 * 1024 * 1024)
    async with contextlib.AsyncExitStack() as stack:
        if kind == "local":
            reader_side = poster = LocalProviderResults(8 * 1024 * 1024)
        else:
            reader_side, poster = await stack.enter_async_context(redis_pair(8 * 1024 * 1024))
        with contextlib.ExitStack() as watching:
            watches = [watching.enter_context(reader_side.watch("k")) for _ in range(20)]
            assert len({id(watch) for watch in watches}) == 1
            await poster.put("k", StoredResult(bytes(data)), 60)
            await asyncio.wait_for(watches[0].woken.wait(), 5)
            assert watches[0].result is not None and watches[0].result.data == data
            assert len({id(watch.result.data) for watch in watches if watch.result}) == 1


# --- the cap, against a model ---------------------------------------------------------

CAP = 1000
sizes = st.integers(min_value=1, max_value=400)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from("abcdefgh"), sizes),
        st.tuples(st.just("get"), st.sampled_from("abcdefgh"), st.just(0)),
    ),
    min_size=1,
    max_size=40,
)


@given(operations)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_in_process_cache_keeps_its_cap_evicting_the_least_recently_read(
    steps: list[tuple[str, str, int]],
) -> None:
    async def run() -> None:
        store = LocalProviderResults(CAP)
        model: OrderedDict[str, int] = OrderedDict()
        for operation, key, size in steps:
            if operation == "put":
                model.pop(key, None)
                while model and sum(model.values()) + size > CAP:
                    model.popitem(last=False)
                model[key] = size
                await store.put(key, StoredResult(b"x" * size), 60)
            else:
                found = await store.get(key)
                assert (found is None) == (key not in model)
                if found is not None:
                    assert len(found.data) == model[key]
                    model.move_to_end(key)
            assert store.stored_bytes == sum(model.values()) <= CAP

    asyncio.run(run())


@given(operations.filter(lambda steps: any(op == "put" for op, _k, _s in steps)))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_the_redis_cache_keeps_its_cap_evicting_the_oldest(
    steps: list[tuple[str, str, int]],
) -> None:
    async def run() -> None:
        async with redis_pair(CAP) as (store, _other):
            model: OrderedDict[str, int] = OrderedDict()  # by expiry: by when it was put
            for operation, key, size in steps:
                if operation == "put":
                    model.pop(key, None)
                    model[key] = size
                    while sum(model.values()) > CAP:
                        model.popitem(last=False)
                    await store.put(key, StoredResult(b"x" * size), 60)
                else:
                    found = await store.get(key)
                    assert (found is None) == (key not in model)
                    if found is not None:
                        assert len(found.data) == model[key]
            async with aioredis.Redis.from_url(REDIS_URL) as client:
                total = int(await client.get(f"{store._prefix}:provider-results:bytes") or 0)
            assert total == sum(model.values()) <= CAP

    asyncio.run(run())


def test_a_failed_read_keeps_its_problem_status_in_redis() -> None:
    async def run() -> None:
        async with redis_pair() as (a, b):
            await a.put("k", StoredResult(b'{"status":422}', 422), 60)
            assert await b.get("k") == StoredResult(b'{"status":422}', 422)
            await a.put("k", StoredResult(b"fine"), 60)  # a later answer is not failed
            assert await b.get("k") == StoredResult(b"fine")

    asyncio.run(run())
