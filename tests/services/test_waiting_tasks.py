"""A pending task whose ``run_at`` is ahead waits apart from the claim queue: it is marked
``waiting`` when it enters pending (submit, retry with a backoff), and the announcer's step
(``due_tasks.queue_due``) queues it once it is due. Until then a claim that the queue cannot
fill still takes it, and its queue position is the same either way; the kept counts follow
it."""

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import func, select, text, update
from sqlalchemy.exc import DBAPIError

from taskhub.clock import utcnow
from taskhub.rules.records import Principal
from taskhub.rules.retries import RetryPolicy
from taskhub.rules.states import TaskStatus
from taskhub.services import claim, due_tasks, sweeps, task_reads, transitions
from taskhub.services.jobs import register_job
from taskhub.services.submit import SubmitOptions, submit_task
from taskhub.services.users import create_user
from taskhub.store import claims as claim_store
from taskhub.store.claims import ClaimFrom
from taskhub.store.database import Database
from taskhub.store.page_positions import with_positions
from taskhub.store.tables import queue_bucket_table, task_table
from taskhub.store.task_rows import SELECT_TASKS

S = TaskStatus
JOB = "room1:modifiers:Job"


class NoExecutors:
    def has_executor(self, full_name: str) -> bool:
        return False


async def owner_and_worker(db: Database) -> tuple[Principal, UUID]:
    user_id, _ = await create_user(db, "owner")
    owner = Principal(id=user_id, name="owner", is_superuser=False)
    registration, _ = await register_job(
        db,
        owner,
        "room1",
        category="modifiers",
        name="Job",
        schema={},
        worker_id=None,
        allowed_categories=["modifiers"],
    )
    return owner, registration.worker_id


async def submit(db: Database, owner: Principal, **options: Any) -> UUID:
    record, _, _ = await submit_task(
        db, owner, "room1", JOB, {}, NoExecutors(), options=SubmitOptions(**options)
    )
    return record.id


async def waiting_flags(db: Database) -> dict[UUID, bool]:
    async with db.read() as conn:
        rows = await conn.execute(select(task_table.c.id, task_table.c.waiting))
        return {row.id: bool(row.waiting) for row in rows}


async def kept_waiting(db: Database) -> int:
    async with db.read() as conn:
        total = select(func.coalesce(func.sum(queue_bucket_table.c.waiting), 0))
        return int(await conn.scalar(total))


async def come_due(db: Database, task_id: UUID) -> None:
    """The task's ``run_at`` passes; the announcer has not looked yet."""
    async with db.write() as conn:
        await conn.execute(
            update(task_table)
            .where(task_table.c.id == task_id)
            .values(run_at=utcnow() - timedelta(seconds=1))
        )


async def positions(db: Database, now: datetime) -> dict[UUID, int | None]:
    async with db.read() as conn:
        rows = (await conn.execute(SELECT_TASKS)).all()
        return {record.id: record.queue_position for record in await with_positions(conn, rows)}


async def test_a_task_due_ahead_waits_and_one_due_now_is_queued(db: Database) -> None:
    owner, _ = await owner_and_worker(db)
    now = utcnow()
    later = await submit(db, owner, run_at=now + timedelta(hours=1))
    at_once = await submit(db, owner)
    overdue = await submit(db, owner, run_at=now - timedelta(minutes=1))
    assert await waiting_flags(db) == {later: True, at_once: False, overdue: False}
    assert await kept_waiting(db) == 1


async def test_a_retry_with_a_backoff_waits_and_an_immediate_one_is_queued(db: Database) -> None:
    owner, worker = await owner_and_worker(db)
    flags = {}
    for base_seconds in (600, 0):
        task_id = await submit(db, owner, max_attempts=2)
        (claimed,), _ = await claim.claim_tasks(
            db, owner, worker, 1, closed=frozenset(), lease_seconds=60
        )
        assert claimed.id == task_id
        record, _ = await transitions.update_task(
            db,
            owner,
            task_id,
            status=S.FAILED,
            error="boom",
            retry=True,
            claim_token=claimed.claim_token,
            retry_policy=RetryPolicy(base_seconds=base_seconds, jitter=0),
        )
        assert record.status == S.PENDING
        flags[base_seconds] = (await waiting_flags(db))[task_id]
    assert flags == {600: True, 0: False}
    assert await kept_waiting(db) == 1


async def test_a_task_whose_lease_ran_out_waits_for_its_backoff(db: Database) -> None:
    owner, worker = await owner_and_worker(db)
    task_id = await submit(db, owner, max_attempts=2)
    await claim.claim_tasks(db, owner, worker, 1, closed=frozenset(), lease_seconds=60)
    later = utcnow() + timedelta(minutes=5)  # the lease (60 s) has run out by then
    ended, _ = await sweeps.end_expired_leases(db, later, RetryPolicy(base_seconds=600, jitter=0))
    assert ended == 1
    assert (await task_reads.get_task(db, task_id)).status == S.PENDING
    assert await waiting_flags(db) == {task_id: True}
    assert await kept_waiting(db) == 1


