"""Delayed and retried tasks coming due: which ones did between two moments, and when the
next one will; and queueing the waiting ones that are due, so that claims and queue
positions read them off the claim queue instead of stepping over the waiting ones
(statements: ``app/store/due_tasks.py``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from taskhub.rules.events import EventBatch, TaskAvailable
from taskhub.rules.naming import INTERNAL_ROOM
from taskhub.store import due_tasks as store
from taskhub.store.database import Database
from taskhub.store.due_tasks import END_OF_MOMENT


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
    async with db.read() as conn:
        rows = await store.came_due_rows(conn, after, after_id, until, limit)
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
    async with db.write() as conn:
        return await store.queue_due_waiting(conn, until, limit)


async def next_due(db: Database, after: datetime) -> datetime | None:
    """When the next waiting task comes due (after ``after``), if any waits."""
    async with db.read() as conn:
        return await store.next_due_at(conn, after)
