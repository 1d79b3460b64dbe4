"""The sweeper (seed checklist): what it picks and in which order, the successful path, the
late-write path, the contention path, stuck ``@internal`` tasks, and surviving errors."""

import asyncio
from datetime import timedelta
from uuid import UUID

import pytest
from sqlalchemy import delete, update

from taskhub.clock import utcnow
from taskhub.duties.sweeper import Sweeper
from taskhub.realtime.event_payloads import event_payload
from taskhub.rules.states import TaskStatus
from taskhub.services import sweeps
from taskhub.services.workers import remove_silent_worker
from taskhub.store.tables import link_table, task_table, worker_table
from tests.support.api import JOB, assert_problem
from tests.support.events import statuses


@pytest.fixture
def settings(database_url):
    from taskhub.settings import Settings

    # The hub's own sweeper stays off; each test drives its own cycles.
    return Settings(
        database_url=database_url,
        sweeper_enabled=False,
        worker_timeout_seconds=60,
        internal_task_timeout_seconds=60,
    )


@pytest.fixture
def sweeper(app) -> Sweeper:
    hub = app.hub
    return Sweeper(hub.settings, hub.db, hub.publisher)


async def backdate(db, table, row_id: str, column: str, seconds: float) -> None:
    """Set ``column`` of one row to ``seconds`` ago."""
    async with db.write() as conn:
        await conn.execute(
            update(table)
            .where(table.c.id == UUID(row_id))
            .values({column: utcnow() - timedelta(seconds=seconds)})
        )


async def age_worker(db, worker_id: str, seconds: float) -> None:
    await backdate(db, worker_table, worker_id, "last_heartbeat", seconds)


async def test_only_silent_workers_are_picked_longest_silent_first(alice, db):
    workers = [(await alice.post("/workers")).json()["id"] for _ in range(4)]
    await age_worker(db, workers[0], 120)
    await age_worker(db, workers[1], 300)
    await age_worker(db, workers[2], 30)  # within the timeout
    picked = await sweeps.stale_workers(db, utcnow() - timedelta(seconds=60))
    assert [str(w) for w in picked] == [workers[1], workers[0]]


async def test_a_silent_worker_is_cleaned_up_like_a_delete(alice, db, sweeper, published):
    job = await alice.register()
    running, waiting = [await alice.submit(JOB) for _ in range(2)]
    await alice.claim(job["worker_id"])
    await alice.transition(running["id"], "running")
    await age_worker(db, job["worker_id"], 120)

    report = await sweeper.run_once()

    assert report.ran and report.workers_removed == 1
    failed = await alice.task(running["id"])
    assert (failed["status"], failed["error"]) == ("failed", "Worker disconnected")
    assert (await alice.task(waiting["id"]))["status"] == "pending"
    assert (await alice.get("/workers")).json()["total"] == 0
    # Kept while it has a pending task, soft-deleted once that ends.
    assert len(await alice.room_jobs()) == 1
    await alice.transition(waiting["id"], "cancelled")
    assert await alice.room_jobs() == []
    names = [(e.name, e.room) for e in published]
    assert ("task_status_event", "room:room1") in names
    assert ("jobs_invalidate", "room:room1") in names


async def test_every_idle_silent_worker_goes_in_one_cycle_however_many(
    alice, bob, db, sweeper, published, monkeypatch
):
    """Silent workers without claimed or running tasks are removed in batches (here of 5),
    all in the same cycle: one user's thousands of abandoned workers do not keep another
    user's dead worker (here one running a task) waiting for later cycles."""
    monkeypatch.setattr(sweeps, "IDLE_BATCH", 5)
    monkeypatch.setattr(sweeps, "BATCH", 1)
    abandoned = [(await alice.post("/workers")).json()["id"] for _ in range(12)]
    for worker_id in abandoned:
        await age_worker(db, worker_id, 600)  # longer silent than bob's
    served = await alice.register(room="lab", worker_id=abandoned[0])  # a job of one of them
    busy = await bob.register(room="room2")
    task = await bob.submit("room2:modifiers:Rotate", room="room2")
    await bob.claim(busy["worker_id"])
    await bob.transition(task["id"], "running")
    await age_worker(db, busy["worker_id"], 120)
    alive = (await alice.post("/workers")).json()["id"]

    report = await sweeper.run_once()

    assert report.workers_removed == 13
    left = {item["id"] for item in (await alice.get("/workers")).json()["items"]}
    assert left == {alive}
    assert (await bob.task(task["id"]))["error"] == "Worker disconnected"
    assert await alice.room_jobs("lab") == []  # its job, orphaned, went with it
    assert served["full_name"] == "lab:modifiers:Rotate"
    assert ("jobs_invalidate", "room:lab") in [(e.name, e.room) for e in published]