async def test_a_claim_takes_the_queue_first_then_the_due_tasks_not_yet_queued(
    db: Database,
) -> None:
    """Until the announcer queues a due task, claims take the queued ones first; a claim the
    queue cannot fill takes the due ones too, in their order."""
    owner, worker = await owner_and_worker(db)
    delayed = await submit(db, owner, run_at=utcnow() + timedelta(hours=1))
    queued = [await submit(db, owner) for _ in range(2)]
    urgent_delayed = await submit(db, owner, priority=5, run_at=utcnow() + timedelta(hours=1))
    await come_due(db, delayed)
    await come_due(db, urgent_delayed)
    assert (await waiting_flags(db))[delayed] is True

    first, _ = await claim.claim_tasks(db, owner, worker, 1, closed=frozenset(), lease_seconds=60)
    assert [record.id for record in first] == [queued[0]]
    rest, _ = await claim.claim_tasks(db, owner, worker, 3, closed=frozenset(), lease_seconds=60)
    # Higher priority first, then FIFO: the older delayed task before the queued one.
    assert [record.id for record in rest] == [urgent_delayed, delayed, queued[1]]


async def test_once_queued_a_due_task_is_claimed_in_its_place(db: Database) -> None:
    owner, worker = await owner_and_worker(db)
    queued = await submit(db, owner)
    urgent_delayed = await submit(db, owner, priority=5, run_at=utcnow() + timedelta(hours=1))
    await come_due(db, urgent_delayed)
    assert await due_tasks.queue_due(db, utcnow(), 1000) == 1
    claimed, _ = await claim.claim_tasks(db, owner, worker, 1, closed=frozenset(), lease_seconds=60)
    assert [record.id for record in claimed] == [urgent_delayed]
    claimed, _ = await claim.claim_tasks(db, owner, worker, 1, closed=frozenset(), lease_seconds=60)
    assert [record.id for record in claimed] == [queued]


async def test_an_empty_claim_is_empty_only_when_nothing_is_due(db: Database) -> None:
    owner, worker = await owner_and_worker(db)
    delayed = await submit(db, owner, run_at=utcnow() + timedelta(hours=1))
    assert (await claim.claim_tasks(db, owner, worker, 1, closed=frozenset(), lease_seconds=60))[
        0
    ] == []
    await come_due(db, delayed)
    claimed, _ = await claim.claim_tasks(db, owner, worker, 1, closed=frozenset(), lease_seconds=60)
    assert [record.id for record in claimed] == [delayed]


async def test_queueing_the_due_tasks_keeps_every_position(db: Database) -> None:
    owner, _ = await owner_and_worker(db)
    ahead = utcnow() + timedelta(hours=1)
    submitted = [
        await submit(db, owner, **options)
        for options in (
            {"run_at": ahead},
            {},
            {"priority": 2, "run_at": ahead},
            {"priority": -1},
            {"run_at": ahead + timedelta(minutes=1)},
            {"priority": 2},
        )
    ]
    for task_id in submitted[:3:2]:  # two of the three delayed ones come due
        await come_due(db, task_id)
    now = utcnow()
    before = await positions(db, now)
    assert sorted(before.values()) == list(range(1, len(submitted) + 1))
    assert await kept_waiting(db) == 3

    assert await due_tasks.queue_due(db, now, 1000) == 2

    flags = await waiting_flags(db)
    assert [flags[task_id] for task_id in submitted] == [False, False, False, False, True, False]
    assert await kept_waiting(db) == 1
    assert await positions(db, now) == before
    assert await due_tasks.queue_due(db, now, 1000) == 0


async def test_queueing_goes_in_batches_of_the_earliest_due(db: Database) -> None:
    owner, _ = await owner_and_worker(db)
    delayed = [await submit(db, owner, run_at=utcnow() + timedelta(hours=1)) for _ in range(3)]
    for task_id in delayed:
        await come_due(db, task_id)
    assert await due_tasks.queue_due(db, utcnow(), 2) == 2
    assert await due_tasks.queue_due(db, utcnow(), 2) == 1
    assert not any((await waiting_flags(db)).values())


def failing_due_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    """The claim of due waiting tasks fails in the database (a table it does not have)."""
    build = claim_store.claim_statement

    def claim_statement(*args: Any, **kwargs: Any) -> Any:
        if kwargs.get("source") == ClaimFrom.DUE_WAITING:
            return text("SELECT * FROM no_such_table")
        return build(*args, **kwargs)

    monkeypatch.setattr(claim_store, "claim_statement", claim_statement)


async def test_tasks_claimed_from_the_queue_are_answered_when_the_due_ones_cannot_be_read(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short claim of the queue has committed its tasks: a failure reading the due ones
    after it must not lose them (its repeat would claim others)."""
    owner, worker = await owner_and_worker(db)
    queued = await submit(db, owner)
    failing_due_claims(monkeypatch)
    claimed, _ = await claim.claim_tasks(db, owner, worker, 3, closed=frozenset(), lease_seconds=60)
    assert [record.id for record in claimed] == [queued]
    assert (await task_reads.get_task(db, queued)).status == S.CLAIMED


async def test_a_claim_that_got_nothing_fails_with_the_due_ones(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner, worker = await owner_and_worker(db)
    failing_due_claims(monkeypatch)
    with pytest.raises(DBAPIError):
        await claim.claim_tasks(db, owner, worker, 3, closed=frozenset(), lease_seconds=60)


async def test_a_keyed_claim_takes_nothing_when_the_due_ones_cannot_be_read(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A keyed claim is one transaction: it fails whole, and its repeat claims afresh."""
    owner, worker = await owner_and_worker(db)
    queued = await submit(db, owner)
    failing_due_claims(monkeypatch)
    with pytest.raises(DBAPIError):
        await claim.claim_tasks(
            db, owner, worker, 3, closed=frozenset(), lease_seconds=60, request_key="k1"
        )
    assert (await task_reads.get_task(db, queued)).status == S.PENDING
