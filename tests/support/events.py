"""Recording what a hub publishes, and waiting for an event to arrive."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from taskhub.rules.events import Event, TaskStatusChanged
from taskhub.rules.states import TaskStatus


class EventRecorder:
    """A publisher sink that keeps every event and wakes waiters as they come."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._arrived = asyncio.Condition()

    async def __call__(self, batch: list[Event]) -> None:
        async with self._arrived:
            self.events.extend(batch)
            self._arrived.notify_all()

    async def wait_for(self, found: Callable[[list[Event]], bool], seconds: float = 5.0) -> None:
        async with asyncio.timeout(seconds), self._arrived:
            await self._arrived.wait_for(lambda: found(self.events))


def statuses(events: list[Event], task_id: str) -> list[TaskStatus]:
    """The states published for one task, in the order they went out."""
    return [
        e.task.status
        for e in events
        if isinstance(e, TaskStatusChanged) and str(e.task.id) == task_id
    ]
