"""The statements of a filtered, sorted listing of a room's tasks (``TaskFilter``): its
``WHERE``, its ``ORDER BY``, the count, the summary page (no documents, with the
submitter's name) and the ids a bulk action covers.

``q`` is ``ILIKE '%text%' ESCAPE '\\'`` over the error and the payload's stored JSON text
on both engines (SQLAlchemy spells it ``lower(x) LIKE lower(y)`` on SQLite, whose
``lower`` folds ASCII letters only). No index serves a substring: the room's tasks (as
narrowed by the other fields) are read, which stays in the tens of milliseconds at
50,000 tasks (``benchmarks/scenarios/dashboard.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import ColumnElement, Text, cast, func, null, or_, select

from taskhub.rules.records import TaskRecord
from taskhub.rules.task_filter import DEFAULT_SORT, TaskFilter, like_pattern
from taskhub.store.connections import Connection
from taskhub.store.page_positions import with_positions
from taskhub.store.tables import job_table, task_table, user_table
from taskhub.store.task_rows import SELECT_TASKS, documents_replaced

task = task_table
_SORT_COLUMNS = {
    "created_at": task.c.created_at,
    "started_at": task.c.started_at,
    "completed_at": task.c.completed_at,
    "status": task.c.status,
}


_NULLABLE = frozenset({"started_at", "completed_at"})


def filter_where(room_id: str, found: TaskFilter) -> list[ColumnElement[bool]]:
    """The room's tasks that ``found`` matches."""
    where: list[ColumnElement[bool]] = [task.c.room_id == room_id]
    if len(found.statuses) == 1:
        where.append(task.c.status == found.statuses[0].value)
    elif found.statuses:
        where.append(task.c.status.in_([status.value for status in found.statuses]))
    if found.job is not None:
        named = select(job_table.c.id).where(
            job_table.c.room_id == found.job.room_id,
            job_table.c.category == found.job.category,
            job_table.c.name == found.job.name,
        )
        where.append(task.c.job_id.in_(named))
    if found.submitted_by is not None:
        where.append(task.c.submitted_by == found.submitted_by)
    if found.worker_id is not None:
        where.append(task.c.worker_id == found.worker_id)
    if found.q is not None:
        pattern = like_pattern(found.q)
        where.append(
            or_(
                task.c.error.ilike(pattern, escape="\\"),
                cast(task.c.payload, Text).ilike(pattern, escape="\\"),
            )
        )
    return where


def order_by(sort: str = DEFAULT_SORT) -> list[Any]:
    """``sort`` (``TaskFilter``'s ``SORTS``) as ``ORDER BY`` terms, the id breaking ties in
    the same direction; tasks without the time (not started, not finished) come last
    either way, on both engines."""
    descending = sort.startswith("-")
    name = sort.lstrip("-")
    column = _SORT_COLUMNS[name]
    term = column.desc() if descending else column.asc()
    if name in _NULLABLE:  # (only there: a NULLS clause would keep an index from the order)
        term = term.nulls_last()
    return [term, task.c.id.desc() if descending else task.c.id.asc()]


async def count_matching(conn: Connection, room_id: str, found: TaskFilter) -> int:
    """How many of the room's tasks ``found`` matches."""
    statement = select(func.count()).select_from(task).where(*filter_where(room_id, found))
    return int(await conn.scalar(statement) or 0)


async def matching_ids(conn: Connection, room_id: str, found: TaskFilter, limit: int) -> list[UUID]:
    """Up to ``limit`` ids of the matching tasks, oldest first."""
    statement = (
        select(task.c.id)
        .where(*filter_where(room_id, found))
        .order_by(task.c.created_at, task.c.id)
        .limit(limit)
    )
    return list(await conn.scalars(statement))


_SUMMARY = (
    documents_replaced(SELECT_TASKS, lambda column: null())
    .add_columns(user_table.c.name.label("submitter"))
    .outerjoin(user_table, user_table.c.id == task.c.submitted_by)
)


async def read_summary_page(
    conn: Connection,
    room_id: str,
    found: TaskFilter,
    *,
    sort: str,
    limit: int,
    offset: int,
) -> tuple[list[TaskRecord], dict[UUID, str | None]]:
    """A page of the matching tasks without payload or result (never read), with queue
    positions; and each task's submitter's user name (None: that user is gone)."""
    statement = (
        _SUMMARY.where(*filter_where(room_id, found))
        .order_by(*order_by(sort))
        .limit(limit)
        .offset(offset)
    )
    rows = (await conn.execute(statement)).all()
    names = {row.id: row.submitter for row in rows}
    return await with_positions(conn, rows), names


def page_statement(base: Any, room_id: str, found: TaskFilter, sort: str) -> Any:
    """``base`` (a select of task rows) narrowed to the matching tasks, in ``sort`` order."""
    return base.where(*filter_where(room_id, found)).order_by(*order_by(sort))


async def tasks_in_room(conn: Connection, room_id: str, task_ids: Sequence[UUID]) -> set[UUID]:
    """Those of ``task_ids`` that are tasks of the room."""
    statement = select(task.c.id).where(task.c.id.in_(list(task_ids)), task.c.room_id == room_id)
    return set(await conn.scalars(statement))
