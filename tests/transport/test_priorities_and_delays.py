"""Priorities (higher first, FIFO within a priority) and delayed tasks (``run_at`` /
``delay_seconds``): what claims hand out, what ``queue_position`` says, and when
``task_available`` goes out."""

import asyncio
from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID

import pytest
from sqlalchemy import select

from taskhub.duties import due_announcer
from taskhub.rules.events import Event, TaskAvailable
from taskhub.store.tables import task_table
from tests.support.api import JOB, assert_problem
from tests.support.databases import until_a_lock_is_waited_for


def announced(events: list[Event]) -> list[str]:
    return [e.task_id for e in events if isinstance(e, TaskAvailable)]


async def positions(alice) -> dict[str, int | None]:
    page = (await alice.get("/rooms/room1/tasks", params={"limit": 500})).json()
    return {t["id"]: t["queue_position"] for t in page["items"]}


async def test_higher_priority_is_claimed_first_fifo_within_a_priority(alice, job):
    low1 = await alice.submit(JOB, priority=-1)
    mid1 = await alice.submit(JOB)
    high1 = await alice.submit(JOB, priority=5)
    mid2 = await alice.submit(JOB)
    high2 = await alice.submit(JOB, priority=5)
    expected = [high1, high2, mid1, mid2, low1]
    claimed = [(await alice.claim(job["worker_id"]))["id"] for _ in expected]
    assert claimed == [t["id"] for t in expected]


async def test_a_batch_claim_takes_the_head_of_the_queue_in_order(alice, job):
    low = await alice.submit(JOB)
    high = await alice.submit(JOB, priority=1)
    response = await alice.post(
        "/tasks/claim", json={"worker_id": job["worker_id"], "max_tasks": 2}
    )
    assert [t["id"] for t in response.json()["tasks"]] == [high["id"], low["id"]]


async def test_queue_positions_follow_priority(alice, job):
    first = await alice.submit(JOB)
    second = await alice.submit(JOB)
    urgent = await alice.submit(JOB, priority=10)
    assert (first["queue_position"], second["queue_position"]) == (1, 2)
    assert urgent["queue_position"] == 1 and urgent["priority"] == 10
    assert (await alice.task(first["id"]))["queue_position"] == 2
    assert await positions(alice) == {urgent["id"]: 1, first["id"]: 2, second["id"]: 3}


async def test_a_delayed_task_waits_for_its_time_and_queues_behind_the_ready_ones(
    alice, job, published, recorder
):
    # Long enough for the checks below to run before it comes due, even on a busy machine.
    delayed = await alice.submit(JOB, delay_seconds=2, priority=100)
    ready = await alice.submit(JOB)
    assert delayed["run_at"] is not None and ready["run_at"] is None
    assert datetime.fromisoformat(delayed["run_at"]) > datetime.fromisoformat(delayed["created_at"])
    assert announced(published) == [ready["id"]]  # not the delayed one, not yet
    assert await positions(alice) == {ready["id"]: 1, delayed["id"]: 2}
    assert (await alice.claim(job["worker_id"]))["id"] == ready["id"]
    assert await alice.claim(job["worker_id"]) is None

    await recorder.wait_for(lambda events: delayed["id"] in announced(events))
    due_at = datetime.now(UTC)
    assert due_at >= datetime.fromisoformat(delayed["run_at"])
    assert (await alice.claim(job["worker_id"]))["id"] == delayed["id"]


async def test_run_at_schedules_a_task_and_a_past_one_is_ready_at_once(alice, job):
    later = datetime.now(UTC) + timedelta(hours=1)
    scheduled = await alice.submit(JOB, run_at=later.isoformat())
    assert datetime.fromisoformat(scheduled["run_at"]) == later
    past = await alice.submit(JOB, run_at=(datetime.now(UTC) - timedelta(hours=1)).isoformat())
    assert past["run_at"] is None and past["queue_position"] == 1
    assert (await alice.claim(job["worker_id"]))["id"] == past["id"]
    assert await alice.claim(job["worker_id"]) is None


async def test_a_run_at_sent_with_another_offset_is_answered_in_utc(alice, job):
    """Every timestamp the hub writes is UTC: the submit's answer too, not the offset the
    client chose."""
    later = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    sent = later.astimezone(timezone(timedelta(hours=5))).isoformat()
    scheduled = await alice.submit(JOB, run_at=sent)
    read = await alice.task(scheduled["id"])
    assert scheduled["run_at"] == read["run_at"]
    assert datetime.fromisoformat(read["run_at"]) == later
    assert datetime.fromisoformat(read["run_at"]).utcoffset() == timedelta(0)


async def test_delayed_tasks_queue_by_their_time(alice, job):
    late = await alice.submit(JOB, delay_seconds=3600)
    soon = await alice.submit(JOB, delay_seconds=60)
    ready = await alice.submit(JOB)
    assert await positions(alice) == {ready["id"]: 1, soon["id"]: 2, late["id"]: 3}


async def test_a_delayed_task_can_be_cancelled_before_it_is_due(alice, job, published, recorder):
    # Long enough for the cancel to land before it comes due, even on a busy machine.
    task = await alice.submit(JOB, delay_seconds=2)
    response = await alice.transition(task["id"], "cancelled")
    assert response.json()["status"] == "cancelled"
    # Due just after the cancelled one: once it is announced, the timer has looked past both.
    witness = await alice.submit(JOB, delay_seconds=2)
    assert datetime.fromisoformat(witness["run_at"]) > datetime.fromisoformat(task["run_at"])
    await recorder.wait_for(lambda events: witness["id"] in announced(events))
    assert announced(published) == [witness["id"]]
    assert (await alice.claim(job["worker_id"]))["id"] == witness["id"]
    assert await alice.claim(job["worker_id"]) is None


