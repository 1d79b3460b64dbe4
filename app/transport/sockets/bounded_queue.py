"""A bound on each socket's outgoing packets, so that a client that stops reading (a frozen
tab, a stalled connection) cannot make the hub hold every event sent to it.

Engine.IO queues a session's packets until its writer takes them; the writer waits while
the connection does not drain. Past ``limit`` packets, the oldest room events that only
hint at a state the client can read again (``DROPPABLE_EVENTS``) are dropped and one
``resync`` event (``{"dropped": n}``) takes the place of the first: the client re-reads
what it shows, as after a reconnect. One resync is pending at a time: later drops add to
its count. Everything else is kept (acknowledgements, ``task_pushed``, ``task_cancelled``,
``provider_request``, Engine.IO's control packets, Socket.IO's CONNECT and DISCONNECT);
if, even so, more than ``HARD_LIMIT_FACTOR`` times ``limit`` packets wait, the session
is ended without a word (the client reconnects and re-reads).

A room event is one Engine.IO MESSAGE packet whose text python-socketio wrote once for
the room, ``2["<event>",…`` (namespace ``/``, no acknowledgement id): it is told by that
prefix, never parsed. Dropping is amortized: one pass over the queue drops down to three
quarters of ``limit``, and a pass that found too little to drop (which leaves no room event
behind) is not repeated before a quarter of ``limit`` more packets came.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, ClassVar

from engineio import packet as eio_packet
from socketio import packet as sio_packet

from taskhub.rules.events import (
    JobsInvalidate,
    ProviderResultReady,
    ProvidersInvalidate,
    TaskAvailable,
    TaskLogged,
    TaskStatusChanged,
)
from taskhub.transport.sockets.packet_queue import PacketQueue

log = logging.getLogger(__name__)

RESYNC = "resync"
# Room events the client can do without: each is a hint, or a state it can read again.
DROPPABLE_EVENTS = tuple(
    event.name
    for event in (
        TaskStatusChanged,
        JobsInvalidate,
        TaskLogged,
        ProvidersInvalidate,
        ProviderResultReady,
        TaskAvailable,
    )
)
HARD_LIMIT_FACTOR = 4
_DROPPABLE_PREFIXES = tuple(f'{sio_packet.EVENT}["{name}",' for name in DROPPABLE_EVENTS)

# What engineio queues: its packets, and ``None`` (the websocket writer's end).
Item = Any


def droppable(item: Item) -> bool:
    """Whether ``item`` is a room event of ``DROPPABLE_EVENTS`` (on namespace ``/``)."""
    return (
        isinstance(item, eio_packet.Packet)
        and item.packet_type == eio_packet.MESSAGE
        and isinstance(item.data, str)
        and item.data.startswith(_DROPPABLE_PREFIXES)
    )


def resync_packet(dropped: int) -> Any:
    """The Engine.IO packet of a ``resync`` event: ``dropped`` events were left out."""
    text = f'{sio_packet.EVENT}["{RESYNC}",{{"dropped":{dropped}}}]'
    return eio_packet.Packet(eio_packet.MESSAGE, text)


class BoundedPacketQueue(PacketQueue[Item]):
    """A session's ``PacketQueue`` that keeps about ``limit`` packets at most (see the
    module). ``server``: the Engine.IO server whose session it ends past the hard limit.
    Both are the class's (``bounded_packet_queue``): nothing more per socket than three
    slots."""

    __slots__ = ("_dropped", "_resync", "_shed_above")

    limit: ClassVar[int] = 1000
    server: ClassVar[Any] = None
    _ending: ClassVar[set[asyncio.Task[None]]] = set()

    def __init__(self) -> None:
        super().__init__()
        self._resync: Any = None  # the pending resync packet, while queued
        self._dropped = 0  # the events it stands for
        # After a pass that found too little to drop: no other pass until the queue is a
        # quarter of ``limit`` past where it left it (lowered as packets leave).
        self._shed_above = 0

    @property
    def hard_limit(self) -> int:
        return HARD_LIMIT_FACTOR * self.limit

    def put_nowait(self, item: Item) -> None:
        super().put_nowait(item)
        size = len(self._items) if self._items else 0
        if size > self.limit and size > self._shed_above:
            self._shed()
            if self.qsize() > self.hard_limit:
                self._overflow()

    def get_nowait(self) -> Item:
        item = super().get_nowait()
        if self._resync is not None and item is self._resync:
            self._resync = None
            self._dropped = 0
        if self._shed_above:
            self._shed_above -= 1  # (so a next pass comes after a quarter more *puts*)
        return item

    def _shed(self) -> None:
        """Drop the oldest droppable packets down to three quarters of ``limit``; the
        resync where the first of them was (or where it already is, if earlier)."""
        items = self._items
        assert items is not None
        old = self._resync
        target = self.limit - self.limit // 4
        excess = len(items) - target + (1 if old is None else 0)  # (the resync to add)
        kept: deque[Item] = deque()
        dropped = 0
        resync_at = -1
        met_old = old is None
        remaining = iter(items)
        for item in remaining:
            if not met_old and item is old:
                met_old = True
                if resync_at < 0:
                    resync_at = len(kept)
                    kept.append(None)  # its place, filled below
                continue
            if droppable(item):
                dropped += 1
                if resync_at < 0:
                    resync_at = len(kept)
                    kept.append(None)
                if dropped >= excess:
                    break
                continue
            kept.append(item)
        kept.extend(remaining)
        if dropped:
            if not met_old:  # (it was behind the first drop: taken out, not kept twice)
                kept.remove(old)
            self._dropped += dropped
            self._resync = kept[resync_at] = resync_packet(self._dropped)
            self._items = kept
            self._settle(dropped - (0 if old is not None else 1))
            if self._dropped == dropped:
                log.debug("a socket's reader is behind: room events dropped for a resync")
        size = self.qsize()
        growth = max(1, self.limit // 4)
        self._shed_above = 0 if size <= target else min(size + growth, self.hard_limit)

    def _overflow(self) -> None:
        """Past the hard limit with nothing left to drop: every packet goes, the writer is
        told to stop (``None``), and the session is ended."""
        self._resync = None
        self._dropped = 0
        self._settle(self.qsize())
        self._items = None
        self._shed_above = 0
        super().put_nowait(None)
        server = self.server
        if server is None:
            return
        task = asyncio.get_running_loop().create_task(_end_session(server, self))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    def _settle(self, gone: int) -> None:
        """``gone`` packets left the queue without a ``task_done``."""
        self._unfinished -= gone
        if self._unfinished <= 0:
            self._unfinished = 0
            if self._finished is not None:
                self._finished.set()


async def _end_session(server: Any, queue: BoundedPacketQueue) -> None:
    """End the session whose queue is ``queue``: its disconnect runs (it leaves its rooms),
    and no CLOSE packet is queued (a client takes that for a deliberate disconnect and
    would not reconnect); the ``None`` already queued ends its websocket."""
    for sid, session in list(server.sockets.items()):
        if session.queue is queue:
            log.warning(
                "socket session %s ended: more than %d packets waited for its reader",
                sid,
                queue.hard_limit,
            )
            await session.close(wait=False, abort=True, reason=server.reason.TRANSPORT_ERROR)
            return


def bounded_packet_queue(server: Any, limit: int) -> type[BoundedPacketQueue]:
    """The queue class for each session of the Engine.IO ``server`` (its
    ``create_queue``), holding about ``limit`` packets."""

    class Bounded(BoundedPacketQueue):
        __slots__ = ()

    Bounded.limit = limit
    Bounded.server = server
    Bounded._ending = set()
    return Bounded
