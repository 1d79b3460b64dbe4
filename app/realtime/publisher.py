"""Publishing a committed unit of work's events: wake long-polls (here at once, on other
replicas through the wake bus), then hand the batch to the sinks (Socket.IO). What goes
through Redis is sent in the background (``app/realtime/outbox.py``)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from taskhub.observability import metrics
from taskhub.realtime.waiters import TaskWaiters
from taskhub.rules.events import Event, EventBatch, TaskStatusChanged

if TYPE_CHECKING:
    from taskhub.realtime.wake_bus import RedisWakeBus

log = logging.getLogger(__name__)

Sink = Callable[[list[Event]], Awaitable[None]]


@runtime_checkable
class Drains(Protocol):
    """A sink that sends in the background (``Outbox``), drained at shutdown."""

    async def drain(self, within: float) -> None: ...


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
            self._bus.announce(ended)
        for sink in self._sinks:
            try:
                await sink(batch)
            except Exception:
                log.exception("event sink %r failed", sink)

    async def drain(self, within: float) -> None:
        """Send what the sinks still hold (at shutdown)."""
        for sink in self._sinks:
            if isinstance(sink, Drains):
                await sink.drain(within)
