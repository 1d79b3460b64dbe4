"""What the sweeper cleans up. Every write is guarded in its own WHERE clause, so a
heartbeat or completion that lands between the sweeper's read and its write wins."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from uuid import UUID

from sqlalchemy import delete, exists, func, select, update

from taskhub.clock import utcnow
from taskhub.rules.events import EventBatch, JobsInvalidate, TaskStatusChanged
from taskhub.rules.retries import DEFAULT_RETRY_POLICY, RetryPolicy
from taskhub.rules.states import TERMINAL_STATUSES, TaskStatus, previous_status
from taskhub.services.attempts import end_abandoned_attempts, ended_attempt_events
from taskhub.services.internal_tasks import INTERNAL_TIMEOUT, internal_job_ids
from taskhub.services.jobs import (
    JobNames,
    chunked,
    orphaned_jobs,
    soft_delete_orphans,
    soft_delete_orphans_after_commit,
)
from taskhub.services.workers import WORKER_DISCONNECTED, remove_silent_worker
from taskhub.store.database import Database
from taskhub.store.queue_positions import task_record
from taskhub.store.tables import (
    is_active,
    job_table,
    link_table,
    next_version,
    task_table,
    worker_table,
)

BATCH = 500
IDLE_BATCH = 5000
LEASE_EXPIRED = "Lease expired"


async def stale_workers(db: Database, cutoff: datetime, limit: int = BATCH) -> list[UUID]:
    """Workers not heard of since ``cutoff``, longest silent first."""
    async with db.read() as conn:
        rows = await conn.scalars(
            select(worker_table.c.id)
            .where(worker_table.c.last_heartbeat < cutoff)
            .order_by(worker_table.c.last_heartbeat, worker_table.c.id)
            .limit(limit)
        )
        return list(rows)


async def sweep_stale_workers(
    db: Database, cutoff: datetime, policy: RetryPolicy = DEFAULT_RETRY_POLICY
) -> AsyncIterator[tuple[int, EventBatch]]:
    """Clean up silent workers exactly as ``DELETE /workers/{id}`` does, yielding how many
    went and their events after each transaction commits (what committed is published
    even when a later removal fails). Those holding no claimed or running task (most of
    them: workers created and never used, or idle when they died) go together,
    ``IDLE_BATCH`` per transaction, all of them in every cycle, so that however many one
    user leaves behind, another user's dead worker is not kept waiting behind them. The
    others, each in its own transaction guarded by ``last_heartbeat < cutoff``, longest
    silent first, ``BATCH`` per cycle."""
    while True:
        count, idle = await remove_idle_silent_workers(db, cutoff)
        yield count, idle
        if count < IDLE_BATCH:
            break
    for worker_id in await stale_workers(db, cutoff):
        outcome = await remove_silent_worker(db, worker_id, cutoff, policy=policy)
        if outcome is not None:
            yield 1, outcome


async def remove_idle_silent_workers(
    db: Database, cutoff: datetime, limit: int = IDLE_BATCH
) -> tuple[int, EventBatch]:
    """Up to ``limit`` workers silent since before ``cutoff`` and holding no claimed or
    running task, removed in one transaction: their links go with them, their jobs left
    orphaned are soft-deleted (after it). The workers are row-locked (PostgreSQL; SQLite has one
    writer), so a heartbeat, a registration or a keyed claim landing meanwhile waits and
    finds its worker gone, as after a delete; "no claimed or running task" is checked again
    by the delete itself. (A claim without a key takes no such lock: one that commits
    between that check and this commit leaves its task to its lease, as after a delete.)"""
    busy = exists().where(task_table.c.worker_id == worker_table.c.id, is_active())
    silent = (
        select(worker_table.c.id)
        .where(worker_table.c.last_heartbeat < cutoff, ~busy)
        .order_by(worker_table.c.last_heartbeat, worker_table.c.id)
        .limit(limit)
    )
    async with db.write() as conn:
        if not db.is_sqlite:
            silent = silent.with_for_update(of=worker_table)
        ids = list(await conn.scalars(silent))
        removed: set[UUID] = set()
        jobs: dict[UUID, list[tuple[UUID, str]]] = {}
        for chunk in chunked(ids):
            for row in await conn.execute(
                select(link_table.c.worker_id, job_table.c.id, job_table.c.room_id)
                .join(job_table, link_table.c.job_id == job_table.c.id)
                .where(link_table.c.worker_id.in_(chunk))
            ):
                jobs.setdefault(row.worker_id, []).append((row.id, row.room_id))
            removed.update(  # (their links go with them: ON DELETE CASCADE)
                await conn.scalars(
                    delete(worker_table)
                    .where(worker_table.c.id.in_(chunk), ~busy)
                    .returning(worker_table.c.id)
                )
            )
        served = [job for worker_id in removed for job in jobs.get(worker_id, ())]
    await soft_delete_orphans_after_commit(db, {job_id for job_id, _room in served})
    events = EventBatch()
    for room in sorted({room for _job_id, room in served}):
        events.add(JobsInvalidate(room))
    return len(removed), events


async def end_expired_leases(
    db: Database, now: datetime, policy: RetryPolicy = DEFAULT_RETRY_POLICY
) -> tuple[int, EventBatch]:
    """Claimed/running tasks whose lease ran out are retried (attempts left) or fail with
    "Lease expired", and their worker is told to stop the run (guarded writes: a heartbeat
    that extended the lease meanwhile wins)."""
    async with db.write() as conn:
        ended = await end_abandoned_attempts(
            conn,
            [task_table.c.lease_expires_at < now],
            error=LEASE_EXPIRED,
            now=now,
            policy=policy,
        )
    return len(ended), ended_attempt_events(ended, tell_worker=True)


async def end_orphaned_attempts(
    db: Database, now: datetime, policy: RetryPolicy = DEFAULT_RETRY_POLICY
) -> tuple[int, EventBatch]:
    """Claimed/running tasks whose worker is gone are retried (attempts left) or fail, as
    that worker's removal would have done. A claim is one statement that takes no lock on
    its worker (the hot path), so one that commits while the worker is being removed can
    take a task after the removal released the worker's tasks; without this, such a task
    would wait for its lease to run out."""
    task = task_table
    worker_gone = [
        task.c.worker_id.is_not(None),
        ~exists().where(worker_table.c.id == task.c.worker_id),
    ]
    async with db.write() as conn:
        ended = await end_abandoned_attempts(
            conn, worker_gone, error=WORKER_DISCONNECTED, now=now, policy=policy
        )
    return len(ended), ended_attempt_events(ended, tell_worker=False)


async def soft_delete_orphaned_jobs(db: Database, limit: int = BATCH) -> tuple[int, EventBatch]:
    """Live jobs left with no worker and no pending task go, as they would have when their
    last worker left or their last task ended. A job's soft-delete runs after that change
    has committed (``soft_delete_orphans``), so one is missed when a task ends while its
    job's last worker is being removed (each saw the other not yet done), when the process
    stops in between, or when the database could not serve it then
    (``soft_delete_orphans_after_commit``)."""
    rooms = await soft_delete_orphans(db, await orphaned_jobs(db, limit))
    events = EventBatch()
    for room in sorted(set(rooms)):
        events.add(JobsInvalidate(room))
    return len(rooms), events


async def fail_stuck_internal_tasks(db: Database, cutoff: datetime) -> EventBatch:
    """``@internal`` tasks claimed or running since before ``cutoff`` (started, else due)
    fail with "Internal worker timeout" (one guarded statement)."""
    task = task_table
    events = EventBatch()
    async with db.write() as conn:
        rows = (
            await conn.execute(
                update(task)
                .where(
                    is_active(),
                    task.c.job_id.in_(internal_job_ids()),
                    # (a delayed task was dispatched when it came due, at ``run_at``; one
                    # dispatched late, by the sweeper, got that moment as its ``run_at``)
                    func.coalesce(task.c.started_at, task.c.run_at, task.c.created_at) < cutoff,
                )
                .values(
                    status=TaskStatus.FAILED.value,
                    error=INTERNAL_TIMEOUT,
                    completed_at=utcnow(),
                    **next_version(),
                )
                .returning(*task.c)
            )
        ).all()
        names = await JobNames.resolve(conn, {row.job_id for row in rows})
    for row in rows:
        record = task_record(row, names[row.job_id])
        previous = previous_status(record.status, started=row.started_at is not None, claimed=True)
        events.add(TaskStatusChanged(record, previous))
    return events


async def purge_old_tasks(
    db: Database, cutoff: datetime, batch: int = BATCH, max_batches: int = 20
) -> int:
    """Delete terminal tasks that ended before ``cutoff``, oldest first, ``batch`` rows per
    transaction (the writer is never held for long; what is left waits for the next
    cycle); returns how many went."""
    oldest = (
        select(task_table.c.id)
        .where(
            task_table.c.completed_at < cutoff,
            task_table.c.status.in_(sorted(s.value for s in TERMINAL_STATUSES)),
        )
        .order_by(task_table.c.completed_at)
        .limit(batch)
    )
    purged = 0
    for _ in range(max_batches):
        async with db.write() as conn:
            deleted = await conn.execute(
                delete(task_table).where(task_table.c.id.in_(oldest.scalar_subquery()))
            )
        purged += deleted.rowcount
        if deleted.rowcount < batch:
            break
    return purged
