"""The one shape of every background duty: wait, run a cycle, again, until stopped.

A duty says how long to wait before its next cycle (``wait``), what a cycle does
(``cycle``) and what it releases at the end (``finish``). A cycle that fails is reported
once per outage (``failed``; ``recovered`` when one succeeds again) and the loop goes on:
no duty dies of an error, only of ``stop``.

Two shapes built on the same policy:

- ``Every``: a duty that runs one action every so many seconds;
- ``Reconnecting``: a listener that must outlive its connection (a Redis subscription, a
  stream read), whose body runs until the connection ends and is then run again, a steady
  ``retry_seconds`` later; the first failure of an outage is a warning, the next ones are
  logged at debug, and the end of the outage is said once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T")


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


class Every(Duty):
    """A duty that runs ``action`` every ``seconds`` (the first time ``seconds`` after
    ``start``)."""

    def __init__(self, name: str, seconds: float, action: Callable[[], Awaitable[object]]) -> None:
        self.name = name
        self.seconds = seconds
        self._action = action

    async def wait(self) -> None:
        await asyncio.sleep(self.seconds)

    async def cycle(self) -> None:
        await self._action()


def _any_error(_error: Exception) -> bool:
    return True


class Reconnecting:
    """Runs a listener's body again each time its connection ends, until cancelled.

    A body that raises (an ``Exception`` that ``retry_if`` accepts; any other propagates)
    has lost its connection: the first loss of an outage is logged as a warning, later
    consecutive ones at debug, and the body runs again ``retry_seconds`` later. A body that
    returns is run again ``retry_seconds`` later too (never in a busy loop). The body calls
    ``connected`` once its connection is up, which logs the end of an outage once.
    Cancelling the task that runs it (or closing ``stream``'s iterator) stops it at once.
    """

    def __init__(
        self,
        name: str,
        retry_seconds: float,
        *,
        retry_if: Callable[[Exception], bool] = _any_error,
    ) -> None:
        self.name = name  # in its log lines
        self.retry_seconds = retry_seconds
        self._retry_if = retry_if
        self.failing = False  # since the last loss, not connected again yet

    def connected(self) -> bool:
        """The body's connection is up: whether that ends an outage (logged once)."""
        if not self.failing:
            return False
        log.info("%s: connected again", self.name)
        self.failing = False
        return True

    async def run(self, body: Callable[[], Awaitable[None]]) -> None:
        """Await ``body()`` again and again, forever."""
        while True:
            try:
                await body()
            except Exception as error:
                if not self._retry_if(error):
                    raise
                self._lost(error)
            await asyncio.sleep(self.retry_seconds)

    async def stream(self, body: Callable[[], AsyncGenerator[T, None]]) -> AsyncGenerator[T, None]:
        """The items of ``body()``, of the next ``body()`` once it ends, and so on forever."""
        while True:
            try:
                async with contextlib.aclosing(body()) as items:
                    async for item in items:
                        yield item
            except Exception as error:
                if not self._retry_if(error):
                    raise
                self._lost(error)
            await asyncio.sleep(self.retry_seconds)

    def _lost(self, error: Exception) -> None:
        if self.failing:
            log.debug("%s: still no connection (%s)", self.name, error)
        else:
            log.warning(
                "%s: connection lost (%s); retrying every %g s",
                self.name,
                error,
                self.retry_seconds,
            )
        self.failing = True
