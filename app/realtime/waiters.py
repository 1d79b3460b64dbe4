"""In-process wake-ups for long-polls: a waiter per task id, woken the moment a terminal
transition of that task is published. Nothing here touches the database."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from uuid import UUID


class TaskWaiters:
    def __init__(self) -> None:
        self._waiting: defaultdict[UUID, set[asyncio.Event]] = defaultdict(set)
        self._closed = False

    @contextmanager
    def watch(self, task_id: UUID) -> Iterator[asyncio.Event]:
        """Subscribe before reading the task, so a commit between the read and the wait is
        not missed."""
        wake = asyncio.Event()
        if self._closed:
            wake.set()
        self._waiting[task_id].add(wake)
        try:
            yield wake
        finally:
            waiters = self._waiting.get(task_id)
            if waiters is not None:
                waiters.discard(wake)
                if not waiters:
                    del self._waiting[task_id]

    def notify(self, task_id: UUID) -> None:
        for wake in self._waiting.get(task_id, ()):
            wake.set()

    def release_all(self) -> None:
        """Answer every waiting long-poll now (graceful shutdown)."""
        self._closed = True
        for waiters in self._waiting.values():
            for wake in waiters:
                wake.set()

    @property
    def closed(self) -> bool:
        """Whether ``release_all`` ran: waiting is over for good."""
        return self._closed

    @property
    def count(self) -> int:
        return sum(len(waiters) for waiters in self._waiting.values())
