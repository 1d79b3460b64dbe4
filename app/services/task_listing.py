"""Listing a room's or a job's tasks, newest first, a page at a time.

A page holds up to 500 tasks, and each task's payload and result up to
``TASKHUB_MAX_BODY_BYTES``. Read and decoded at once, one such page was gigabytes of Python
objects in the hub. So a listing never decodes its documents: it reads them as the text
they are stored as and writes that into the answer (``StoredJSONText``). And it reads only
the small ones with the page's rows (``app/store/task_listing.py``); the others are read
while the answer is written, a group at a time, each group with a short connection use
of its own (none is held while the client reads). One listing holds at most the page's
small documents and one group of big ones.

A big document read after its page is still the page's: a payload never changes once
submitted, and a result comes only with ``completed``, which is final. A task that was
not completed when the page was read is listed without a result, as its row then was.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from dataclasses import dataclass
from uuid import UUID

from taskhub.rules.naming import validate_room_id
from taskhub.rules.records import Page, TaskRecord, beyond
from taskhub.rules.states import TaskStatus
from taskhub.rules.task_filter import DEFAULT_SORT, TaskFilter
from taskhub.services.jobs import find_visible_job
from taskhub.store import task_listing as store
from taskhub.store import task_search as search
from taskhub.store.connections import Connection
from taskhub.store.database import Database

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
    submitters: dict[UUID, str | None] | None = None
    """A summary page (``view=summary``: no payload or result): each task's submitter's
    user name. None for a full page."""

    @property
    def complete(self) -> bool:
        """Whether every document came with the page."""
        return not self.deferred

    async def groups(self) -> AsyncIterator[list[TaskRecord]]:
        """The page's tasks in order, a group at a time, each with its documents (a
        deferred task no longer stored is left out)."""
        items, size, start = self.page.items, FIRST_GROUP_TASKS, 0
        while start < len(items):
            end = start
            wanted: list[UUID] = []
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

    async def _documents(self, task_ids: list[UUID]) -> dict[UUID, store.Documents]:
        if not task_ids:
            return {}
        async with self.db.read() as conn:
            return await store.read_documents(conn, task_ids)

    def _filled(
        self, item: TaskRecord, documents: dict[UUID, store.Documents]
    ) -> TaskRecord | None:
        if item.id not in self.deferred:
            return item
        found = documents.get(item.id)
        if found is None:
            return None
        result = found.result if item.status == TaskStatus.COMPLETED else None
        return dataclasses.replace(item, payload=found.payload, result=result)


async def list_room_tasks(
    db: Database, room_id: str, status: TaskStatus | None, limit: int, offset: int
) -> TaskListing:
    validate_room_id(room_id)
    async with db.read() as conn:
        return await _listing(db, conn, room_id, None, status, limit, offset)


async def search_room_tasks(
    db: Database,
    room_id: str,
    found: TaskFilter,
    *,
    sort: str = DEFAULT_SORT,
    summary: bool = False,
    limit: int,
    offset: int,
) -> TaskListing:
    """The room's tasks ``found`` matches, in ``sort`` order; ``summary``: without their
    documents (never read), with their submitters' names."""
    validate_room_id(room_id)
    async with db.read() as conn:
        total = await search.count_matching(conn, room_id, found)
        items: list[TaskRecord] = []
        deferred: frozenset[UUID] = frozenset()
        submitters: dict[UUID, str | None] | None = {} if summary else None
        if not beyond(total, limit, offset):
            if summary:
                items, submitters = await search.read_summary_page(
                    conn, room_id, found, sort=sort, limit=limit, offset=offset
                )
            else:
                items, deferred = await store.read_filtered_page(
                    conn, room_id, found, sort=sort, limit=limit, offset=offset
                )
    page = Page(items=items, total=total, limit=limit, offset=offset)
    return TaskListing(page=page, deferred=deferred, db=db, submitters=submitters)


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
        return await _listing(db, conn, room_id, job.id, status, limit, offset)


async def _listing(
    db: Database,
    conn: Connection,
    room_id: str,
    job_id: UUID | None,
    status: TaskStatus | None,
    limit: int,
    offset: int,
) -> TaskListing:
    total = await store.count_tasks(conn, room_id, job_id=job_id, status=status)
    items: list[TaskRecord] = []
    deferred: frozenset[UUID] = frozenset()
    if not beyond(total, limit, offset):
        items, deferred = await store.read_page(
            conn, room_id, job_id=job_id, status=status, limit=limit, offset=offset
        )
    page = Page(items=items, total=total, limit=limit, offset=offset)
    return TaskListing(page=page, deferred=deferred, db=db)
