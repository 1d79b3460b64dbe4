"""An ``@internal`` task that nobody dispatched in time (its submit's process died before
the enqueue; it came due while no hub ran) is dispatched by the sweeper, and timed from
then: a taskiq worker that is slow to start it does not see it failed "Internal worker
timeout" a cycle later. With the Redis broker and no taskiq worker running, the message
waits in Redis as it would for a busy or restarting worker."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from uuid import UUID

import pytest
import redis.asyncio as redis
from sqlalchemy import update

from taskhub.clock import utcnow
from taskhub.duties.sweeper import Sweeper
from taskhub.settings import Settings
from taskhub.store.tables import task_table
from tests.support.databases import REDIS_URL

SUMMARY = "@internal:analysis:RoomSummary"


@pytest.fixture
async def settings(database_url: str):
    namespace = f"test-late-{uuid.uuid4().hex[:12]}"
    yield Settings(
        database_url=database_url,
        redis_url=REDIS_URL,
        redis_namespace=namespace,
        sweeper_enabled=False,
        internal_task_timeout_seconds=60,
    )
    async with redis.Redis.from_url(REDIS_URL) as client:
        keys = [key async for key in client.scan_iter(f"{namespace}*")]
        if keys:
            await client.delete(*keys)


async def test_a_task_dispatched_late_is_timed_from_its_dispatch(app, alice):
    hub = app.hub
    sweeper = Sweeper(hub.settings, hub.db, hub.publisher, dispatch=hub.internal.dispatch_missed)
    task = await alice.submit(SUMMARY, payload={}, delay_seconds=3600)  # not dispatched now
    two_hours_ago = utcnow() - timedelta(hours=2)
    async with hub.db.write() as conn:  # due two hours ago, and never dispatched
        await conn.execute(
            update(task_table)
            .where(task_table.c.id == UUID(task["id"]))
            .values(created_at=two_hours_ago, run_at=two_hours_ago)
        )
    assert (await sweeper.run_once()).internal_dispatched == 1
    dispatched = await alice.task(task["id"])
    assert dispatched["status"] == "claimed"
    # Now: the timeout counts from it.
    assert datetime.fromisoformat(dispatched["run_at"]) > utcnow() - timedelta(minutes=1)
    report = await sweeper.run_once()  # no taskiq worker has started it yet
    assert report.tasks_failed == 0
    assert (await alice.task(task["id"]))["status"] == "claimed"


async def test_messages_every_executor_acknowledged_are_trimmed_from_the_stream(app, alice):
    """``XACK`` keeps a message in the stream: the sweeper drops the acknowledged ones,
    and never one an executor has not taken yet."""
    hub = app.hub
    stream, group = hub.settings.redis_key("internal"), hub.settings.redis_key("executors")
    for _ in range(3):
        await alice.submit(SUMMARY, payload={})
    async with redis.Redis.from_url(REDIS_URL) as client:
        assert (await hub.sweeper.run_once()).internal_messages_trimmed == 0  # none taken yet
        taken = await client.xreadgroup(group, "executor", {stream: ">"}, count=2)
        first, second = (message_id for message_id, _fields in taken[0][1])
        await client.xack(stream, group, first, second)  # the third is not taken yet
        assert (await hub.sweeper.run_once()).internal_messages_trimmed == 1
        assert await client.xlen(stream) == 2  # the last delivered one, and the waiting one
        left = await client.xreadgroup(group, "executor", {stream: ">"})
        assert len(left[0][1]) == 1  # the waiting one is still there to be taken
