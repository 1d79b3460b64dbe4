"""The statements of task logs: the fence row a POST checks, the insert of a batch, the
trim to a task's bound, and the paged read. Lines go with their task: the foreign key
cascades (PostgreSQL, and SQLite with ``foreign_keys=ON``: ``store.database``).

A POST runs in autocommit mode (no transaction: on SQLite its statements join commit
groups, as a PATCH's do): the fence is read, then the lines inserted; a task that ends in
between keeps the lines of that one batch, harmlessly. Only a trim, rare, is a
transaction of its own."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import bindparam, delete, func, insert, select, update

from taskhub.store.connections import AsyncConnection, Connection, HotConnection
from taskhub.store.hot_statements import hot
from taskhub.store.tables import task_log_table, task_table, worker_table

log = task_log_table
task = task_table

_FENCE = (
    select(
        task.c.id,
        task.c.status,
        task.c.claim_token,
        task.c.attempt,
        task.c.room_id,
        task.c.submitted_by,
        worker_table.c.user_id.label("worker_owner"),
    )
    .outerjoin(worker_table, worker_table.c.id == task.c.worker_id)
    .where(task.c.id == bindparam("b_task_id"))
)
hot(_FENCE)


async def fence_row(conn: Connection, task_id: UUID) -> Any | None:
    """The task's status, claim token, attempt, room, submitter and the owner of the
    worker holding it (None if none); None if there is no such task."""
    return (await conn.execute(_FENCE, {"b_task_id": task_id})).first()


async def insert_lines(
    conn: Connection, task_id: UUID, attempt: int, lines: Sequence[dict[str, Any]]
) -> list[Any]:
    """Insert ``lines`` (``logged_at``, ``level``, ``logger``, ``message``, ``dropped``) in
    order; the stored rows, oldest first."""
    values = [{"task_id": task_id, "attempt": attempt, **line} for line in lines]
    if len(values) <= HOT_ROWS:  # the common batch: one hot statement of its size
        params = {f"{name}_{i}": row[name] for i, row in enumerate(values) for name in _COLUMNS}
        rows = list((await conn.execute(_hot_insert(len(values)), params)).all())
    else:
        # One statement for every bigger size (compiled once; SQLAlchemy sends the rows
        # as multi-row VALUES): a ``values([...])`` statement would be compiled per batch.
        sa = await conn.sa() if isinstance(conn, HotConnection) else conn
        rows = list((await sa.execute(_INSERT, values)).all())
    rows.sort(key=lambda row: row.id)
    return rows


_INSERT = insert(log).returning(*log.c, sort_by_parameter_order=True)
_COLUMNS = ("task_id", "attempt", "logged_at", "level", "logger", "message", "dropped")
HOT_ROWS = 32  # batches up to this many lines go as hot statements (one per size)


@functools.cache
def _hot_insert(count: int) -> Any:
    """``INSERT … VALUES`` of ``count`` rows ``RETURNING *``; parameters ``<column>_<row>``."""
    rows = [
        {name: bindparam(f"{name}_{i}", type_=log.c[name].type) for name in _COLUMNS}
        for i in range(count)
    ]
    return hot(insert(log).values(rows).returning(*log.c))


_BEYOND = hot(
    select(log.c.id)
    .where(log.c.task_id == bindparam("b_task_id"))
    .order_by(log.c.id.desc())
    .limit(1)
    .offset(bindparam("b_keep"))
)


async def beyond(conn: Connection, task_id: UUID, keep: int) -> int | None:
    """The id of the task's newest line beyond its newest ``keep`` (None: none is)."""
    row = (await conn.execute(_BEYOND, {"b_task_id": task_id, "b_keep": keep})).first()
    return None if row is None else int(row.id)


async def trim(conn: AsyncConnection, task_id: UUID, keep: int) -> int:
    """Delete the task's oldest lines beyond the newest ``keep`` (in the caller's
    transaction); their count (with the drops they carried) is added to the oldest line
    kept. How many lines went."""
    cutoff = await beyond(conn, task_id, keep)
    if cutoff is None:
        return 0
    older = (log.c.task_id == task_id, log.c.id <= cutoff)
    counted = (
        await conn.execute(
            select(func.count(), func.coalesce(func.sum(log.c.dropped), 0)).where(*older)
        )
    ).one()
    removed, carried = int(counted[0]), int(counted[1])
    await conn.execute(delete(log).where(*older))
    oldest_kept = select(func.min(log.c.id)).where(log.c.task_id == task_id).scalar_subquery()
    await conn.execute(
        update(log).where(log.c.id == oldest_kept).values(dropped=log.c.dropped + removed + carried)
    )
    return removed


_EXISTS = hot(select(task.c.id).where(task.c.id == bindparam("b_task_id")))


async def task_exists(conn: Connection, task_id: UUID) -> bool:
    return (await conn.execute(_EXISTS, {"b_task_id": task_id})).first() is not None


_PAGE = hot(
    select(log)
    .where(log.c.task_id == bindparam("b_task_id"), log.c.id > bindparam("b_after"))
    .order_by(log.c.id)
    .limit(bindparam("b_limit"))
)


async def read_lines(conn: Connection, task_id: UUID, after: int, limit: int) -> list[Any]:
    """Up to ``limit`` of the task's lines with an id above ``after``, oldest first."""
    params = {"b_task_id": task_id, "b_after": after, "b_limit": limit}
    return list((await conn.execute(_PAGE, params)).all())


def line_item(row: Any) -> dict[str, Any]:
    """A stored line as answers and events carry it."""
    at: datetime = row.logged_at
    return {
        "id": int(row.id),
        "attempt": int(row.attempt),
        "at": at,
        "level": row.level,
        "logger": row.logger,
        "message": row.message,
        "dropped": int(row.dropped),
    }