async def test_an_orphan_without_pending_tasks_is_soft_deleted_at_once(alice, db, sweeper):
    job = await alice.register()
    await age_worker(db, job["worker_id"], 120)
    await sweeper.run_once()
    assert await alice.room_jobs() == []


async def test_a_heartbeat_between_read_and_write_wins(alice, db):
    job = await alice.register()
    await age_worker(db, job["worker_id"], 120)
    cutoff = utcnow() - timedelta(seconds=60)
    (picked,) = await sweeps.stale_workers(db, cutoff)
    await alice.patch(f"/workers/{job['worker_id']}")  # lands after the read
    assert await remove_silent_worker(db, picked, cutoff) is None
    assert (await alice.get("/workers")).json()["total"] == 1


async def test_the_removed_workers_late_write_is_rejected(alice, db, sweeper):
    job = await alice.register()
    task = await alice.submit(JOB)
    claimed = await alice.claim(job["worker_id"])
    await alice.transition(task["id"], "running", claim_token=claimed["claim_token"])
    await age_worker(db, job["worker_id"], 120)
    await sweeper.run_once()
    late = await alice.transition(
        task["id"], "completed", claim_token=claimed["claim_token"], result={"late": True}
    )
    assert_problem(late, 409, "invalid-task-transition")
    after = await alice.task(task["id"])
    assert after["status"] == "failed" and after["result"] is None


async def test_two_sweepers_at_once_do_the_work_once(alice, db, app, published):
    hub = app.hub
    job = await alice.register()
    task = await alice.submit(JOB)
    await alice.claim(job["worker_id"])
    await age_worker(db, job["worker_id"], 120)
    first, second = (
        Sweeper(hub.settings, hub.db, hub.publisher),
        Sweeper(hub.settings, hub.db, hub.publisher),
    )
    reports = await asyncio.gather(first.run_once(), second.run_once())
    assert sum(r.workers_removed for r in reports) == 1
    failures = [
        e
        for e in published
        if e.name == "task_status_event" and event_payload(e)["status"] == "failed"
    ]
    assert [event_payload(e)["id"] for e in failures] == [task["id"]]


async def test_stuck_internal_tasks_fail_with_internal_timeout(alice, db, sweeper, published):
    stuck = await alice.submit("@internal:analysis:ValidatePayload", payload={"job": "x:y:z"})
    await alice.get(f"/tasks/{stuck['id']}", headers={"Prefer": "wait=5"})
    fresh = await alice.submit("@internal:analysis:RoomSummary")
    await alice.get(f"/tasks/{fresh['id']}", headers={"Prefer": "wait=5"})
    # Put both back in flight: one for two hours, one just now.
    async with db.write() as conn:
        for task_id, age in ((stuck["id"], 7200), (fresh["id"], 1)):
            await conn.execute(
                update(task_table)
                .where(task_table.c.id == UUID(task_id))
                .values(
                    status="running",
                    started_at=utcnow() - timedelta(seconds=age),
                    completed_at=None,
                    error=None,
                )
            )
    report = await sweeper.run_once()
    assert report.tasks_failed == 1
    after = await alice.task(stuck["id"])
    assert (after["status"], after["error"]) == ("failed", "Internal worker timeout")
    assert (await alice.task(fresh["id"]))["status"] == "running"
    assert any(
        e.name == "task_status_event" and event_payload(e)["id"] == stuck["id"] for e in published
    )


