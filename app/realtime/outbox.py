"""Sending to Redis without holding up the request that caused it.

A committed change is answered at once; its Socket.IO events and cross-replica wake-ups go
through an ``Outbox``: one background task per kind sends them in the order they were put,
so a slow or stalled Redis delays real-time hints (which clients treat as hints: the SDK
also polls, long-polls re-check, the page re-reads) but never a REST answer. A bounded
backlog: past ``limit`` waiting items, or ``max_bytes`` of them (as ``size`` tells: events
carry results of up to a request body's size), the newest are dropped and counted. After a
failed send, the items taken within ``rest_after_failure`` seconds are given up without a
try (Redis is away: each would only wait for a failure of its own, and the backlog behind
them grow). Once drained (at shutdown) it is closed: what is put after that is dropped and
counted too."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from taskhub.duty import Duty
from taskhub.observability import metrics

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_LIMIT = 10_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
# At shutdown, how long what is still waiting for Redis may take to go out.
SHUTDOWN_SEND_SECONDS = 5.0


class _Resting(Exception):
    """A send failed a moment ago: the item taken now is given up without a try."""


class Outbox(Duty, Generic[T]):
    """A duty whose cycle sends one item: it waits for the next item to be put."""

    def __init__(
        self,
        name: str,
        send: Callable[[T], Awaitable[None]],
        limit: int = DEFAULT_LIMIT,
        *,
        size: Callable[[T], int] | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        rest_after_failure: float = 0.0,
    ) -> None:
        self.name = name
        self._send = send
        self._queue: asyncio.Queue[tuple[T, int]] = asyncio.Queue(limit)
        self._size = size
        self._max_bytes = max_bytes
        self._rest_after_failure = rest_after_failure
        self._bytes = 0
        self._taken: tuple[T, int] | None = None
        self._retry_at = 0.0
        self._dropping = False
        self._closed = False

    def put(self, item: T) -> None:
        """Queue ``item``; the sender starts with the first one (on the running loop)."""
        if self._closed:
            metrics.outbox_dropped(self.name)
            log.warning("%s: closed at shutdown; dropping an item put after it", self.name)
            return
        self.start()
        size = 0 if self._size is None else self._size(item)
        try:
            if self._bytes + size > self._max_bytes and self._queue.qsize():
                raise asyncio.QueueFull
            self._queue.put_nowait((item, size))
        except asyncio.QueueFull:
            metrics.outbox_dropped(self.name)
            if not self._dropping:
                log.warning(
                    "%s: %d items (%d bytes) wait to be sent; dropping new ones",
                    self.name,
                    self._queue.qsize(),
                    self._bytes,
                )
            self._dropping = True
        else:
            self._bytes += size

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    async def wait(self) -> None:
        self._taken = await self._queue.get()

    async def cycle(self) -> None:
        assert self._taken is not None
        item, size = self._taken
        try:
            if self._failing and asyncio.get_running_loop().time() < self._retry_at:
                metrics.outbox_dropped(self.name)
                raise _Resting
            await self._send(item)
        finally:
            self._taken = None
            self._bytes -= size
            self._queue.task_done()
            if self._dropping and self._queue.qsize() == 0:
                self._dropping = False
                log.info("%s: caught up", self.name)

    def failed(self, error: Exception) -> None:
        if isinstance(error, _Resting):
            return
        if not self._failing:  # once per outage, not once per item
            log.warning("%s: sending failed (%s); going on with the next", self.name, error)
        self._retry_at = asyncio.get_running_loop().time() + self._rest_after_failure

    def recovered(self) -> None:
        log.info("%s: sending works again", self.name)

    async def drain(self, within: float) -> None:
        """Send what is waiting (for up to ``within`` seconds), then stop the sender and
        close the outbox."""
        self._closed = True
        if not self.running:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._queue.join(), within)
        if self._queue.qsize():
            log.warning("%s: %d items not sent at shutdown", self.name, self._queue.qsize())
        await self.stop()
