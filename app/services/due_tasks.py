"""Delayed and retried tasks coming due: which ones did between two moments, and when the
next one will (both read on the ``ix_task_due`` index, which holds only such tasks); and
queueing the waiting ones that are due (``ix_task_delayed``), so that claims and queue
positions read them off the claim queue instead of stepping over the waiting ones."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from sqlalchemy import and_, bindparam, false, func, or_, select, update

from taskhub.rules.events import EventBatch, TaskAvailable
from taskhub.rules.naming import INTERNAL_ROOM
from taskhub.store.database import Database
from taskhub.store.tables import is_pending, is_waiting, job_table, task_table

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
# Not a new version: nothing a client sees changes (``waiting`` is not part of a task).
_QUEUE_DUE = update(task).values(waiting=false())
_DUE_WAITING = (
    select(task.c.id)
    .where(is_waiting(), task.c.run_at <= _UNTIL)
    .order_by(task.c.run_at)
    .limit(bindparam("limit"))
)
# PostgreSQL: the tasks picked once (a materialized CTE: as ``id IN (subquery)`` the planner
# may run the subquery again and queue more than ``limit``), skipping the ones a claim has
# locked (it is taking them: no need to wait).
_PICKED = _DUE_WAITING.with_for_update(skip_locked=True).cte("due").prefix_with("MATERIALIZED")
_QUEUE_DUE_LOCKING = _QUEUE_DUE.where(task.c.id == _PICKED.c.id, is_waiting())


@dataclass
class DueBatch:
    events: EventBatch  # ``task_available`` for the tasks of remote workers' jobs
    internal: list[UUID]  # ``@internal`` tasks, to dispatch
    count: int
    last: tuple[datetime, UUID] | None  # (run_at, id) of the batch's last task


async def came_due(
    db: Database,
    after: datetime,
    until: datetime,
    limit: int,
    after_id: UUID = END_OF_MOMENT,
) -> DueBatch:
    """The pending tasks whose ``run_at`` is in ``(after, until]`` (with ``after_id``: past
    the task (``after``, ``after_id``) in (run_at, id) order), in that order, at most
    ``limit`` of them: ``task_available`` for each, or its id if it is ``@internal``."""
    params = {"after": after, "after_id": after_id, "until": until, "limit": limit}
    async with db.read() as conn:
        rows = (await conn.execute(_CAME_DUE, params)).all()
    events, internal = EventBatch(), []
    for row in rows:
        if row.job_room == INTERNAL_ROOM:
            internal.append(row.id)
        else:
            job_name = f"{row.job_room}:{row.category}:{row.name}"
            events.add(TaskAvailable(job_name=job_name, room_id=row.room_id, task_id=str(row.id)))
    last = (rows[-1].run_at, rows[-1].id) if rows else None
    return DueBatch(events, internal, len(rows), last)


async def queue_due(db: Database, until: datetime, limit: int) -> int:
    """Queue up to ``limit`` of the waiting tasks due at ``until``, earliest first; returns
    how many. Claims take a due waiting task all the same: this only keeps them few."""
    if db.is_sqlite:
        statement = _QUEUE_DUE.where(task.c.id.in_(_DUE_WAITING.scalar_subquery()), is_waiting())
    else:
        statement = _QUEUE_DUE_LOCKING
    async with db.write() as conn:
        result = await conn.execute(statement, {"until": until, "limit": limit})
    return result.rowcount


async def next_due(db: Database, after: datetime) -> datetime | None:
    """When the next waiting task comes due (after ``after``), if any waits."""
    async with db.read() as conn:
        return await conn.scalar(_NEXT_DUE, {"after": after})
