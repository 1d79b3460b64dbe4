"""``@internal`` jobs on the embedded default: the in-memory broker runs them in-process."""

from datetime import datetime, timedelta
from uuid import UUID, uuid4

import pytest
from sqlalchemy import update

from taskhub.clock import utcnow
from taskhub.dispatch.executor import retried_write
from taskhub.duties.sweeper import UNDISPATCHED_GRACE
from taskhub.rules.states import TaskStatus
from taskhub.services import internal_tasks
from taskhub.store.tables import task_table
from taskhub.validation import payload_checks
from tests.dispatch import slow_jobs
from tests.support.api import assert_problem
from tests.support.costly_payloads import COSTLY, POINTS_SCHEMA, until_checks_waiting

SUMMARY = "@internal:analysis:RoomSummary"
NOT_JSON = "@internal:modifiers:NotJson"
VALIDATE = "@internal:analysis:ValidatePayload"


@pytest.fixture
def settings(settings):
    """The suite's, with the test jobs (``tests/dispatch/slow_jobs.py``) loaded too."""
    return settings.model_copy(update={"internal_job_modules": [slow_jobs.MODULE]})


async def wait_done(client, task_id: str) -> dict:
    response = await client.get(f"/tasks/{task_id}", headers={"Prefer": "wait=5"})
    return response.json()


async def test_built_in_jobs_are_registered_at_start_up(alice):
    job = (await alice.get(f"/rooms/room1/jobs/{VALIDATE}")).json()
    assert job["schema"]["properties"].keys() >= {"job", "payload"}
    assert job["workers"] == []


async def test_internal_task_is_dispatched_claimed_and_completed(alice, bob):
    job = await alice.register()
    task = await alice.submit("room1:modifiers:Rotate")
    await alice.claim(job["worker_id"])
    await alice.transition(task["id"], "running")
    await alice.transition(task["id"], "failed", error="kaput")
    submitted = await bob.submit(SUMMARY, payload={"failures": 3})
    assert submitted["status"] in {"claimed", "running", "completed"}
    assert submitted["attempt"] == 1
    done = await wait_done(bob, submitted["id"])
    assert done["status"] == "completed", done
    summary = done["result"]
    assert summary["room_id"] == "room1"
    assert summary["by_status"]["failed"] == 1
    assert summary["by_job"]["room1:modifiers:Rotate"] == 1
    assert summary["latest_failures"][0]["error"] == "kaput"
    assert done["started_at"] and done["completed_at"]


async def test_validate_payload_reports_schema_errors(alice):
    await alice.register(schema={"type": "object", "properties": {"angle": {"type": "number"}}})
    task = await alice.submit(
        VALIDATE, payload={"job": "room1:modifiers:Rotate", "payload": {"angle": "steep"}}
    )
    result = (await wait_done(alice, task["id"]))["result"]
    assert result["valid"] is False
    assert result["errors"][0]["loc"] == ["angle"]


async def test_validate_payload_checks_as_the_hub_does_in_linear_time(alice):
    """The job's schema is any user's: ``ValidatePayload`` matches its patterns with RE2,
    as a submit does (Python's re would take hours over this payload, on the event loop)."""
    pattern = {"type": "string", "pattern": "^(a+)+$"}
    await alice.register(schema={"type": "object", "properties": {"s": pattern}})
    task = await alice.submit(
        VALIDATE, payload={"job": "room1:modifiers:Rotate", "payload": {"s": "a" * 40 + "!"}}
    )
    result = (await wait_done(alice, task["id"]))["result"]
    assert (result["valid"], result["errors"][0]["loc"]) == (False, ["s"])


async def test_validate_payload_checks_a_costly_payload_beside_the_event_loop(alice, bob):
    """On the embedded default the job runs in the hub's process: a costly payload is
    validated on the payload thread there, as a submit's is, while the hub answers others."""
    await alice.register(name="Points", schema=POINTS_SCHEMA)
    task = await alice.submit(
        VALIDATE, payload={"job": "room1:modifiers:Points", "payload": COSTLY}
    )
    await until_checks_waiting(payload_checks.PROCESS_CHECKS, 1)
    assert (await bob.get("/rooms/room1/tasks")).status_code == 200
    assert payload_checks.PROCESS_CHECKS.waiting == 1, "answered while it was validated"
    result = (await wait_done(alice, task["id"]))["result"]
    assert (result["valid"], result["errors"]) == (True, [])


async def test_a_failing_internal_job_ends_failed_with_its_error(alice):
    task = await alice.submit(VALIDATE, payload={"job": "room1:modifiers:Nope"})
    done = await wait_done(alice, task["id"])
    assert done["status"] == "failed"
    assert "not found" in done["error"]


async def test_internal_payload_is_checked_against_the_jobs_schema_at_submit(alice):
    response = await alice.post(
        f"/rooms/room1/tasks/{VALIDATE}", json={"payload": {"payload": {}}}
    )  # "job" missing
    problem = assert_problem(response, 422, "validation-error")
    assert problem["errors"][0]["loc"] == ["body", "payload"]
    assert (await alice.get("/rooms/room1/tasks")).json()["total"] == 0


