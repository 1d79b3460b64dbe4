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

from app.persistence.models import task_table
from app.persistence.types import utcnow
from app.settings import Settings
from app.sweeper import Sweeper
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
