"""Bulk seeding, for the benchmarks: many task or user rows a statement, straight into
their tables.

Unlike a submit (``store.tasks.insert_task``), nothing is checked against the job (its
version, its deletion) and no queue position is read; each row carries what the caller
gives and its table's defaults for the rest. The queue counts' triggers still count every
task. After a big seed on PostgreSQL, ``refresh_statistics`` does what autovacuum would
soon do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import insert
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.store.database import Database
from taskhub.store.tables import task_table, user_table

# The tables a seed writes many rows of: the tasks and the queue counts their triggers keep.
SEEDED_TABLES = "task, task_queue_bucket"


@dataclass(frozen=True, slots=True)
class SeedTask:
    """One task row as a seed gives it. ``turn_at`` None: its ``created_at`` (a FIFO
    job's turn); a ``run_at`` makes it ``waiting`` (due later)."""

    id: UUID
    job_id: UUID
    room_id: str
    created_at: datetime
    submitted_by: UUID | None
    status: str = "pending"
    payload: Any = field(default_factory=dict)
    turn_at: datetime | None = None
    share_key: str | None = None
    run_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    worker_id: UUID | None = None
    error: str | None = None
    attempt: int = 0


def _task_row(task: SeedTask) -> dict[str, Any]:
    return {
        "id": task.id,
        "job_id": task.job_id,
        "room_id": task.room_id,
        "status": task.status,
        "payload": task.payload,
        "created_at": task.created_at,
        "turn_at": task.created_at if task.turn_at is None else task.turn_at,
        "share_key": task.share_key,
        "run_at": task.run_at,
        "waiting": task.run_at is not None,
        "started_at": task.started_at,
        "completed_at": task.completed_at,
        "worker_id": task.worker_id,
        "error": task.error,
        "submitted_by": task.submitted_by,
        "attempt": task.attempt,
    }


async def insert_seed_tasks(conn: AsyncConnection, tasks: Sequence[SeedTask]) -> None:
    """Insert ``tasks`` in one statement (every row names the same columns)."""
    if tasks:
        await conn.execute(insert(task_table), [_task_row(task) for task in tasks])


async def insert_seed_users(
    conn: AsyncConnection, users: Sequence[tuple[UUID, str]], created_at: datetime
) -> None:
    """Insert ordinary users (id, name), without tokens, in one statement."""
    if users:
        rows = [
            {"id": user_id, "name": name, "is_superuser": False, "created_at": created_at}
            for user_id, name in users
        ]
        await conn.execute(insert(user_table), rows)


async def refresh_statistics(db: Database, *, vacuum: bool) -> str | None:
    """After a bulk insert, what autovacuum would soon do on PostgreSQL (nothing on SQLite):
    fresh statistics of the seeded tables and (``vacuum``) a visibility map, which lets a
    position count scan the index alone, and the queue counts' rows freed of the versions
    each counted insert left behind. Returns the statement run, if any."""
    if db.is_sqlite:
        return None
    statement = f"VACUUM ANALYZE {SEEDED_TABLES}" if vacuum else f"ANALYZE {SEEDED_TABLES}"
    async with db.autocommit() as conn:  # VACUUM cannot run inside a transaction
        await (await conn.sa()).exec_driver_sql(statement)
    return statement
