"""The queue of a socket's outgoing Engine.IO packets, lighter than ``asyncio.Queue``.

python-engineio gives each session a queue from its server's ``create_queue()`` (an
``asyncio.Queue``) and uses ``get`` (under ``asyncio.wait_for``), ``get_nowait``, ``put``,
``put_nowait``, ``task_done`` and ``join`` of it. An ``asyncio.Queue`` holds four deques of
760 bytes each (items, getters, putters, and its ``join`` event's waiters) from its
creation, empty or not: 3 KiB a socket, most of them idle. ``PacketQueue`` has the same
behaviour for that use (unbounded: ``put`` never waits) and makes its containers when
first needed, letting go of them once empty again: about 3 KiB less a socket (``python -m
benchmarks socket_memory``). The hub's sessions use its bounded kind
(``bounded_queue.BoundedPacketQueue``).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class PacketQueue(Generic[T]):
    """An unbounded FIFO queue with ``asyncio.Queue``'s ``get``/``put``/``task_done``/
    ``join`` semantics, for one event loop."""

    __slots__ = ("_finished", "_getters", "_items", "_unfinished")

    def __init__(self) -> None:
        self._items: deque[T] | None = None
        # (A list: there is one getter, a session's writer, or a few polls; a deque's first
        # block alone is 760 bytes.)
        self._getters: list[asyncio.Future[None]] | None = None
        self._unfinished = 0
        self._finished: asyncio.Event | None = None  # made by the first ``join`` that waits

    def qsize(self) -> int:
        return len(self._items) if self._items else 0

    def empty(self) -> bool:
        return not self._items

    def full(self) -> bool:
        return False

    def put_nowait(self, item: T) -> None:
        if self._items is None:
            self._items = deque()
        self._items.append(item)
        self._unfinished += 1
        if self._finished is not None:
            self._finished.clear()
        self._wake_getter()

    async def put(self, item: T) -> None:
        self.put_nowait(item)

    def get_nowait(self) -> T:
        items = self._items
        if not items:
            raise asyncio.QueueEmpty
        item = items.popleft()
        if not items:
            self._items = None
        return item

    async def get(self) -> T:
        while not self._items:
            getter = asyncio.get_running_loop().create_future()
            if self._getters is None:
                self._getters = []
            getters = self._getters
            getters.append(getter)
            try:
                await getter
            except BaseException:  # cancelled (a timeout): pass a wake-up on, as asyncio does
                getter.cancel()
                if getter in getters:
                    getters.remove(getter)
                if getters is self._getters and not getters:
                    self._getters = None
                if self._items and not getter.cancelled():
                    self._wake_getter()
                raise
        return self.get_nowait()

    def _wake_getter(self) -> None:
        getters = self._getters
        while getters:
            getter = getters.pop(0)
            if not getter.done():
                getter.set_result(None)
                break
        if getters is not None and not getters:
            self._getters = None

    def task_done(self) -> None:
        if self._unfinished <= 0:
            raise ValueError("task_done() called too many times")
        self._unfinished -= 1
        if self._unfinished == 0 and self._finished is not None:
            self._finished.set()

    async def join(self) -> None:
        if self._unfinished > 0:
            if self._finished is None:
                self._finished = asyncio.Event()
            await self._finished.wait()