async def test_internal_tasks_are_never_claimed_by_remote_workers(admin):
    schema = (await admin.get(f"/rooms/r/jobs/{SUMMARY}")).json()["schema"]
    worker = await admin.register(
        room="@internal", name="RoomSummary", category="analysis", schema=schema
    )
    await admin.submit(SUMMARY)
    assert await admin.claim(worker["worker_id"]) is None


async def test_no_executor_means_503_and_no_row(alice, admin):
    await admin.register(room="@internal", name="Unserved")
    response = await alice.post("/rooms/room1/tasks/@internal:modifiers:Unserved", json={})
    assert_problem(response, 503, "internal-job-not-configured")
    assert (await alice.get("/rooms/room1/tasks")).json()["total"] == 0


async def test_a_delayed_internal_task_waits_for_its_time_then_runs(bob):
    submitted = await bob.submit(SUMMARY, payload={}, delay_seconds=2)
    assert submitted["status"] == "pending" and submitted["run_at"] is not None
    assert (await bob.task(submitted["id"]))["status"] == "pending"
    done = await wait_done(bob, submitted["id"])
    assert done["status"] == "completed", done
    assert datetime.fromisoformat(done["started_at"]) >= datetime.fromisoformat(submitted["run_at"])


async def test_the_sweeper_dispatches_an_internal_task_its_submit_never_did(app, bob):
    """As if the submit's process died between its commit and the enqueue: the task is
    pending with no broker message. The sweeper hands it over once it is past its grace."""
    left = await bob.submit(SUMMARY, payload={}, delay_seconds=3600)  # not dispatched now

    async def set_row(**values: object) -> None:
        async with app.hub.db.write() as conn:
            await conn.execute(
                update(task_table).where(task_table.c.id == UUID(left["id"])).values(**values)
            )

    await set_row(run_at=None)  # due now, submitted a moment ago: still the submit's to do
    assert (await app.hub.sweeper.run_once()).internal_dispatched == 0
    await set_row(created_at=utcnow() - UNDISPATCHED_GRACE - timedelta(seconds=1))
    assert (await app.hub.sweeper.run_once()).internal_dispatched == 1
    done = await wait_done(bob, left["id"])
    assert done["status"] == "completed", done
    assert (await app.hub.sweeper.run_once()).internal_dispatched == 0


async def test_a_write_whose_answer_was_lost_counts_once_the_task_shows_it(app, bob):
    """The executor's write lost its connection after it had committed: written again, it
    matches nothing; the task itself (running, under this run's token) says the first went
    through, and that is announced (as from ``claimed``). Another run's token would not."""
    task = await bob.submit(SUMMARY, payload={}, delay_seconds=3600)  # pending, not sent
    db, task_id, run = app.hub.db, UUID(task["id"]), uuid4()
    calls = []

    async def start():
        calls.append(1)
        written = await internal_tasks.start(db, task_id, 1, run)
        if len(calls) == 1:
            raise ConnectionResetError("the connection went before the answer came")
        return written

    record, events = await retried_write(
        db, task_id, run, start, done=(TaskStatus.RUNNING,), previous=TaskStatus.CLAIMED
    )
    assert len(calls) == 2
    assert record is not None and record.status == TaskStatus.RUNNING
    assert [(e.task.id, e.previous) for e in events] == [(task_id, TaskStatus.CLAIMED)]

    other = uuid4()
    record, events = await retried_write(
        db,
        task_id,
        other,
        lambda: internal_tasks.start(db, task_id, 1, other),
        done=(TaskStatus.RUNNING,),
        previous=TaskStatus.CLAIMED,
    )
    assert record is None and not len(events)  # already started, by another run


async def test_one_task_that_cannot_be_marked_does_not_hold_up_the_others(
    app, bob, monkeypatch, caplog
):
    """The fallback dispatches every task it found: one whose status write fails is logged
    and left to the executor (its message went out) or the next sweep, not the end of the
    others."""
    tasks = [await bob.submit(SUMMARY, payload={}, delay_seconds=3600) for _ in range(2)]
    first = UUID(tasks[0]["id"])
    async with app.hub.db.write() as conn:
        for offset, task in enumerate(tasks):
            created = utcnow() - timedelta(seconds=60 - offset)  # the first is the oldest
            await conn.execute(
                update(task_table)
                .where(task_table.c.id == UUID(task["id"]))
                .values(run_at=None, created_at=created)
            )
    mark_dispatched = internal_tasks.mark_dispatched

    async def failing_for_the_first(db, task_id):
        if task_id == first:
            raise ConnectionResetError("the database went away")
        return await mark_dispatched(db, task_id)

    monkeypatch.setattr(internal_tasks, "mark_dispatched", failing_for_the_first)
    count, _events = await app.hub.internal.dispatch_missed(utcnow())
    assert count == 2
    assert f"could not dispatch internal task {first}" in caplog.text
    for task in tasks:
        assert (await wait_done(bob, task["id"]))["status"] == "completed"


async def test_a_result_that_is_not_json_ends_the_task_failed_saying_so(bob):
    """(Seen: the write of such a result raised, and the task stayed running until the
    internal timeout, an hour later, failed "Internal worker timeout".)"""
    task = await bob.submit(NOT_JSON, payload={})
    done = await wait_done(bob, task["id"])
    assert done["status"] == "failed", done
    assert "not JSON" in done["error"] and "set" in done["error"]
