"""The statements of attempts that end without their worker saying so: which attempts
(``held_by``, ``lease_ran_out``, ``worker_gone``: conditions for the statements here),
retrying one, failing those with no attempt left. Every write repeats the conditions."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import ColumnElement, exists, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.rules.states import TaskStatus
from taskhub.store.queue_positions import due_at
from taskhub.store.tables import is_active, next_version, task_table, worker_table
from taskhub.store.turns import requeued_turn

task = task_table
_ACTIVE = is_active()
Which = Sequence[ColumnElement[bool]]


def held_by(worker_id: UUID) -> Which:
    """The attempts of ``worker_id``."""
    return [task.c.worker_id == worker_id]


def lease_ran_out(now: datetime) -> Which:
    """The attempts whose lease ended before ``now``."""
    return [task.c.lease_expires_at < now]


def worker_gone() -> Which:
    """The attempts whose worker no longer exists."""
    return [task.c.worker_id.is_not(None), ~exists().where(worker_table.c.id == task.c.worker_id)]


async def retryable(conn: AsyncConnection, which: Which) -> list[Any]:
    """(id, attempt, worker_id) of the claimed/running tasks of ``which`` with attempts
    left."""
    statement = select(task.c.id, task.c.attempt, task.c.worker_id).where(
        _ACTIVE, *which, task.c.attempt < task.c.max_attempts
    )
    return list((await conn.execute(statement)).all())


async def retry(
    conn: AsyncConnection,
    which: Which,
    task_id: UUID,
    attempt: int,
    *,
    run_at: datetime | None,
    error: str,
    now: datetime,
) -> Any | None:
    """Attempt ``attempt`` of the task (still claimed/running and of ``which``) back to
    pending, due at ``run_at``; its row, or None if it changed meanwhile."""
    statement = (
        update(task)
        .where(task.c.id == task_id, task.c.attempt == attempt, _ACTIVE, *which)
        .values(
            status=TaskStatus.PENDING.value,
            **due_at(run_at, now),
            turn_at=requeued_turn(),
            worker_id=None,
            claim_token=None,
            lease_expires_at=None,
            error=error,
            **next_version(),
        )
        .returning(*task.c)
    )
    return (await conn.execute(statement)).first()


async def fail_exhausted(
    conn: AsyncConnection, which: Which, *, error: str, now: datetime
) -> list[Any]:
    """The claimed/running tasks of ``which`` with no attempt left fail; their rows."""
    statement = (
        update(task)
        .where(_ACTIVE, *which, task.c.attempt >= task.c.max_attempts)
        .values(status=TaskStatus.FAILED.value, error=error, completed_at=now, **next_version())
        .returning(*task.c)
    )
    return list((await conn.execute(statement)).all())
