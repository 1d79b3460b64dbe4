"""Publishing a committed unit of work's events to whoever listens: long-poll waiters in
this process, and any number of sinks (the Socket.IO server, a cross-replica channel)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from uuid import UUID

from app.domain.events import Event, EventBatch, TaskStatusChanged
from app.realtime.waiters import TaskWaiters

log = logging.getLogger(__name__)

Sink = Callable[[list[Event]], Awaitable[None]]


class Publisher:
    def __init__(self, waiters: TaskWaiters) -> None:
        self.waiters = waiters
        self._sinks: list[Sink] = []

    def add_sink(self, sink: Sink) -> None:
        self._sinks.append(sink)

    async def publish(self, events: EventBatch) -> None:
        """Call only after the transaction that produced ``events`` has committed."""
        if not len(events):
            return
        batch = list(events)
        self.wake_local(
            event.task.id
            for event in batch
            if isinstance(event, TaskStatusChanged) and event.is_terminal
        )
        for sink in self._sinks:
            try:
                await sink(batch)
            except Exception:  # a dead listener must not fail a committed request
                log.exception("event sink %r failed", sink)

    def wake_local(self, task_ids: Iterable[UUID]) -> None:
        for task_id in task_ids:
            self.waiters.notify(task_id)
