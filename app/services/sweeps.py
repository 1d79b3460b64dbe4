"""What the sweeper cleans up. Every write is guarded in its own WHERE clause, so a
heartbeat or completion that lands between the sweeper's read and its write wins."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any
from uuid import UUID

from taskhub.clock import utcnow
from taskhub.rules.events import EventBatch, JobsInvalidate, TaskStatusChanged
from taskhub.rules.retries import DEFAULT_RETRY_POLICY, RetryPolicy
from taskhub.rules.states import previous_status
from taskhub.services.attempts import end_abandoned_attempts, ended_attempt_events
from taskhub.services.internal_tasks import INTERNAL_TIMEOUT
from taskhub.services.jobs import (
    JobNames,
    chunked,
    orphaned_jobs,
    soft_delete_orphans,
    soft_delete_orphans_after_commit,
)
from taskhub.services.providers import invalidations, removed_with_workers
from taskhub.services.workers import WORKER_DISCONNECTED, remove_silent_worker, worker_removed
from taskhub.store import attempts as attempts_store
from taskhub.store import sweeps as store
from taskhub.store.database import Database
from taskhub.store.task_rows import task_record

BATCH = 500
IDLE_BATCH = 5000
LEASE_EXPIRED = "Lease expired"


async def stale_workers(db: Database, cutoff: datetime, limit: int = BATCH) -> list[UUID]:
    """Workers not heard of since ``cutoff``, longest silent first."""
    async with db.read() as conn:
        return await store.stale_worker_ids(conn, cutoff, limit)


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
    async with db.write() as conn:
        ids = await store.lock_idle_silent_workers(conn, cutoff, limit)
        removed: set[UUID] = set()
        jobs: dict[UUID, list[Any]] = {}
        providers: dict[UUID, list[Any]] = {}
        for chunk in chunked(ids):
            for row in await store.jobs_served_by(conn, chunk):
                jobs.setdefault(row.worker_id, []).append(row)
            for row in await removed_with_workers(conn, chunk):
                providers.setdefault(row.worker_id, []).append(row)
            removed.update(await store.delete_idle_workers(conn, chunk))
        served = [job for worker_id in removed for job in jobs.get(worker_id, ())]
    await soft_delete_orphans_after_commit(db, {row.id for row in served})
    events = EventBatch()
    for room in sorted({row.room_id for row in served}):
        events.add(JobsInvalidate(room))
    gone = [row for worker_id in removed for row in providers.get(worker_id, ())]
    events.extend(invalidations([row.room_id for row in gone]))
    for worker_id in sorted(removed):
        events.add(worker_removed(worker_id, jobs.get(worker_id, ()), providers.get(worker_id, ())))
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
            attempts_store.lease_ran_out(now),
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
    async with db.write() as conn:
        ended = await end_abandoned_attempts(
            conn, attempts_store.worker_gone(), error=WORKER_DISCONNECTED, now=now, policy=policy
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
    events = EventBatch()
    async with db.write() as conn:
        rows = await store.fail_internal_tasks_active_since(
            conn, cutoff, error=INTERNAL_TIMEOUT, now=utcnow()
        )
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
    purged = 0
    for _ in range(max_batches):
        async with db.write() as conn:
            deleted = await store.delete_oldest_ended(conn, cutoff, batch)
        purged += deleted
        if deleted < batch:
            break
    return purged
