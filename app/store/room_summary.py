"""What ``@internal:analysis:RoomSummary`` reports of a room, as aggregates the database
computes: a few statements, each answering at most one row per status, per job or per
listed failure, whatever the room's history holds."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Row, and_, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.rules.states import TaskStatus
from taskhub.store.hot_statements import HotConnection
from taskhub.store.sql_functions import duration_microseconds
from taskhub.store.tables import job_table, task_table


@dataclass(frozen=True)
class RoomSummaryRows:
    statuses: list[Row[tuple[str, int, int, int | None, int | None]]]
    """Per status: ``status``, ``tasks``, ``timed`` (tasks with both times), ``total_us``
    and ``max_us`` (run times in whole microseconds, exactly)."""
    by_job: list[Row[tuple[str, str, str, int]]]
    """Per job: room, category, name, tasks."""
    failures: list[Row[tuple[object, str | None, object]]]
    """The latest failed tasks: ``id``, ``error``, ``completed_at``."""


async def read_room_summary(
    conn: AsyncConnection | HotConnection, room_id: str, failures: int
) -> RoomSummaryRows:
    task, job = task_table, job_table
    run_us = duration_microseconds(conn.dialect.name, task.c.started_at, task.c.completed_at)
    has_times = and_(task.c.started_at.is_not(None), task.c.completed_at.is_not(None))
    statuses = (
        await conn.execute(
            select(
                task.c.status,
                func.count().label("tasks"),
                func.count().filter(has_times).label("timed"),
                func.sum(run_us).label("total_us"),
                func.max(run_us).label("max_us"),
            )
            .where(task.c.room_id == room_id)
            .group_by(task.c.status)
        )
    ).all()
    by_job = (
        await conn.execute(
            select(job.c.room_id, job.c.category, job.c.name, func.count())
            .join(task, task.c.job_id == job.c.id)
            .where(task.c.room_id == room_id)
            .group_by(job.c.room_id, job.c.category, job.c.name)
        )
    ).all()
    latest_failures = (
        await conn.execute(
            select(task.c.id, task.c.error, task.c.completed_at)
            .where(task.c.room_id == room_id, task.c.status == TaskStatus.FAILED.value)
            .order_by(task.c.completed_at.desc())
            .limit(failures)
        )
    ).all()
    return RoomSummaryRows(list(statuses), list(by_job), list(latest_failures))
