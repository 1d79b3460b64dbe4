"""The embedded broker at shutdown: ``@internal`` runs under way get the graceful period to
finish; the ones still running then are cancelled before the database closes, not left
running on it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from uuid import UUID

import httpx
import pytest

from taskhub.main import TaskhubApp, create_app
from taskhub.rules.states import TaskStatus
from taskhub.services import task_reads
from taskhub.settings import Settings
from tests.dispatch import slow_jobs
from tests.support.api import ApiClient
from tests.support.events import EventRecorder, statuses

SLEEP = "@internal:modifiers:Sleep"
GRACE = 1.0


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        internal_job_modules=[slow_jobs.MODULE],
        graceful_shutdown_seconds=GRACE,
    )


@asynccontextmanager
async def embedded_hub(
    settings: Settings, token: str
) -> AsyncIterator[tuple[ApiClient, EventRecorder]]:
    """A hub in this process; leaving the block shuts it down as a server does."""
    app: TaskhubApp = create_app(settings)
    recorder = EventRecorder()
    async with app.lifespan_context():
        app.hub.publisher.add_sink(recorder)
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as http:
            yield ApiClient(http, token), recorder


async def start_sleeping(
    client: ApiClient, recorder: EventRecorder, seconds: float, marker: Path
) -> str:
    task = await client.submit(SLEEP, payload={"seconds": seconds, "marker": str(marker)})
    await recorder.wait_for(lambda events: TaskStatus.RUNNING in statuses(events, task["id"]))
    return task["id"]


async def test_a_run_shorter_than_the_grace_finishes_before_the_hub_stops(
    settings, tokens, db, tmp_path
):
    marker = tmp_path / "finished"
    async with embedded_hub(settings, tokens.alice) as (alice, recorder):
        task_id = await start_sleeping(alice, recorder, GRACE / 4, marker)
    assert marker.exists()
    assert (await task_reads.get_task(db, UUID(task_id))).status == TaskStatus.COMPLETED


async def test_a_run_longer_than_the_grace_is_cancelled_when_the_hub_stops(
    settings, tokens, db, tmp_path
):
    marker = tmp_path / "finished"
    seconds = GRACE + 1.5
    async with embedded_hub(settings, tokens.alice) as (alice, recorder):
        task_id = await start_sleeping(alice, recorder, seconds, marker)
    # A run that is never to end has no event to wait for: wait past the moment it would.
    await asyncio.sleep(seconds + 0.5)
    assert not marker.exists()
    # Left running, for the sweeper's internal timeout (as when a taskiq worker is killed).
    assert (await task_reads.get_task(db, UUID(task_id))).status == TaskStatus.RUNNING
