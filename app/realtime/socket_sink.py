"""Deliver committed events to Socket.IO rooms: through the server (which fans out across
replicas via its Redis manager) or, from a process without sockets, a write-only manager."""

from __future__ import annotations

from typing import Any, Protocol

import socketio

from app.domain.events import Event

NAMESPACE = "/"


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

    async def __call__(self, batch: list[Event]) -> None:
        for event in batch:
            if self._local is not None and not self._has_listeners(event.room):
                continue
            await self._emitter.emit(event.name, event.payload(), room=event.room)

    def _has_listeners(self, room: str) -> bool:
        assert self._local is not None
        return next(iter(self._local.get_participants(NAMESPACE, room)), None) is not None
