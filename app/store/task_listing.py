"""The statements of a task listing: the count, a page of rows with its small documents
as stored text (``SMALL_DOCUMENT_BYTES``; the big ones are left out, told by ``small``),
and a group of big documents read after it."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from sqlalchemy import ColumnElement, Text, and_, case, cast, func, select

from taskhub.rules.records import TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.rules.task_filter import TaskFilter
from taskhub.store import task_search
from taskhub.store.columns import stored_document, stored_text
from taskhub.store.connections import Connection
from taskhub.store.page_positions import with_positions
from taskhub.store.sql_functions import document_is_small
from taskhub.store.tables import task_table as task
from taskhub.store.task_rows import SELECT_TASKS, documents_replaced

# A task whose payload and result are each at most this large (in bytes, as stored) is
# read with its page; a page's small documents take at most 500 x 2 x this.
SMALL_DOCUMENT_BYTES = 8 * 1024


def _where(
    room_id: str, job_id: UUID | None, status: TaskStatus | None
) -> list[ColumnElement[bool]]:
    """The room's tasks (of ``job_id``, in ``status``, when given)."""
    where = [task.c.room_id == room_id]
    if job_id is not None:
        where = [task.c.job_id == job_id, *where]
    if status is not None:
        where.append(task.c.status == status.value)
    return where


async def count_tasks(
    conn: Connection, room_id: str, *, job_id: UUID | None, status: TaskStatus | None
) -> int:
    """How many tasks the listing has."""
    statement = select(func.count()).select_from(task).where(*_where(room_id, job_id, status))
    return int(await conn.scalar(statement) or 0)


async def read_page(
    conn: Connection,
    room_id: str,
    *,
    job_id: UUID | None,
    status: TaskStatus | None,
    limit: int,
    offset: int,
) -> tuple[list[TaskRecord], frozenset[UUID]]:
    """A page of the listing, newest first, with queue positions; and the tasks whose
    documents were too big to come with it (listed without payload or result)."""
    statement = (
        _with_small_documents(conn.dialect.name)
        .where(*_where(room_id, job_id, status))
        .order_by(task.c.created_at.desc(), task.c.id.desc())
        .limit(limit)
        .offset(offset)
    )
    rows = (await conn.execute(statement)).all()
    deferred = frozenset(row.id for row in rows if not row.small)
    return await with_positions(conn, rows), deferred


async def read_filtered_page(
    conn: Connection, room_id: str, found: TaskFilter, *, sort: str, limit: int, offset: int
) -> tuple[list[TaskRecord], frozenset[UUID]]:
    """``read_page`` of the room's tasks ``found`` matches, in ``sort`` order
    (``task_search``)."""
    base = _with_small_documents(conn.dialect.name)
    statement = task_search.page_statement(base, room_id, found, sort).limit(limit).offset(offset)
    rows = (await conn.execute(statement)).all()
    deferred = frozenset(row.id for row in rows if not row.small)
    return await with_positions(conn, rows), deferred


@functools.cache
def _with_small_documents(dialect: str) -> Any:
    """``SELECT_TASKS`` with a task's payload and result as stored text when both are
    small (NULL otherwise), and whether they were (``small``)."""
    small = and_(
        document_is_small(dialect, task.c.payload, SMALL_DOCUMENT_BYTES),
        document_is_small(dialect, task.c.result, SMALL_DOCUMENT_BYTES),
    )
    statement = documents_replaced(SELECT_TASKS, lambda column: case((small, stored_text(column))))
    return statement.add_columns(small.label("small"))


@dataclass(frozen=True, slots=True)
class Documents:
    """A task's payload and result, and their size as stored (in characters)."""

    payload: Any
    result: Any
    size: int

    @classmethod
    def of(cls, payload: str | None, result: str | None, *, sqlite: bool) -> Documents:
        size = sum(len(text) for text in (payload, result) if text is not None)
        return cls(
            stored_document(payload, maybe_not_json=sqlite),
            stored_document(result, maybe_not_json=sqlite),
            size,
        )


async def read_documents(conn: Connection, task_ids: list[UUID]) -> dict[UUID, Documents]:
    """The documents of those of ``task_ids`` still stored, as the text they are stored as
    (not decoded)."""
    statement = select(task.c.id, cast(task.c.payload, Text), cast(task.c.result, Text))
    rows = (await conn.execute(statement.where(task.c.id.in_(task_ids)))).all()
    sqlite = conn.dialect.name == "sqlite"
    return {task_id: Documents.of(*texts, sqlite=sqlite) for task_id, *texts in rows}
