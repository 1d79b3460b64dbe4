"""The statements of ``@internal`` tasks and jobs: a task's status read row-locked, its
guarded update, the pending ones not yet dispatched, the job rows set up at start-up."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import Select, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.clock import new_id
from taskhub.rules.naming import INTERNAL_ROOM
from taskhub.store.connections import Connection
from taskhub.store.inserts import insert_ignoring_duplicates
from taskhub.store.tables import is_pending, job_table, next_version, task_table

task = task_table


def internal_job_ids() -> Select[tuple[UUID]]:
    """The ids of the ``@internal`` jobs (to use as a subquery)."""
    return select(job_table.c.id).where(job_table.c.room_id == INTERNAL_ROOM)


async def locked_status(conn: AsyncConnection, task_id: UUID) -> str | None:
    """The task's status, its row locked for the transaction (SQLite: the one writer)."""
    return await conn.scalar(select(task.c.status).where(task.c.id == task_id).with_for_update())


async def update_from(
    conn: AsyncConnection,
    task_id: UUID,
    status: str,
    values: dict[str, Any],
    *,
    attempt: int | None = None,
    claim_token: UUID | None = None,
) -> Any | None:
    """Write ``values`` (and a new version) to the task if it is still in ``status`` (and
    of ``attempt``, under ``claim_token``, when given); its row, or None."""
    guard = [task.c.id == task_id, task.c.status == status]
    if attempt is not None:
        guard.append(task.c.attempt == attempt)
    if claim_token is not None:
        guard.append(task.c.claim_token == claim_token)
    statement = update(task).where(*guard).values(**values, **next_version()).returning(*task.c)
    return (await conn.execute(statement)).first()


async def undispatched_rows(
    conn: Connection, before: datetime, among: list[UUID] | None, limit: int
) -> list[Any]:
    """Pending ``@internal`` tasks due (else submitted) before ``before`` (of ``among``
    only, when given), oldest first."""
    conditions = [
        is_pending(),
        task.c.job_id.in_(internal_job_ids()),
        func.coalesce(task.c.run_at, task.c.created_at) < before,
    ]
    if among is not None:
        conditions.append(task.c.id.in_(among))
    statement = select(task).where(*conditions).order_by(task.c.created_at).limit(limit)
    return list((await conn.execute(statement)).all())


async def task_under_token(conn: Connection, task_id: UUID, claim_token: UUID) -> Any | None:
    """The task's row if it carries ``claim_token``."""
    statement = select(task).where(task.c.id == task_id, task.c.claim_token == claim_token)
    return (await conn.execute(statement)).first()


async def ensure_internal_job(
    conn: AsyncConnection,
    category: str,
    name: str,
    schema: dict[str, Any],
    now: datetime,
    *,
    costly: bool = False,
) -> bool:
    """Create the ``@internal`` job row, or revive it or refresh its schema; whether an
    existing row changed. ``costly`` (``job.costly``) is set as given, without changing the
    job's version: it is not part of what a submit checks against the job it read."""
    await conn.execute(
        insert_ignoring_duplicates(
            conn.dialect.name,
            job_table,
            dict(
                id=new_id(), room_id=INTERNAL_ROOM, category=category, name=name,
                schema=schema, deleted=False, created_at=now, updated_at=now, costly=costly,
            ),
        )
    )  # fmt: skip
    row = (
        await conn.execute(
            select(
                job_table.c.id, job_table.c.schema, job_table.c.deleted, job_table.c.costly
            ).where(
                job_table.c.room_id == INTERNAL_ROOM,
                job_table.c.category == category,
                job_table.c.name == name,
            )
        )
    ).one()
    if bool(row.costly) != costly:
        await conn.execute(update(job_table).where(job_table.c.id == row.id).values(costly=costly))
    if not row.deleted and row.schema == schema:
        return False
    await conn.execute(
        update(job_table)
        .where(job_table.c.id == row.id)
        .values(deleted=False, schema=schema, updated_at=now)
    )
    return True
