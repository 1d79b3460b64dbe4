"""Worker lifecycle: creation, heartbeats, listing, and the cleanup shared by
``DELETE /workers/{id}``, the sweeper and socket disconnects."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy import Select, bindparam, delete, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.clock import new_id, utcnow
from taskhub.rules.errors import Forbidden, WorkerNotFound
from taskhub.rules.events import EventBatch, JobsInvalidate
from taskhub.rules.naming import JobName, validate_room_id, visible_job_rooms
from taskhub.rules.records import Page, Principal, WorkerRecord, beyond
from taskhub.rules.retries import DEFAULT_RETRY_POLICY, RetryPolicy
from taskhub.rules.states import TaskStatus
from taskhub.services.attempts import end_abandoned_attempts, ended_attempt_events
from taskhub.services.jobs import soft_delete_orphans_after_commit
from taskhub.services.ownership import owned_worker
from taskhub.store.database import Database
from taskhub.store.tables import is_active, job_table, link_table, task_table, worker_table

worker = worker_table
WORKER_DISCONNECTED = "Worker disconnected"


async def create_worker(db: Database, principal: Principal) -> WorkerRecord:
    record = WorkerRecord(id=new_id(), user_id=principal.id, last_heartbeat=utcnow())
    async with db.write() as conn:
        await conn.execute(
            insert(worker).values(
                id=record.id,
                user_id=record.user_id,
                last_heartbeat=record.last_heartbeat,
                created_at=record.last_heartbeat,
            )
        )
    return record


async def heartbeat(
    db: Database,
    principal: Principal,
    worker_id: UUID,
    *,
    cancelled_within: float | None = None,
    lease_seconds: float | None = None,
    running: list[UUID] | None = None,
) -> WorkerRecord:
    """Record that the worker is alive (one guarded statement on the common path). With
    ``cancelled_within``, also report the worker's tasks cancelled in that many seconds,
    so a worker that missed the ``task_cancelled`` event still stops those runs. With
    ``lease_seconds``, extend the leases of the worker's claimed/running tasks — only of
    those in ``running`` when the worker says which it runs, so a task it never heard of
    (a lost claim reply) runs out of lease and is recovered."""
    now = utcnow()
    async with db.autocommit() as conn:
        params = {"b_worker_id": worker_id, "b_user_id": principal.id, "b_now": now}
        beat = _BEAT_ANY if principal.is_superuser else _BEAT_OWN
        row = (await conn.execute(beat, params)).first()
        if row is None:
            await owned_worker(conn, principal, worker_id)  # raises 404 or 403
            raise WorkerNotFound(f"Worker {worker_id} not found.")  # pragma: no cover
        record = WorkerRecord(id=row.id, user_id=row.user_id, last_heartbeat=row.last_heartbeat)
        if lease_seconds is not None:
            until = now + timedelta(seconds=lease_seconds)
            params = {"b_worker_id": worker_id, "b_until": until, "b_ids": running or []}
            extend = _EXTEND_ALL_LEASES if running is None else _EXTEND_LISTED_LEASES
            await conn.execute(extend, params)
        if cancelled_within is not None:
            record.cancelled_tasks = list(
                await conn.scalars(
                    select(task_table.c.id).where(
                        task_table.c.worker_id == worker_id,
                        task_table.c.status == TaskStatus.CANCELLED.value,
                        task_table.c.completed_at >= now - timedelta(seconds=cancelled_within),
                    )
                )
            )
    return record


_BEAT_ANY = (
    update(worker)
    .where(worker.c.id == bindparam("b_worker_id"))
    .values(last_heartbeat=bindparam("b_now"))
    .returning(worker.c.id, worker.c.user_id, worker.c.last_heartbeat)
)
_BEAT_OWN = _BEAT_ANY.where(worker.c.user_id == bindparam("b_user_id"))
_EXTEND_ALL_LEASES = (
    update(task_table)
    .where(
        task_table.c.worker_id == bindparam("b_worker_id"),
        is_active(),
    )
    .values(lease_expires_at=bindparam("b_until"))
)
_EXTEND_LISTED_LEASES = _EXTEND_ALL_LEASES.where(
    task_table.c.id.in_(bindparam("b_ids", expanding=True))
)


async def check_serves(db: Database, worker_id: UUID, job: JobName) -> None:
    """403 unless the worker is linked to the live job ``job`` (its wake-up room
    ``jobs:{name}`` would otherwise tell it of tasks of jobs it cannot serve)."""
    async with db.read() as conn:
        served = await conn.scalar(
            select(func.count())
            .select_from(link_table.join(job_table, job_table.c.id == link_table.c.job_id))
            .where(
                link_table.c.worker_id == worker_id,
                job_table.c.room_id == job.room_id,
                job_table.c.category == job.category,
                job_table.c.name == job.name,
                job_table.c.deleted.is_(False),
            )
        )
    if not served:
        raise Forbidden(
            f"Worker {worker_id} does not serve {job.full_name}: register it for that job "
            "first (PUT /rooms/{room}/jobs with its worker_id)."
        )


async def existing_workers(db: Database, worker_ids: set[UUID]) -> set[UUID]:
    """Those of ``worker_ids`` the hub still has (a removed worker's id is never reused)."""
    async with db.read() as conn:
        ids = sorted(worker_ids)
        return set(await conn.scalars(select(worker.c.id).where(worker.c.id.in_(ids))))


async def delete_worker(
    db: Database,
    principal: Principal | None,
    worker_id: UUID,
    *,
    reason: str = WORKER_DISCONNECTED,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
) -> EventBatch:
    """Remove a worker: its claimed/running tasks are retried or fail with ``reason``, its
    links go, and then jobs left without workers and pending tasks are soft-deleted.
    ``principal=None`` is the system (sweeper, disconnect)."""
    async with db.write() as conn:
        await owned_worker(conn, principal, worker_id, lock="exclusive")
        removal = await remove_worker(conn, worker_id, reason, policy)
    await soft_delete_orphans_after_commit(db, removal.jobs)
    return removal.events


async def remove_silent_worker(
    db: Database,
    worker_id: UUID,
    silent_since: datetime,
    *,
    reason: str = WORKER_DISCONNECTED,
    policy: RetryPolicy = DEFAULT_RETRY_POLICY,
) -> EventBatch | None:
    """Remove the worker only if nothing has been heard of it since ``silent_since`` (no
    heartbeat, no re-join on any replica); ``None`` if it was heard of (or is gone). The
    guard and the removal share one transaction, and the guard row-locks the worker, so a
    heartbeat landing meanwhile wins."""
    async with db.write() as conn:
        still_silent = await conn.scalar(
            update(worker)
            .where(worker.c.id == worker_id, worker.c.last_heartbeat < silent_since)
            .values(last_heartbeat=worker.c.last_heartbeat)
            .returning(worker.c.id)
        )
        if still_silent is None:
            return None
        removal = await remove_worker(conn, worker_id, reason, policy)
    await soft_delete_orphans_after_commit(db, removal.jobs)
    return removal.events


@dataclass
class Removal:
    events: EventBatch
    # The jobs it may have left orphaned: for ``soft_delete_orphans`` once it has committed.
    jobs: set[UUID]


async def remove_worker(
    conn: AsyncConnection, worker_id: UUID, reason: str, policy: RetryPolicy = DEFAULT_RETRY_POLICY
) -> Removal:
    """The cleanup itself, inside the caller's transaction: the worker's claimed/running
    tasks are retried (attempts left) or fail with ``reason``, its links go."""
    ended = await end_abandoned_attempts(
        conn, [task_table.c.worker_id == worker_id], error=reason, now=utcnow(), policy=policy
    )
    events = ended_attempt_events(ended, tell_worker=False)
    job_rows = (
        await conn.execute(
            select(job_table.c.id, job_table.c.room_id)
            .join(link_table, link_table.c.job_id == job_table.c.id)
            .where(link_table.c.worker_id == worker_id)
        )
    ).all()
    await conn.execute(delete(link_table).where(link_table.c.worker_id == worker_id))
    await conn.execute(delete(worker).where(worker.c.id == worker_id))
    for job_row in job_rows:
        events.add(JobsInvalidate(job_row.room_id))
    jobs = {row.id for row in job_rows} | {attempt.record.job_id for attempt in ended}
    return Removal(events, jobs)


def _summary_query(where: Any) -> Select[Any]:
    job_count = (
        select(func.count())
        .where(link_table.c.worker_id == worker.c.id)
        .scalar_subquery()
        .label("job_count")
    )
    return select(worker.c.id, worker.c.user_id, worker.c.last_heartbeat, job_count).where(where)


async def _page(db: Database, where: Any, limit: int, offset: int) -> Page[WorkerRecord]:
    async with db.read() as conn:
        total = int(await conn.scalar(select(func.count()).select_from(worker).where(where)) or 0)
        rows = (
            []
            if beyond(total, limit, offset)
            else await conn.execute(
                _summary_query(where)
                .order_by(worker.c.created_at.desc(), worker.c.id.desc())
                .limit(limit)
                .offset(offset)
            )
        )
        items = [
            WorkerRecord(
                id=row.id,
                user_id=row.user_id,
                last_heartbeat=row.last_heartbeat,
                job_count=row.job_count,
            )
            for row in rows
        ]
    return Page(items=items, total=total, limit=limit, offset=offset)


async def list_workers(db: Database, limit: int, offset: int) -> Page[WorkerRecord]:
    return await _page(db, worker.c.id.is_not(None), limit, offset)


async def list_room_workers(
    db: Database, room_id: str, limit: int, offset: int
) -> Page[WorkerRecord]:
    """Workers serving at least one live job visible from ``room_id``."""
    validate_room_id(room_id)
    serving = (
        select(link_table.c.worker_id)
        .join(job_table, job_table.c.id == link_table.c.job_id)
        .where(
            job_table.c.room_id.in_(visible_job_rooms(room_id)),
            job_table.c.deleted.is_(False),
        )
    )
    return await _page(db, worker.c.id.in_(serving), limit, offset)
