"""Listing a room's or a job's tasks, newest first, a page at a time.

A page holds up to 500 tasks, and each task's payload and result up to
``TASKHUB_MAX_BODY_BYTES``. Read and decoded at once, one such page was gigabytes of Python
objects in the hub. So a listing never decodes its documents: it reads them as the text
they are stored as and writes that into the answer (``StoredJSONText``). And it reads only
the small ones with the page's rows; the others are read while the answer is written, a
group at a time, each group with a short connection use of its own (none is held while
the client reads). One listing holds at most the page's small documents and one group of
big ones.

A big document read after its page is still the page's: a payload never changes once
submitted, and a result comes only with ``completed``, which is final. A task that was
not completed when the page was read is listed without a result, as its row then was.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from sqlalchemy import Text, and_, case, cast, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.rules.naming import validate_room_id
from taskhub.rules.records import Page, TaskRecord, beyond
from taskhub.rules.states import TaskStatus
from taskhub.services.jobs import find_visible_job
from taskhub.store.columns import stored_document, stored_text
from taskhub.store.database import Database
from taskhub.store.page_positions import with_positions
from taskhub.store.queue_positions import SELECT_TASKS, documents_replaced
from taskhub.store.sql_functions import document_is_small
from taskhub.store.tables import task_table as task

# A task whose payload and result are each at most this large (in bytes, as stored) is
# read with its page; a page's small documents take at most 500 x 2 x this.
SMALL_DOCUMENT_BYTES = 8 * 1024
# The big documents read in one go: the first group reads this many tasks' documents, each
# next one as many as fit in GROUP_BYTES at the size of the largest of the group before
# (tasks of a page tend to be alike), between 1 and MOST_GROUP_TASKS.
FIRST_GROUP_TASKS = 4
GROUP_BYTES = 8 * 1024 * 1024
MOST_GROUP_TASKS = 32


@dataclass(slots=True)
class TaskListing:
    """A page of tasks whose big documents are still to be read (``groups``)."""

    page: Page[TaskRecord]
    """The tasks in page order; a deferred one has no payload or result yet."""
    deferred: frozenset[UUID]
    db: Database

    @property
    def complete(self) -> bool:
        """Whether every document came with the page."""
        return not self.deferred

    async def groups(self) -> AsyncIterator[list[TaskRecord]]:
        """The page's tasks in order, a group at a time, each with its documents (a
        deferred task no longer stored is left out)."""
        items, size, start = self.page.items, FIRST_GROUP_TASKS, 0
        while start < len(items):
            end, wanted = start, []
            while end < len(items) and len(wanted) < size:
                if items[end].id in self.deferred:
                    wanted.append(items[end].id)
                end += 1
            documents = await self._documents(wanted)
            group = [
                filled
                for item in items[start:end]
                if (filled := self._filled(item, documents)) is not None
            ]
            largest = max((found.size for found in documents.values()), default=0)
            yield group
            size = min(max(GROUP_BYTES // max(largest, 1), 1), MOST_GROUP_TASKS)
            start = end

    async def _documents(self, task_ids: list[UUID]) -> dict[UUID, _Documents]:
        if not task_ids:
            return {}
        statement = select(task.c.id, cast(task.c.payload, Text), cast(task.c.result, Text))
        async with self.db.read() as conn:
            rows = (await conn.execute(statement.where(task.c.id.in_(task_ids)))).all()
        sqlite = self.db.is_sqlite
        return {task_id: _Documents.of(*texts, sqlite=sqlite) for task_id, *texts in rows}

    def _filled(self, item: TaskRecord, documents: dict[UUID, _Documents]) -> TaskRecord | None:
        if item.id not in self.deferred:
            return item
        found = documents.get(item.id)
        if found is None:
            return None
        result = found.result if item.status == TaskStatus.COMPLETED else None
        return dataclasses.replace(item, payload=found.payload, result=result)


@dataclass(frozen=True, slots=True)
class _Documents:
    """A task's payload and result, and their size as stored (in characters)."""

    payload: Any
    result: Any
    size: int

    @classmethod
    def of(cls, payload: str | None, result: str | None, *, sqlite: bool) -> _Documents:
        size = sum(len(text) for text in (payload, result) if text is not None)
        documents = (stored_document(text, maybe_not_json=sqlite) for text in (payload, result))
        return cls(*documents, size)


async def list_room_tasks(
    db: Database, room_id: str, status: TaskStatus | None, limit: int, offset: int
) -> TaskListing:
    validate_room_id(room_id)
    async with db.read() as conn:
        return await _listing(db, conn, [task.c.room_id == room_id], status, limit, offset)


async def list_job_tasks(
    db: Database,
    room_id: str,
    full_name: str,
    status: TaskStatus | None,
    limit: int,
    offset: int,
) -> TaskListing:
    validate_room_id(room_id)
    async with db.read() as conn:
        job = await find_visible_job(conn, room_id, full_name)
        where = [task.c.job_id == job.id, task.c.room_id == room_id]
        return await _listing(db, conn, where, status, limit, offset)


async def _listing(
    db: Database,
    conn: AsyncConnection,
    where: list[Any],
    status: TaskStatus | None,
    limit: int,
    offset: int,
) -> TaskListing:
    if status is not None:
        where = [*where, task.c.status == status.value]
    total = int(await conn.scalar(select(func.count()).select_from(task).where(*where)) or 0)
    items: list[TaskRecord] = []
    deferred: frozenset[UUID] = frozenset()
    if not beyond(total, limit, offset):
        statement = (
            _with_small_documents(conn.dialect.name)
            .where(*where)
            .order_by(task.c.created_at.desc(), task.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
        rows = (await conn.execute(statement)).all()
        deferred = frozenset(row.id for row in rows if not row.small)
        items = await with_positions(conn, rows)
    page = Page(items=items, total=total, limit=limit, offset=offset)
    return TaskListing(page=page, deferred=deferred, db=db)


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
