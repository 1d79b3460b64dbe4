"""Submit-side of ``@internal`` jobs: after the task row is committed, enqueue it on the
broker, then mark it CLAIMED — or FAILED when the broker cannot take it. No
``task_available`` is ever sent for these tasks."""

from __future__ import annotations

import logging
from typing import Any

from taskiq import AsyncBroker

from app.dispatch.broker import TASK_NAME
from app.dispatch.registry import InternalRegistry
from app.domain.events import EventBatch
from app.domain.records import TaskRecord
from app.domain.services import internal_tasks
from app.domain.services.tasks import get_task
from app.persistence.database import Database

log = logging.getLogger(__name__)


class InternalDispatcher:
    def __init__(self, db: Database, broker: AsyncBroker, registry: InternalRegistry) -> None:
        self.db = db
        self.broker = broker
        self.registry = registry

    def has_executor(self, full_name: str) -> bool:
        return self.registry.has_executor(full_name)

    async def dispatch(self, record: TaskRecord) -> tuple[TaskRecord, EventBatch]:
        task: Any = self.broker.find_task(TASK_NAME)
        try:
            await task.kiq(str(record.id), record.attempt)
        except Exception:
            log.exception("could not enqueue internal task %s", record.id)
            updated, events = await internal_tasks.mark_dispatch_failed(self.db, record.id)
        else:
            updated, events = await internal_tasks.mark_dispatched(self.db, record.id)
        if updated is None:  # the executor already moved it on; report what it did
            return await get_task(self.db, record.id), events
        return updated, events