async def test_a_delayed_internal_task_is_timed_from_when_it_came_due(alice, db, sweeper):
    """Submitted two hours ago to run a moment ago, dispatched then: not stuck yet."""
    task = await alice.submit("@internal:analysis:RoomSummary", delay_seconds=3600)
    async with db.write() as conn:
        await conn.execute(
            update(task_table)
            .where(task_table.c.id == UUID(task["id"]))
            .values(
                status="claimed",
                created_at=utcnow() - timedelta(hours=2),
                run_at=utcnow() - timedelta(seconds=1),
            )
        )
    assert (await sweeper.run_once()).tasks_failed == 0
    assert (await alice.task(task["id"]))["status"] == "claimed"


async def test_remote_tasks_are_never_failed_as_internal(alice, db, sweeper):
    job = await alice.register()
    task = await alice.submit(JOB)
    await alice.claim(job["worker_id"])
    async with db.write() as conn:
        await conn.execute(
            update(task_table)
            .where(task_table.c.id == UUID(task["id"]))
            .values(created_at=utcnow() - timedelta(hours=5))
        )
    assert (await sweeper.run_once()).tasks_failed == 0
    assert (await alice.task(task["id"]))["status"] == "claimed"


async def test_a_failing_cycle_is_logged_and_the_next_one_runs(app, caplog):
    hub = app.hub
    cycles: list[str] = []
    third_cycle_done = asyncio.Event()

    class FlakySweeper(Sweeper):
        async def _sweep(self):  # type: ignore[override]
            cycles.append("cycle")
            if len(cycles) == 1:
                raise RuntimeError("database hiccup")
            report = await super()._sweep()
            if len(cycles) >= 3:
                third_cycle_done.set()
            return report

    flaky = FlakySweeper(
        hub.settings.model_copy(update={"sweeper_interval_seconds": 0.05}), hub.db, hub.publisher
    )
    flaky.start()
    await asyncio.wait_for(third_cycle_done.wait(), 30)  # the loop survived the failure
    await flaky.stop()
    assert len(cycles) >= 3
    assert "sweeper cycle failed" in caplog.text


async def test_a_failing_step_keeps_what_the_steps_before_it_published(
    alice, db, sweeper, published, monkeypatch
):
    """Each step's changes commit on their own, so their events go out with them: a later
    step that fails does not take them along."""
    job = await alice.register()
    task = await alice.submit(JOB)
    await alice.claim(job["worker_id"])
    await age_worker(db, job["worker_id"], 120)

    async def database_hiccup(*_args, **_kwargs):
        raise ConnectionError("database hiccup")

    monkeypatch.setattr(sweeps, "end_expired_leases", database_hiccup)
    before = len(published)
    with pytest.raises(ConnectionError):
        await sweeper.run_once()
    assert (await alice.task(task["id"]))["status"] == "failed"  # committed by the first step
    assert statuses(published[before:], task["id"]) == [TaskStatus.FAILED]


async def test_one_replica_sweeps_and_another_takes_over_when_it_stops(app):
    """Two replicas' sweepers (same database): only the lease holder sweeps; once it stops,
    the other one does."""
    hub = app.hub
    settings = hub.settings.model_copy(update={"sweeper_interval_seconds": 0.05})
    cycles: dict[str, int] = {"a": 0, "b": 0}
    swept = asyncio.Condition()

    class Replica(Sweeper):
        def __init__(self, name: str) -> None:
            super().__init__(settings, hub.db, hub.publisher)
            self.name = name

        async def _sweep(self):  # type: ignore[override]
            report = await super()._sweep()
            async with swept:
                cycles[self.name] += 1
                swept.notify_all()
            return report

    async def until(condition) -> None:
        async with asyncio.timeout(30), swept:
            await swept.wait_for(condition)

    a, b = Replica("a"), Replica("b")
    a.start()
    await until(lambda: cycles["a"] >= 1)
    b.start()
    await until(lambda: cycles["a"] >= 6)  # b tried to take the lease five times meanwhile
    assert cycles["b"] == 0
    await a.stop()
    await until(lambda: cycles["b"] >= 2)
    await b.stop()


