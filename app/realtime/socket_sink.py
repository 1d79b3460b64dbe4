"""Deliver committed events to Socket.IO rooms: through the server (which fans out across
replicas via its Redis manager) or, from a process without sockets, a write-only manager."""

from __future__ import annotations

from typing import Any, Protocol

import socketio

from app.domain.events import Event
from app.persistence.types import dump_json
from app.realtime.outbox import Outbox

NAMESPACE = "/"
Emit = tuple[str, dict[str, Any], str]  # event name, payload, room


class Emitter(Protocol):
    async def emit(self, event: str, data: Any, *, room: str | None = None) -> Any: ...


class SocketSink:
    def __init__(self, emitter: Emitter) -> None:
        self._emitter = emitter
        # A server whose rooms all live in this process (no Redis manager: one replica)
        # knows when nobody would receive an event: it is then neither built nor encoded.
        manager = getattr(emitter, "manager", None)
        self._local: socketio.AsyncManager | None = (
            manager if type(manager) is socketio.AsyncManager else None
        )

        # Through Redis (several replicas, or the taskiq worker's write-only manager), events
        # go out in the background, in order: a slow Redis never holds up an answer.
        self._outbox: Outbox[list[Emit]] | None = (
            None
            if self._local is not None
            else Outbox("socket-events", self._emit_all, size=_encoded_size)
        )

    async def __call__(self, batch: list[Event]) -> None:
        if self._outbox is not None:
            # Payloads are built now, from the state the change committed.
            self._outbox.put([(e.name, e.payload(), e.room) for e in batch])
            return
        for event in batch:
            if self._has_listeners(event.room):
                await self._emitter.emit(event.name, event.payload(), room=event.room)

    async def _emit_all(self, emits: list[Emit]) -> None:
        for name, payload, room in emits:
            await self._emitter.emit(name, payload, room=room)

    async def drain(self, within: float) -> None:
        if self._outbox is not None:
            await self._outbox.drain(within)

    def _has_listeners(self, room: str) -> bool:
        assert self._local is not None
        return next(iter(self._local.get_participants(NAMESPACE, room)), None) is not None


def _encoded_size(emits: list[Emit]) -> int:
    """What a batch of events weighs in the outbox: their payloads as JSON (a result may
    hold integers beyond 64 bits, which orjson alone refuses)."""
    return sum(len(dump_json(payload)) for _name, payload, _room in emits)
