"""The one shape of every background duty: wait, run a cycle, again, until stopped.

A duty says how long to wait before its next cycle (``wait``), what a cycle does
(``cycle``) and what it releases at the end (``finish``). A cycle that fails is reported
once per outage (``failed``; ``recovered`` when one succeeds again) and the loop goes on:
no duty dies of an error, only of ``stop``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod

log = logging.getLogger(__name__)


class Duty(ABC):
    """A background loop of a hub process, started and stopped with it."""

    name: str  # of its asyncio task (taskhub-<name>) and in its log lines
    _task: asyncio.Task[None] | None = None
    _failing: bool = False

    def start(self) -> None:
        """Run the loop on the running event loop (again, if it had ended)."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name=f"taskhub-{self.name}")

    async def stop(self) -> None:
        """Cancel the loop and wait until it has finished (``finish`` included)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    @abstractmethod
    async def wait(self) -> None:
        """Before each cycle (the first included): return when the next one is due."""

    @abstractmethod
    async def cycle(self) -> None:
        """One round of the duty's work."""

    async def finish(self) -> None:
        """Once, when the loop ends: give up what the duty holds (nothing, by default)."""
        return None

    def failed(self, error: Exception) -> None:
        """A cycle raised ``error``: logged once per outage (the next cycle runs as usual)."""
        if not self._failing:
            log.error("%s: a cycle failed; the next runs as scheduled", self.name, exc_info=error)

    def recovered(self) -> None:
        log.info("%s: cycles succeed again", self.name)

    async def _loop(self) -> None:
        try:
            while True:
                await self.wait()
                try:
                    await self.cycle()
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    self.failed(error)
                    self._failing = True
                else:
                    if self._failing:
                        self.recovered()
                    self._failing = False
        finally:
            await asyncio.shield(self.finish())
