"""Reading task rows: the select with job names, queue positions, and row -> record.

The queue order of a job, at a moment ``now``: first the ready tasks (``run_at`` NULL or
past), higher priority first and FIFO (``created_at``, ``id``) within a priority — the
order claims take; then the delayed ones by ``run_at``. A pending task's ``queue_position``
is its 1-based place in that order, counted on the claim-queue index in at most two index
ranges (the priorities above it, and its own priority up to it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import ColumnElement, Select, and_, bindparam, case, func, or_, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.records import TaskRecord
from app.domain.states import TaskStatus
from app.persistence.models import is_pending, job_table, task_table
from app.persistence.types import utcnow

task = task_table
PENDING = TaskStatus.PENDING.value
NOW = bindparam("now", type_=task.c.run_at.type)


@dataclass(frozen=True)
class _Subject:
    """The task whose position is counted: bound parameters, or a correlated row."""

    job_id: Any
    priority: Any
    created_at: Any
    id: Any
    run_at: Any

    @classmethod
    def row(cls, table: Any) -> _Subject:
        c = table.c
        return cls(c.job_id, c.priority, c.created_at, c.id, c.run_at)

    @classmethod
    def params(cls) -> _Subject:
        return cls(
            bindparam("job_id", type_=task.c.job_id.type),
            bindparam("priority", type_=task.c.priority.type),
            bindparam("created_at", type_=task.c.created_at.type),
            bindparam("task_id", type_=task.c.id.type),
            bindparam("run_at", type_=task.c.run_at.type),
        )


def _ready(table: Any) -> ColumnElement[bool]:
    return or_(table.c.run_at.is_(None), table.c.run_at <= NOW)


def _count(*where: Any) -> Any:
    ahead = task_table.alias("ahead")
    return (
        select(func.count())
        .select_from(ahead)
        .where(*(clause(ahead) for clause in where))
        .scalar_subquery()
    )


def _ready_position(s: _Subject) -> Any:
    def queued(a: Any) -> Any:
        return and_(a.c.job_id == s.job_id, is_pending(a), _ready(a))

    higher = _count(queued, lambda a: a.c.priority > s.priority)
    level = _count(
        queued,
        lambda a: a.c.priority == s.priority,
        lambda a: tuple_(a.c.created_at, a.c.id) <= tuple_(s.created_at, s.id),
    )
    return higher + level


def _delayed_position(s: _Subject) -> Any:
    def queued(a: Any) -> Any:
        return and_(a.c.job_id == s.job_id, is_pending(a))

    ready = _count(queued, _ready)
    delayed_before = _count(
        queued,
        lambda a: a.c.run_at > NOW,
        lambda a: or_(
            a.c.run_at < s.run_at,
            and_(
                a.c.run_at == s.run_at,
                or_(
                    a.c.priority > s.priority,
                    and_(
                        a.c.priority == s.priority,
                        tuple_(a.c.created_at, a.c.id) <= tuple_(s.created_at, s.id),
                    ),
                ),
            ),
        ),
    )
    return ready + delayed_before


def _select_tasks() -> Select[Any]:
    row = _Subject.row(task)
    position = case(
        (task.c.status != PENDING, None),
        (_ready(task), _ready_position(row)),
        else_=_delayed_position(row),
    )
    return select(
        task,
        job_table.c.room_id.label("job_room_id"),
        job_table.c.category.label("job_category"),
        job_table.c.name.label("job_name_part"),
        position.label("queue_position"),
    ).join(job_table, job_table.c.id == task.c.job_id)


def joined_record(row: Any) -> TaskRecord:
    name = f"{row.job_room_id}:{row.job_category}:{row.job_name_part}"
    return task_record(row, name, row.queue_position)


def task_record(row: Any, job_name: str, queue_position: int | None = None) -> TaskRecord:
    return TaskRecord(
        id=row.id,
        job_id=row.job_id,
        job_name=job_name,
        room_id=row.room_id,
        status=TaskStatus(row.status),
        payload=row.payload,
        created_at=row.created_at,
        started_at=row.started_at,
        completed_at=row.completed_at,
        worker_id=row.worker_id,
        error=row.error,
        submitted_by=row.submitted_by,
        claim_token=row.claim_token,
        attempt=row.attempt,
        queue_position=queue_position,
        result=row.result,
        progress=row.progress,
        progress_message=row.progress_message,
        priority=row.priority,
        max_attempts=row.max_attempts,
        run_at=row.run_at,
    )


SELECT_TASKS = _select_tasks()
"""Tasks with their job's full name parts and queue position (binds ``now``)."""

_SELECT_ONE = select(
    task,
    job_table.c.room_id.label("job_room_id"),
    job_table.c.category.label("job_category"),
    job_table.c.name.label("job_name_part"),
).join(job_table, job_table.c.id == task.c.job_id)
_LOAD_TASK = _SELECT_ONE.where(task.c.id == bindparam("task_id"))
_READY_POSITION = select(_ready_position(_Subject.params()))
_DELAYED_POSITION = select(_delayed_position(_Subject.params()))


def is_ready(run_at: datetime | None, now: datetime) -> bool:
    return run_at is None or run_at <= now


async def queue_position(
    conn: AsyncConnection, record: TaskRecord, now: datetime | None = None
) -> int | None:
    """``record``'s place in its job's queue at ``now`` (None unless pending)."""
    if record.status != TaskStatus.PENDING:
        return None
    now = now or utcnow()
    statement = _READY_POSITION if is_ready(record.run_at, now) else _DELAYED_POSITION
    params = {
        "job_id": record.job_id,
        "priority": record.priority,
        "created_at": record.created_at,
        "task_id": record.id,
        "run_at": record.run_at,
        "now": now,
    }
    return await conn.scalar(statement, params)


async def load_task(conn: AsyncConnection, task_id: UUID) -> TaskRecord | None:
    """One task with its queue position (two short statements: the row, then its place)."""
    row = (await conn.execute(_LOAD_TASK, {"task_id": task_id})).first()
    if row is None:
        return None
    record = task_record(row, f"{row.job_room_id}:{row.job_category}:{row.job_name_part}")
    record.queue_position = await queue_position(conn, record)
    return record
