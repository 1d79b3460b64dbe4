"""Task rows: the task SELECT with its job's name parts, and row -> ``TaskRecord``.

Every module that reads whole task rows reads them through here: ``SELECT_TASKS`` (or a
statement made from it), ``joined_record`` / ``task_record`` for the record, and
``load_task`` / ``with_position`` for a record with its queue place
(``queue_positions``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, fields
from datetime import datetime
from operator import attrgetter
from typing import Any
from uuid import UUID

from sqlalchemy import Select, bindparam, select

from taskhub.rules.records import TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.store import queue_positions
from taskhub.store.columns import stored_text
from taskhub.store.connections import Connection
from taskhub.store.hot_statements import hot
from taskhub.store.tables import job_table, task_table

task = task_table


def joined_record(row: Any) -> TaskRecord:
    name = f"{row.job_room_id}:{row.job_category}:{row.job_name_part}"
    return task_record(row, name)


def task_record(row: Any, job_name: str, queue_position: int | None = None) -> TaskRecord:
    """The record of a task row: each ``TaskRecord`` field from the column of its name (a
    new column is read once it is a field of the record), but the job's full name and the
    queue position, which are no columns of ``task``. A field with a default may be
    missing from the row (statements that return only some columns)."""
    values = dict(zip(_REQUIRED, _read_required(row), strict=True))
    for name, default in _OPTIONAL:
        values[name] = getattr(row, name, default)
    values["status"] = TaskStatus(values["status"])
    values["share_backlogged"] = bool(values["share_backlogged"])
    return TaskRecord(job_name=job_name, queue_position=queue_position, **values)


_COLUMN_FIELDS = [
    item for item in fields(TaskRecord) if item.name not in {"job_name", "queue_position"}
]
_REQUIRED = tuple(item.name for item in _COLUMN_FIELDS if item.default is MISSING)
_OPTIONAL = tuple(
    (item.name, item.default) for item in _COLUMN_FIELDS if item.default is not MISSING
)
_read_required = attrgetter(*_REQUIRED)


SELECT_TASKS = select(
    task,
    job_table.c.room_id.label("job_room_id"),
    job_table.c.category.label("job_category"),
    job_table.c.name.label("job_name_part"),
).join(job_table, job_table.c.id == task.c.job_id)
"""Tasks with their job's full name parts (``joined_record`` turns a row into a record)."""


def documents_replaced(statement: Select[Any], replace: Callable[[Any], Any]) -> Select[Any]:
    """``statement`` (``SELECT_TASKS`` or one made from it) with its ``payload`` and
    ``result`` columns replaced by ``replace(column)``, under the same names."""
    columns = [
        replace(column).label(column.name) if column.name in ("payload", "result") else column
        for column in statement.selected_columns
    ]
    return statement.with_only_columns(*columns)


_LOAD_TASK = hot(SELECT_TASKS.where(task.c.id == bindparam("task_id")))
_LOAD_TASK_AS_STORED = hot(
    documents_replaced(SELECT_TASKS, stored_text).where(task.c.id == bindparam("task_id"))
)


async def with_position(conn: Connection, row: Any, now: datetime | None = None) -> TaskRecord:
    """The record of a joined row, with its queue position if it is pending."""
    record = joined_record(row)
    record.queue_position = await queue_positions.queue_position(conn, record, now)
    return record


async def load_task(
    conn: Connection, task_id: UUID, *, stored_documents: bool = False
) -> TaskRecord | None:
    """One task with its queue position (two short statements: the row, then its place).
    ``stored_documents``: its payload and result as their stored text, to be written into
    an answer as they are (not decoded: a task of two 0.9 MB documents took 37 ms of the
    event loop to read, decode and write again, most of it decoding)."""
    statement = _LOAD_TASK_AS_STORED if stored_documents else _LOAD_TASK
    row = (await conn.execute(statement, {"task_id": task_id})).first()
    return None if row is None else await with_position(conn, row)