@pytest.mark.parametrize(
    "extra",
    [
        {"run_at": "2030-01-01T00:00:00", "delay_seconds": 5},
        {"run_at": "2030-01-01T00:00:00"},  # no offset: ambiguous
        {"run_at": "tomorrow"},
        {"run_at": "9999-12-31T23:00:00-05:00"},  # past the calendar once in UTC
        {"run_at": (datetime.now(UTC) + timedelta(days=400)).isoformat()},  # like delay_seconds
        {"delay_seconds": -1},
        {"delay_seconds": 10**9},
        {"priority": 10**7},
        {"priority": 1.5},
    ],
)
async def test_bad_schedules_and_priorities_are_422_and_store_nothing(alice, job, extra):
    if "delay_seconds" in extra and "run_at" in extra:
        extra = {**extra, "run_at": "2030-01-01T00:00:00+00:00"}
    response = await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {}, **extra})
    assert_problem(response, 422, "validation-error")
    assert (await alice.get("/rooms/room1/tasks")).json()["total"] == 0


async def test_every_task_of_a_moment_is_announced_however_many_share_it(
    alice, job, recorder, monkeypatch
):
    """The announcer reads due tasks in batches; one that ends inside a run of tasks due at
    the same moment goes on with the rest of that run."""
    monkeypatch.setattr(due_announcer, "BATCH", 3)
    moment = (datetime.now(UTC) + timedelta(seconds=1.5)).isoformat()
    tasks = [await alice.submit(JOB, run_at=moment) for _ in range(7)]
    ids = {task["id"] for task in tasks}
    await recorder.wait_for(lambda events: ids <= set(announced(events)), seconds=15)


async def test_the_announcer_queues_a_task_that_came_due_before_it_announces_it(
    alice, job, recorder, db
):
    """Announced, a due task is in the claim queue, no longer among the waiting ones."""
    delayed = await alice.submit(JOB, delay_seconds=1)
    assert await waiting_flags(db) == {UUID(delayed["id"]): True}
    await recorder.wait_for(lambda events: delayed["id"] in announced(events))
    assert await waiting_flags(db) == {UUID(delayed["id"]): False}
    assert (await alice.task(delayed["id"]))["queue_position"] == 1


async def waiting_flags(db) -> dict[UUID, bool]:
    async with db.read() as conn:
        rows = await conn.execute(select(task_table.c.id, task_table.c.waiting))
        return {row.id: bool(row.waiting) for row in rows}


async def test_a_task_published_while_the_timer_reads_its_next_look_is_announced_on_time(
    alice, job, recorder, monkeypatch
):
    """A task due before the timer's next look, published while the timer reads when that
    look is (the read cannot see it), still moves the look forward."""
    read = due_announcer.next_due
    early: list[dict] = []

    async def read_then_submit_an_earlier_task(db, after):
        found = await read(db, after)
        if found is not None and not early:
            early.append(await alice.submit(JOB, delay_seconds=0.5))
        return found

    monkeypatch.setattr(due_announcer, "next_due", read_then_submit_an_earlier_task)
    # Due long after the early one: a loaded machine announces the early one late, but
    # well before this (and before the timer's fallback look, 30 s on).
    late = await alice.submit(JOB, delay_seconds=25)
    await recorder.wait_for(
        lambda events: bool(early) and early[0]["id"] in announced(events), seconds=20
    )
    assert late["id"] not in announced(recorder.events)


async def test_a_look_that_fails_is_tried_again_shortly(alice, job, recorder, monkeypatch):
    """A look that fails (the database gone for a moment) is tried again within a second,
    not at the fallback look 30 s later."""
    read = due_announcer.next_due
    failures: list[str] = []

    async def fails_once(db, after):
        if not failures:
            failures.append("next_due")
            raise ConnectionError("database gone for a moment")
        return await read(db, after)

    monkeypatch.setattr(due_announcer, "next_due", fails_once)
    task = await alice.submit(JOB, delay_seconds=1)
    await recorder.wait_for(lambda events: task["id"] in announced(events))
    assert failures == ["next_due"]


@pytest.mark.postgres_only
async def test_a_delayed_task_committed_after_a_look_went_past_its_time_is_announced(
    alice, job, db, recorder, database_url
):
    """A submit whose commit lands after the announcer has read past the task's ``run_at``
    (here held up by a lock on its job) is queued and announced when it is published."""
    await alice.register(name="Other")
    conn = await db.engine.connect()
    hold = await conn.begin()
    await conn.exec_driver_sql("SELECT id FROM job WHERE id = $1 FOR UPDATE", (UUID(job["id"]),))
    body = {"payload": {}, "delay_seconds": 0.2}
    held = asyncio.create_task(alice.post(f"/rooms/room1/tasks/{JOB}", json=body))
    await until_a_lock_is_waited_for(database_url)  # the submit waits for the job's row
    assert not held.done()
    looked = await alice.submit("room1:modifiers:Other", delay_seconds=0.6)
    await recorder.wait_for(lambda events: looked["id"] in announced(events))
    await hold.commit()
    await conn.close()
    task = (await held).json()
    await recorder.wait_for(lambda events: task["id"] in announced(events))
    assert (await waiting_flags(db))[UUID(task["id"])] is False
