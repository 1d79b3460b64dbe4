"""Deliver committed events to Socket.IO rooms: through the server (which fans out across
replicas via its Redis manager) or, from a process without sockets, a write-only manager."""

from __future__ import annotations

from typing import Any, Protocol

from app.domain.events import Event


class Emitter(Protocol):
    async def emit(self, event: str, data: Any, *, room: str | None = None) -> Any: ...


class SocketSink:
    def __init__(self, emitter: Emitter) -> None:
        self._emitter = emitter

    async def __call__(self, batch: list[Event]) -> None:
        for event in batch:
            await self._emitter.emit(event.name, event.payload(), room=event.room)
