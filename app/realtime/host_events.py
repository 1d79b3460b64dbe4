"""A host application's callbacks on committed changes: a task ended, a worker went away
with its jobs and providers (ZnDraw clears the rooms of a worker's frames then).

Each callback runs in a task of its own: a slow or failing host never holds up the request
that made the change; failures are logged, and what is still running is awaited at
shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from taskhub.rules.events import Event, TaskStatusChanged, WorkerRemoved
from taskhub.rules.records import TaskRecord

log = logging.getLogger(__name__)

TaskEnded = TaskRecord  # a task that reached a terminal state, as it was then


@dataclass(frozen=True, slots=True)
class WorkerGone:
    """A worker the hub removed (deleted, disconnected past its grace, or swept), with
    the full names of the jobs and providers it served."""

    worker_id: UUID
    jobs: tuple[str, ...]
    providers: tuple[str, ...]


class HostEvents:
    """A publisher sink calling the host's ``on_worker_gone`` and ``on_task_ended``."""

    def __init__(
        self,
        on_worker_gone: Callable[[WorkerGone], Awaitable[None]] | None,
        on_task_ended: Callable[[TaskEnded], Awaitable[None]] | None,
    ) -> None:
        self._on_worker_gone = on_worker_gone
        self._on_task_ended = on_task_ended
        self._running: set[asyncio.Task[None]] = set()

    async def __call__(self, batch: list[Event]) -> None:
        for event in batch:
            ended = isinstance(event, TaskStatusChanged) and event.is_terminal
            if ended and self._on_task_ended is not None:
                assert isinstance(event, TaskStatusChanged)
                self._start(self._on_task_ended(event.task), "on_task_ended")
            elif isinstance(event, WorkerRemoved) and self._on_worker_gone is not None:
                gone = WorkerGone(event.worker_id, event.jobs, event.providers)
                self._start(self._on_worker_gone(gone), "on_worker_gone")

    def _start(self, call: Awaitable[Any], name: str) -> None:
        task = asyncio.ensure_future(self._logged(call, name))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    @staticmethod
    async def _logged(call: Awaitable[Any], name: str) -> None:
        try:
            await call
        except Exception:
            log.exception("the host's %s failed", name)

    async def drain(self, within: float) -> None:
        """Wait up to ``within`` seconds for the callbacks still running, then cancel them."""
        if not self._running:
            return
        _done, pending = await asyncio.wait(set(self._running), timeout=within)
        for task in pending:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
