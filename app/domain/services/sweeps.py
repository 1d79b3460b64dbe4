"""What the sweeper cleans up. Every write is guarded in its own WHERE clause, so a
heartbeat or completion that lands between the sweeper's read and its write wins."""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from sqlalchemy import delete, func, select, update

from app.domain.events import EventBatch, TaskStatusChanged
from app.domain.retries import DEFAULT_RETRY_POLICY, RetryPolicy
from app.domain.services.attempts import end_abandoned_attempts, ended_attempt_events
from app.domain.services.internal_tasks import INTERNAL_TIMEOUT, internal_job_ids
from app.domain.services.jobs import JobNames
from app.domain.services.task_rows import task_record
from app.domain.services.workers import remove_silent_worker
from app.domain.states import TERMINAL_STATUSES, TaskStatus, previous_status
from app.persistence.database import Database
from app.persistence.models import is_active, next_version, task_table, worker_table
from app.persistence.types import utcnow

BATCH = 500
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
) -> tuple[int, EventBatch]:
    """Clean up silent workers exactly as ``DELETE /workers/{id}`` does, each in its own
    transaction guarded by ``last_heartbeat < cutoff``; returns how many went."""
    events, removed = EventBatch(), 0
    for worker_id in await stale_workers(db, cutoff):
        outcome = await remove_silent_worker(db, worker_id, cutoff, policy=policy)
        if outcome is not None:
            removed += 1
            events.extend(outcome)
    return removed, events


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
                    # (a delayed task was dispatched when it came due, at ``run_at``)
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
