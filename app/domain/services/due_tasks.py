"""Delayed and retried tasks coming due: which ones did between two moments, and when the
next one will (both read on the ``ix_task_due`` index, which holds only such tasks)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from sqlalchemy import and_, bindparam, func, or_, select

from app.domain.events import EventBatch, TaskAvailable
from app.domain.naming import INTERNAL_ROOM
from app.persistence.database import Database
from app.persistence.models import is_pending, job_table, task_table

task = task_table
_WAITING = [is_pending(), task.c.run_at.is_not(None)]
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
    .where(*_WAITING, _PAST_MARK, task.c.run_at <= _UNTIL)
    .order_by(task.c.run_at, task.c.id)
    .limit(bindparam("limit"))
)
_NEXT_DUE = select(func.min(task.c.run_at)).where(*_WAITING, task.c.run_at > _AFTER)


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


async def next_due(db: Database, after: datetime) -> datetime | None:
    """When the next waiting task comes due (after ``after``), if any waits."""
    async with db.read() as conn:
        return await conn.scalar(_NEXT_DUE, {"after": after})
