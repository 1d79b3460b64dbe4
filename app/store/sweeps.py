"""The sweeper's statements: silent workers (read, row-locked and removed), ``@internal``
tasks stuck past their timeout, old terminal tasks purged. Every write repeats its
conditions in its own WHERE clause."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import delete, exists, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.rules.states import TERMINAL_STATUSES, TaskStatus
from taskhub.store.connections import Connection
from taskhub.store.internal_tasks import internal_job_ids
from taskhub.store.tables import (
    is_active,
    job_table,
    link_table,
    next_version,
    task_table,
    worker_table,
)

task = task_table
# The worker holds a claimed or running task.
_BUSY = exists().where(task_table.c.worker_id == worker_table.c.id, is_active())


async def stale_worker_ids(conn: Connection, cutoff: datetime, limit: int) -> list[UUID]:
    """Workers not heard of since ``cutoff``, longest silent first."""
    rows = await conn.scalars(
        select(worker_table.c.id)
        .where(worker_table.c.last_heartbeat < cutoff)
        .order_by(worker_table.c.last_heartbeat, worker_table.c.id)
        .limit(limit)
    )
    return list(rows)


async def lock_idle_silent_workers(
    conn: AsyncConnection, cutoff: datetime, limit: int
) -> list[UUID]:
    """Up to ``limit`` workers silent since before ``cutoff`` holding no claimed or running
    task, longest silent first; row-locked on PostgreSQL (SQLite has one writer)."""
    silent = (
        select(worker_table.c.id)
        .where(worker_table.c.last_heartbeat < cutoff, ~_BUSY)
        .order_by(worker_table.c.last_heartbeat, worker_table.c.id)
        .limit(limit)
    )
    if conn.dialect.name != "sqlite":
        silent = silent.with_for_update(of=worker_table)
    return list(await conn.scalars(silent))


async def jobs_served_by(conn: AsyncConnection, worker_ids: Sequence[UUID]) -> list[Any]:
    """(worker_id, id, room_id, category, name) of the jobs linked to each of
    ``worker_ids``."""
    statement = (
        select(
            link_table.c.worker_id,
            job_table.c.id,
            job_table.c.room_id,
            job_table.c.category,
            job_table.c.name,
        )
        .join(job_table, link_table.c.job_id == job_table.c.id)
        .where(link_table.c.worker_id.in_(worker_ids))
    )
    return list((await conn.execute(statement)).all())


async def delete_idle_workers(conn: AsyncConnection, worker_ids: Sequence[UUID]) -> list[UUID]:
    """Delete those of ``worker_ids`` holding no claimed or running task (their links go
    with them: ON DELETE CASCADE); the ids deleted."""
    statement = (
        delete(worker_table)
        .where(worker_table.c.id.in_(worker_ids), ~_BUSY)
        .returning(worker_table.c.id)
    )
    return list(await conn.scalars(statement))


async def fail_internal_tasks_active_since(
    conn: AsyncConnection, cutoff: datetime, *, error: str, now: datetime
) -> list[Any]:
    """``@internal`` tasks claimed or running since before ``cutoff`` (started, else due)
    fail with ``error``; their rows."""
    statement = (
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
            error=error,
            completed_at=now,
            **next_version(),
        )
        .returning(*task.c)
    )
    return list((await conn.execute(statement)).all())


async def delete_oldest_ended(conn: AsyncConnection, cutoff: datetime, batch: int) -> int:
    """Delete up to ``batch`` terminal tasks that ended before ``cutoff``, oldest first;
    how many went."""
    oldest = (
        select(task_table.c.id)
        .where(
            task_table.c.completed_at < cutoff,
            task_table.c.status.in_(sorted(s.value for s in TERMINAL_STATUSES)),
        )
        .order_by(task_table.c.completed_at)
        .limit(batch)
    )
    deleted = await conn.execute(
        delete(task_table).where(task_table.c.id.in_(oldest.scalar_subquery()))
    )
    return int(deleted.rowcount)