async def lease_of(db, task_id: str):
    from sqlalchemy import select

    async with db.read() as conn:
        return await conn.scalar(
            select(task_table.c.lease_expires_at).where(task_table.c.id == UUID(task_id))
        )


async def expire_lease(db, task_id: str) -> None:
    await backdate(db, task_table, task_id, "lease_expires_at", 1)


async def test_a_claim_takes_a_lease_and_running_extends_it(alice, db, settings):
    job = await alice.register()
    task = await alice.submit(JOB)
    before = utcnow()
    await alice.claim(job["worker_id"])
    lease = await lease_of(db, task["id"])
    assert lease >= before + timedelta(seconds=settings.task_lease_seconds - 1)
    await expire_lease(db, task["id"])
    await alice.transition(task["id"], "running")
    assert await lease_of(db, task["id"]) > utcnow()


async def test_heartbeats_extend_all_or_only_the_listed_leases(alice, db):
    job = await alice.register()
    mine, forgotten = [await alice.submit(JOB) for _ in range(2)]
    await alice.post("/tasks/claim", json={"worker_id": job["worker_id"], "max_tasks": 2})
    for task in (mine, forgotten):
        await expire_lease(db, task["id"])
    await alice.patch(f"/workers/{job['worker_id']}")  # no body: every active task
    assert await lease_of(db, forgotten["id"]) > utcnow()
    for task in (mine, forgotten):
        await expire_lease(db, task["id"])
    await alice.patch(f"/workers/{job['worker_id']}", json={"tasks": [mine["id"]]})
    assert await lease_of(db, mine["id"]) > utcnow()
    assert await lease_of(db, forgotten["id"]) < utcnow()


async def test_an_expired_lease_fails_the_task_and_tells_its_worker(alice, db, sweeper, published):
    job = await alice.register()
    kept, lost = [await alice.submit(JOB) for _ in range(2)]
    await alice.post("/tasks/claim", json={"worker_id": job["worker_id"], "max_tasks": 2})
    await expire_lease(db, lost["id"])
    report = await sweeper.run_once()
    assert report.leases_expired == 1
    failed = await alice.task(lost["id"])
    assert (failed["status"], failed["error"]) == ("failed", "Lease expired")
    assert (await alice.task(kept["id"]))["status"] == "claimed"
    assert (await alice.get("/workers")).json()["total"] == 1  # the worker itself is alive
    told = [event_payload(e) for e in published if e.name == "task_cancelled"]
    assert told == [{"task_id": lost["id"], "job_name": JOB, "worker_id": job["worker_id"]}]


async def test_tasks_claimed_by_a_worker_that_is_gone_end_as_its_removal_would(
    alice, db, sweeper, published
):
    """What a claim committing while its worker is being removed leaves behind (the claim
    takes no lock on the worker): tasks claimed by a worker row that no longer exists."""
    gone, alive = await alice.register(), await alice.register()
    last_try = await alice.submit(JOB)
    retried = await alice.submit(JOB, max_attempts=2)
    kept = await alice.submit(JOB)
    await alice.post("/tasks/claim", json={"worker_id": gone["worker_id"], "max_tasks": 2})
    await alice.claim(alive["worker_id"])
    async with db.write() as conn:
        await conn.execute(delete(worker_table).where(worker_table.c.id == UUID(gone["worker_id"])))
    published.clear()
    report = await sweeper.run_once()
    assert report.orphaned_attempts_ended == 2
    failed, back = await alice.task(last_try["id"]), await alice.task(retried["id"])
    assert (failed["status"], failed["error"]) == ("failed", "Worker disconnected")
    assert (back["status"], back["error"], back["worker_id"]) == (
        "pending",
        "Worker disconnected",
        None,
    )
    assert (await alice.task(kept["id"]))["status"] == "claimed"  # its worker is alive
    changed = {event_payload(e)["id"] for e in published if e.name == "task_status_event"}
    assert changed == {last_try["id"], retried["id"]}
    assert (await sweeper.run_once()).orphaned_attempts_ended == 0


