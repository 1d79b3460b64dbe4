"""Publishing a committed unit of work's events: wake long-polls (here, and on other
replicas through the wake bus), then hand the batch to the sinks (Socket.IO)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from app.domain.events import Event, EventBatch, TaskStatusChanged
from app.observability import metrics
from app.realtime.waiters import TaskWaiters

if TYPE_CHECKING:
    from app.realtime.wake_bus import RedisWakeBus

log = logging.getLogger(__name__)

Sink = Callable[[list[Event]], Awaitable[None]]


class Publisher:
    def __init__(self, waiters: TaskWaiters, bus: RedisWakeBus | None = None) -> None:
        self.waiters = waiters
        self._bus = bus
        self._sinks: list[Sink] = []

    def add_sink(self, sink: Sink) -> None:
        self._sinks.append(sink)

    async def publish(self, events: EventBatch) -> None:
        """Call only after the transaction that produced ``events`` has committed. A failing
        listener is logged; it never fails the (already committed) request."""
        if not len(events):
            return
        batch = list(events)
        metrics.record_transitions(batch)
        ended = [
            event.task.id
            for event in batch
            if isinstance(event, TaskStatusChanged) and event.is_terminal
        ]
        for task_id in ended:
            self.waiters.notify(task_id)
        if ended and self._bus is not None:
            try:
                await self._bus.publish(ended)
            except Exception:
                log.exception("could not publish wake-ups to other replicas")
        for sink in self._sinks:
            try:
                await sink(batch)
            except Exception:
                log.exception("event sink %r failed", sink)
