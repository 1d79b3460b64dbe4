"""``TASKHUB_SUBMIT_REQUIRES_LIVE_WORKER`` (docs/protocol.md, "Submit a task"): a submit to
a job no live worker serves is refused with 409 ``no-workers-available`` and stores
nothing; ``@internal`` jobs, replays of a key and hubs without the setting are unaffected."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest
from sqlalchemy import update

from taskhub.clock import utcnow
from taskhub.main import TaskhubApp
from taskhub.settings import Settings
from taskhub.store.tables import worker_table
from tests.support.api import JOB, ApiClient, assert_problem

SUMMARY = "@internal:analysis:RoomSummary"


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, submit_requires_live_worker=True)


async def tasks_in_room(client: ApiClient) -> int:
    return int((await client.get("/rooms/room1/tasks")).json()["total"])


async def silence(app: TaskhubApp, worker_id: str) -> None:
    """The worker's last heartbeat, older than the worker timeout."""
    long_ago = utcnow() - timedelta(seconds=app.hub.settings.worker_timeout_seconds + 1)
    async with app.hub.db.write() as conn:
        await conn.execute(
            update(worker_table).where(worker_table.c.id == UUID(worker_id)).values(
                last_heartbeat=long_ago
            )
        )  # fmt: skip


async def test_a_job_with_a_live_worker_takes_submits(alice, bob, job):
    assert (await bob.submit(JOB))["status"] == "pending"


async def test_a_job_whose_workers_are_silent_refuses_submits(app, alice, bob, job):
    await silence(app, job["worker_id"])
    before = await tasks_in_room(alice)
    refused = await bob.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {"angle": 1}})
    body = assert_problem(refused, 409, "no-workers-available")
    assert JOB in body["detail"]
    assert await tasks_in_room(alice) == before
    assert (await alice.patch(f"/workers/{job['worker_id']}")).status_code == 200  # alive again
    assert (await bob.submit(JOB))["status"] == "pending"


async def test_a_job_whose_worker_left_refuses_submits(alice, bob, job):
    kept = await bob.submit(JOB)  # a pending task keeps the job live after its worker goes
    assert (await alice.delete(f"/workers/{job['worker_id']}")).status_code == 204
    refused = await bob.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {}})
    assert_problem(refused, 409, "no-workers-available")
    assert (await bob.task(kept["id"]))["status"] == "pending"
    assert await tasks_in_room(alice) == 1


async def test_a_repeated_key_is_answered_even_without_a_live_worker(app, alice, bob, job):
    key = {"Idempotency-Key": "once"}
    first = await bob.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {}}, headers=key)
    assert first.status_code == 202, first.text
    await silence(app, job["worker_id"])
    again = await bob.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {}}, headers=key)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]
    other = await bob.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {}},
                           headers={"Idempotency-Key": "other"})  # fmt: skip
    assert_problem(other, 409, "no-workers-available")


async def test_internal_jobs_need_no_worker(bob):
    answered = await bob.post(f"/rooms/room1/tasks/{SUMMARY}", json={"payload": {}})
    assert answered.status_code == 202, answered.text


async def test_without_the_setting_a_job_without_workers_takes_submits(app, alice, bob, job):
    app.hub.settings.submit_requires_live_worker = False
    await silence(app, job["worker_id"])
    assert (await bob.submit(JOB))["status"] == "pending"
