"""The statements of a room's worker list as the dashboard shows it: for a page of
workers (``workers.worker_page``), their owners' names, the live jobs of theirs the room
sees, their claimed/running tasks (``ix_task_assigned_worker``), and their slots."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import func, select

from taskhub.store.connections import Connection
from taskhub.store.tables import (
    is_active,
    job_table,
    link_table,
    task_table,
    user_table,
    worker_table,
)

RUNNING_LISTED = 100


async def worker_rows(conn: Connection, worker_ids: Sequence[UUID]) -> dict[UUID, Any]:
    """``(id, created_at, slots, owner)`` of each worker."""
    statement = (
        select(
            worker_table.c.id,
            worker_table.c.created_at,
            worker_table.c.slots,
            user_table.c.name.label("owner"),
        )
        .join(user_table, user_table.c.id == worker_table.c.user_id)
        .where(worker_table.c.id.in_(list(worker_ids)))
    )
    return {row.id: row for row in (await conn.execute(statement)).all()}


async def visible_jobs(
    conn: Connection, worker_ids: Sequence[UUID], rooms: Sequence[str]
) -> dict[UUID, list[str]]:
    """Per worker, the full names of the live jobs of ``rooms`` it serves, sorted."""
    statement = (
        select(link_table.c.worker_id, job_table.c.room_id, job_table.c.category, job_table.c.name)
        .join(job_table, job_table.c.id == link_table.c.job_id)
        .where(
            link_table.c.worker_id.in_(list(worker_ids)),
            job_table.c.room_id.in_(list(rooms)),
            job_table.c.deleted.is_(False),
        )
    )
    jobs: dict[UUID, list[str]] = {}
    for row in (await conn.execute(statement)).all():
        jobs.setdefault(row.worker_id, []).append(f"{row.room_id}:{row.category}:{row.name}")
    return {worker_id: sorted(names) for worker_id, names in jobs.items()}


async def active_tasks(
    conn: Connection, worker_ids: Sequence[UUID]
) -> dict[UUID, tuple[list[UUID], int]]:
    """Per worker, its claimed/running tasks (any room; oldest first, at most
    ``RUNNING_LISTED``) and how many it holds."""
    ranked = (
        select(
            task_table.c.worker_id,
            task_table.c.id,
            func.row_number()
            .over(
                partition_by=task_table.c.worker_id,
                order_by=(task_table.c.created_at, task_table.c.id),
            )
            .label("place"),
            func.count().over(partition_by=task_table.c.worker_id).label("held"),
        )
        .where(task_table.c.worker_id.in_(list(worker_ids)), is_active())
        .subquery()
    )
    statement = select(ranked).where(ranked.c.place <= RUNNING_LISTED).order_by(ranked.c.place)
    found: dict[UUID, tuple[list[UUID], int]] = {}
    for row in (await conn.execute(statement)).all():
        listed, _held = found.setdefault(row.worker_id, ([], int(row.held)))
        listed.append(row.id)
    return found
