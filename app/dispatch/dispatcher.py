"""Submit-side of ``@internal`` jobs: once the task row is committed and the task is due,
enqueue it on the broker, then mark it CLAIMED — or FAILED when the broker cannot take it.
No ``task_available`` is ever sent for these tasks.

A task is dispatched by its submit when it is due at once; a delayed one by the due-task
announcer when it comes due; and one left pending (its submit's process died between the
commit and the enqueue) by the sweeper. Dispatching a task twice is harmless: the executor
runs each ``(task_id, attempt)`` once, and every status write is guarded."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any
from uuid import UUID

from taskiq import AsyncBroker

from taskhub.clock import utcnow
from taskhub.dispatch.broker import TASK_NAME
from taskhub.dispatch.registry import InternalRegistry
from taskhub.rules.events import EventBatch
from taskhub.rules.records import TaskRecord
from taskhub.services import internal_tasks
from taskhub.services.task_reads import get_task
from taskhub.store.database import Database

log = logging.getLogger(__name__)


class InternalDispatcher:
    def __init__(self, db: Database, broker: AsyncBroker, registry: InternalRegistry) -> None:
        self.db = db
        self.broker = broker
        self.registry = registry

    def has_executor(self, full_name: str) -> bool:
        return self.registry.has_executor(full_name)

    def is_costly(self, full_name: str) -> bool:
        return self.registry.is_costly(full_name)

    async def dispatch_missed(self, before: datetime) -> tuple[int, EventBatch]:
        """The sweeper's fallback: ``dispatch`` the pending tasks due since before
        ``before`` that nobody dispatched (their submit's process died between its commit
        and the enqueue; they came due while no hub ran): how many, and their events. Their
        ``run_at`` becomes now, so that the internal timeout counts from this dispatch."""
        return await self._dispatch_pending(before, late=True)

    async def dispatch_due(self, task_ids: list[UUID]) -> EventBatch:
        """``dispatch`` the delayed tasks of ``task_ids`` that just came due."""
        _count, events = await self._dispatch_pending(utcnow(), among=task_ids)
        return events

    async def _dispatch_pending(
        self, before: datetime, *, among: list[UUID] | None = None, late: bool = False
    ) -> tuple[int, EventBatch]:
        """Pending tasks due since before ``before`` (of ``among`` only, when given); one
        another replica dispatched meanwhile is no longer pending, so it is not enqueued
        again. One that fails (its status write could not be made) is logged and left
        pending for the sweeper's next cycle; the others go on, and their events are kept."""
        records = await internal_tasks.undispatched(self.db, before, among=among)
        events = EventBatch()
        for record in records:
            try:
                _updated, dispatched = await self.dispatch(record, late=late)
            except Exception:
                log.exception("could not dispatch internal task %s; left pending", record.id)
                continue
            events.extend(dispatched)
        return len(records), events

    async def dispatch(
        self, record: TaskRecord, *, late: bool = False
    ) -> tuple[TaskRecord, EventBatch]:
        """Enqueue the task, then mark it claimed (or failed when the broker refuses it);
        ``late``: its ``run_at`` becomes now."""
        task: Any = self.broker.find_task(TASK_NAME)
        try:
            await task.kiq(str(record.id), record.attempt)
        except Exception:
            log.exception("could not enqueue internal task %s", record.id)
            updated, events = await internal_tasks.mark_dispatch_failed(self.db, record.id)
        else:
            updated, events = await internal_tasks.mark_dispatched(
                self.db, record.id, run_at=utcnow() if late else None
            )
        if updated is None:  # the executor already moved it on; report what it did
            return await get_task(self.db, record.id), events
        return updated, events
