"""Reading task rows: the select with job names and queue positions, and row -> record."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import Select, bindparam, case, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.records import TaskRecord
from app.domain.states import TaskStatus
from app.persistence.models import job_table, task_table

task = task_table
PENDING = TaskStatus.PENDING.value


def _ahead_of(row_task: Any) -> Any:
    """Number of pending tasks of the same job queued at or before this one (its 1-based
    position), counted on the partial pending-queue index."""
    ahead = task_table.alias("ahead")
    return (
        select(func.count())
        .select_from(ahead)
        .where(
            ahead.c.job_id == row_task.c.job_id,
            ahead.c.status == PENDING,
            tuple_(ahead.c.created_at, ahead.c.id) <= tuple_(row_task.c.created_at, row_task.c.id),
        )
        .scalar_subquery()
    )


def _select_tasks() -> Select[Any]:
    position = case((task.c.status == PENDING, _ahead_of(task)), else_=None)
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
    )


SELECT_TASKS = _select_tasks()
"""Tasks with their job's full name parts and queue position."""

_LOAD_TASK = SELECT_TASKS.where(task.c.id == bindparam("task_id"))
_POSITION = select(func.count()).where(
    task.c.job_id == bindparam("job_id"),
    task.c.status == PENDING,
    tuple_(task.c.created_at, task.c.id)
    <= tuple_(
        bindparam("created_at", type_=task.c.created_at.type),
        bindparam("task_id", type_=task.c.id.type),
    ),
)


async def queue_position(conn: AsyncConnection, record: TaskRecord) -> int | None:
    if record.status != TaskStatus.PENDING:
        return None
    params = {"job_id": record.job_id, "created_at": record.created_at, "task_id": record.id}
    return await conn.scalar(_POSITION, params)


async def load_task(conn: AsyncConnection, task_id: UUID) -> TaskRecord | None:
    row = (await conn.execute(_LOAD_TASK, {"task_id": task_id})).first()
    return joined_record(row) if row is not None else None