async def test_a_job_left_without_workers_and_pending_tasks_goes_in_the_next_cycle(
    alice, db, sweeper, published
):
    """What a task ending while its job's last worker is removed can leave (each saw the
    other not yet done): a live job with no worker and no pending task."""
    left, waiting = await alice.register(name="Left"), await alice.register(name="Waiting")
    await alice.register(name="Served")
    await alice.submit("room1:modifiers:Waiting")
    unlinked = [UUID(left["id"]), UUID(waiting["id"])]
    async with db.write() as conn:
        await conn.execute(delete(link_table).where(link_table.c.job_id.in_(unlinked)))
    published.clear()
    report = await sweeper.run_once()
    assert report.orphaned_jobs_deleted == 1
    live = {job["full_name"] for job in await alice.room_jobs()}
    assert live == {"room1:modifiers:Served", "room1:modifiers:Waiting"}  # pending: stays
    assert [e.room for e in published if e.name == "jobs_invalidate"] == ["room:room1"]
    assert (await sweeper.run_once()).orphaned_jobs_deleted == 0


async def test_internal_tasks_have_no_lease(alice, db, sweeper):
    task = await alice.submit("@internal:analysis:RoomSummary")
    await alice.get(f"/tasks/{task['id']}", headers={"Prefer": "wait=5"})
    assert await lease_of(db, task["id"]) is None


async def test_heartbeat_body_must_list_task_ids(alice):
    worker = (await alice.post("/workers")).json()
    response = await alice.patch(f"/workers/{worker['id']}", json={"tasks": ["nope"]})
    assert_problem(response, 422, "validation-error")


async def test_an_expired_lease_with_attempts_left_is_retried_and_its_worker_told(
    alice, db, sweeper, published
):
    job = await alice.register()
    task = await alice.submit(JOB, max_attempts=2)
    claimed = await alice.claim(job["worker_id"])
    await expire_lease(db, task["id"])
    report = await sweeper.run_once()
    assert report.leases_expired == 1
    back = await alice.task(task["id"])
    assert (back["status"], back["error"], back["attempt"]) == ("pending", "Lease expired", 1)
    assert back["worker_id"] is None and back["run_at"] is not None
    told = [e for e in published if e.name == "task_cancelled"]
    assert [event_payload(e)["worker_id"] for e in told] == [job["worker_id"]]
    # The wedged worker's late write is refused; the task waits for its next attempt.
    late = await alice.transition(task["id"], "completed", claim_token=claimed["claim_token"])
    assert_problem(late, 409, "stale-claim")


async def age_task(db, task_id: str, days: float) -> None:
    await backdate(db, task_table, task_id, "completed_at", days * 86400)


async def test_retention_purges_old_terminal_tasks_in_bounded_batches(alice, db, app):
    retention_days = 7
    await alice.register()
    old = [await alice.submit(JOB) for _ in range(5)]
    recent, waiting = await alice.submit(JOB), await alice.submit(JOB)
    for task in [*old, recent]:
        await alice.transition(task["id"], "cancelled")
    for task in old:
        await age_task(db, task["id"], retention_days + 1)
    settings = app.hub.settings.model_copy(
        update={"task_retention_seconds": retention_days * 86400, "retention_batch_size": 2}
    )
    purged = await sweeps.purge_old_tasks(
        db, utcnow() - timedelta(days=retention_days), batch=2, max_batches=2
    )
    assert purged == 4  # two batches of two; the rest waits for the next cycle
    report = await Sweeper(settings, db, app.hub.publisher).run_once()
    assert report.tasks_purged == 1
    for task in old:
        assert (await alice.get(f"/tasks/{task['id']}")).status_code == 404
    assert (await alice.task(recent["id"]))["status"] == "cancelled"
    assert (await alice.task(waiting["id"]))["status"] == "pending"


async def test_retention_zero_keeps_everything(alice, db, app):
    await alice.register()
    task = await alice.submit(JOB)
    await alice.transition(task["id"], "cancelled")
    await age_task(db, task["id"], 10_000)
    settings = app.hub.settings.model_copy(update={"task_retention_seconds": 0})
    report = await Sweeper(settings, db, app.hub.publisher).run_once()
    assert report.tasks_purged == 0
    assert (await alice.task(task["id"]))["status"] == "cancelled"
