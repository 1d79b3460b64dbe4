"""A listing reads its page's rows, with their small documents, in one go; the big ones a
group at a time while the answer is written, holding no connection between groups; and a
task is listed as its row was when the page was read."""

import asyncio
from contextlib import AsyncExitStack

import pytest

from taskhub.rules.states import TaskStatus
from taskhub.services import task_listing
from taskhub.services.task_listing import list_job_tasks, list_room_tasks
from taskhub.settings import Settings
from taskhub.store.database import Database
from tests.support.api import JOB
from tests.support.big_tasks import BIG, completed, points


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, db_pool_size=1)


async def every_reader_is_free(db: Database, url: str) -> None:
    """Every connection of the read pool can be had at once (PostgreSQL: the pool's one;
    SQLite: its two readers)."""
    async with AsyncExitStack() as stack:
        for _ in range(1 if url.startswith("postgresql") else 2):
            await asyncio.wait_for(stack.enter_async_context(db.read()), 5)


async def test_no_connection_is_held_between_groups(alice, job, app, database_url, monkeypatch):
    monkeypatch.setattr(task_listing, "FIRST_GROUP_TASKS", 1)
    monkeypatch.setattr(task_listing, "MOST_GROUP_TASKS", 1)
    for seed in range(3):
        await alice.submit(JOB, payload=points(BIG, seed=seed))
    listing = await list_room_tasks(app.hub.db, "room1", None, 50, 0)
    groups = []
    async for group in listing.groups():
        await every_reader_is_free(app.hub.db, database_url)
        groups.append([task.id for task in group])
    assert groups == [[task.id] for task in listing.page.items]


async def test_small_tasks_come_with_the_page_and_big_ones_are_read_after(alice, job, app):
    small = await alice.submit(JOB, payload={"angle": 1})
    big = await alice.submit(JOB, payload=points(BIG))
    listing = await list_job_tasks(app.hub.db, "room1", JOB, None, 50, 0)
    assert [str(task.id) for task in listing.page.items] == [big["id"], small["id"]]
    assert {str(task_id) for task_id in listing.deferred} == {big["id"]}
    assert not listing.complete
    big_listed, small_listed = listing.page.items
    assert big_listed.payload is None and small_listed.payload is not None


async def test_a_task_is_listed_as_its_row_was_when_the_page_was_read(alice, job, app):
    """Its big documents are read later, but a payload never changes and a result comes
    only with ``completed``, which is final: a task completed meanwhile is listed as still
    running, without the result it has now."""
    task = await alice.submit(JOB, payload=points(BIG))
    claimed = await alice.claim(job["worker_id"])
    token = claimed["claim_token"]
    assert (await alice.transition(task["id"], "running", claim_token=token)).status_code == 200
    listing = await list_room_tasks(app.hub.db, "room1", None, 50, 0)
    response = await alice.transition(
        task["id"], "completed", claim_token=token, result=points(BIG, seed=7)
    )
    assert response.status_code == 200, response.text[:300]
    [listed] = [item async for group in listing.groups() for item in group]
    assert listed.status == "running" and listed.result is None
    assert listed.payload is not None
    now = await alice.task(task["id"])
    assert now["status"] == "completed" and len(now["result"]["points"]) == BIG


async def test_a_completed_task_s_big_result_is_read_with_its_group(alice, job, app):
    await alice.submit(JOB, payload={"angle": 1})
    done = await completed(alice, job["worker_id"], points(BIG, seed=3))
    listing = await list_room_tasks(app.hub.db, "room1", TaskStatus.COMPLETED, 50, 0)
    assert {str(task_id) for task_id in listing.deferred} == {done["id"]}
    [listed] = [item async for group in listing.groups() for item in group]
    assert listed.result is not None and listed.status == "completed"
