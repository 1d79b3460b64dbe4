"""The statements of delayed and retried tasks coming due: which did between two moments,
when the next one will (both on the ``ix_task_due`` index, which holds only such tasks),
and queueing the waiting ones that are due (``ix_task_delayed``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import and_, bindparam, false, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.store.connections import Connection
from taskhub.store.tables import is_pending, is_waiting, job_table, task_table
from taskhub.store.turns import requeued_turn

task = task_table
_SCHEDULED = [is_pending(), task.c.run_at.is_not(None)]
_AFTER = bindparam("after", type_=task.c.run_at.type)
_AFTER_ID = bindparam("after_id", type_=task.c.id.type)
_UNTIL = bindparam("until", type_=task.c.run_at.type)
# Past the task at (``after``, ``after_id``) in (run_at, id) order: a batch that ends inside
# a run of tasks sharing one ``run_at`` goes on with the rest of that run.
_PAST_MARK = or_(task.c.run_at > _AFTER, and_(task.c.run_at == _AFTER, task.c.id > _AFTER_ID))
# ``after_id`` for a mark that is a moment, not a task: no id is greater.
END_OF_MOMENT = UUID(int=2**128 - 1)

_CAME_DUE = (
    select(task.c.id, task.c.room_id, task.c.run_at, job_table.c.room_id.label("job_room"))
    .add_columns(job_table.c.category, job_table.c.name)
    .join(job_table, job_table.c.id == task.c.job_id)
    .where(*_SCHEDULED, _PAST_MARK, task.c.run_at <= _UNTIL)
    .order_by(task.c.run_at, task.c.id)
    .limit(bindparam("limit"))
)
_NEXT_DUE = select(func.min(task.c.run_at)).where(*_SCHEDULED, task.c.run_at > _AFTER)
# Not a new version: nothing a client sees changes (``waiting`` and the turn are not part
# of a task).
_QUEUE_DUE = update(task).values(waiting=false(), turn_at=requeued_turn())
_DUE_WAITING = (
    select(task.c.id)
    .where(is_waiting(), task.c.run_at <= _UNTIL)
    .order_by(task.c.run_at)
    .limit(bindparam("limit"))
)
# SQLite (one writer): the tasks picked by a subquery.
_QUEUE_DUE_SQLITE = _QUEUE_DUE.where(task.c.id.in_(_DUE_WAITING.scalar_subquery()), is_waiting())
# PostgreSQL: the tasks picked once (a materialized CTE: as ``id IN (subquery)`` the planner
# may run the subquery again and queue more than ``limit``), skipping the ones a claim has
# locked (it is taking them: no need to wait).
_PICKED = _DUE_WAITING.with_for_update(skip_locked=True).cte("due").prefix_with("MATERIALIZED")
_QUEUE_DUE_POSTGRESQL = _QUEUE_DUE.where(task.c.id == _PICKED.c.id, is_waiting())


async def came_due_rows(
    conn: Connection, after: datetime, after_id: UUID, until: datetime, limit: int
) -> list[Any]:
    """(id, room_id, run_at, job_room, category, name) of the pending tasks whose
    ``run_at`` is in ``(after, until]`` past the task (``after``, ``after_id``), in
    (run_at, id) order, at most ``limit``."""
    params = {"after": after, "after_id": after_id, "until": until, "limit": limit}
    return list((await conn.execute(_CAME_DUE, params)).all())


async def queue_due_waiting(conn: AsyncConnection, until: datetime, limit: int) -> int:
    """Queue up to ``limit`` of the waiting tasks due at ``until``, earliest first; returns
    how many."""
    sqlite = conn.dialect.name == "sqlite"
    statement = _QUEUE_DUE_SQLITE if sqlite else _QUEUE_DUE_POSTGRESQL
    result = await conn.execute(statement, {"until": until, "limit": limit})
    return int(result.rowcount)


async def next_due_at(conn: Connection, after: datetime) -> datetime | None:
    """When the next waiting task comes due (after ``after``), if any waits."""
    due_at: datetime | None = await conn.scalar(_NEXT_DUE, {"after": after})
    return due_at
