"""Deliver committed events to Socket.IO rooms (across replicas via the Redis manager)."""

from __future__ import annotations

import socketio

from app.domain.events import Event


class SocketSink:
    def __init__(self, sio: socketio.AsyncServer) -> None:
        self._sio = sio

    async def __call__(self, batch: list[Event]) -> None:
        for event in batch:
            await self._sio.emit(event.name, event.payload(), room=event.room)
