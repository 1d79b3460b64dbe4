"""Deliver committed events to Socket.IO rooms: through the server (whose Redis manager
delivers to this process's sockets at once and fans out to the other replicas in the
background) or, from a process without sockets, a write-only manager."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import socketio

from taskhub.realtime.event_payloads import event_payload
from taskhub.realtime.redis_clients import TaskhubRedisManager
from taskhub.realtime.room_fanout import RoomFanoutManager
from taskhub.rules.events import Event, TaskAvailable

NAMESPACE = "/"


class Emitter(Protocol):
    async def emit(self, event: str, data: Any, *, room: str | None = None) -> Any: ...


IsPrivate = Callable[[str], Awaitable[bool]]


class SocketSink:
    """``is_private(room_id)``: whether a room is private (its ``task_available`` hints
    are then withheld, ``TaskAvailable.withheld``); None: every room is open."""

    def __init__(self, emitter: Emitter, is_private: IsPrivate | None = None) -> None:
        self._emitter = emitter
        self._is_private = is_private
        manager = getattr(emitter, "manager", emitter)
        # A server whose rooms all live in this process (no Redis manager: one replica)
        # knows when nobody would receive an event: it is then neither built nor encoded.
        local = type(manager) in (socketio.AsyncManager, RoomFanoutManager)
        self._local: socketio.AsyncManager | None = manager if local else None
        # Taskhub's Redis manager publishes in the background: an emit never waits for
        # Redis, and what is still waiting is sent at shutdown.
        self._fanout = manager if isinstance(manager, TaskhubRedisManager) else None

    async def __call__(self, batch: list[Event]) -> None:
        for event in batch:
            if not getattr(event, "sent_to_sockets", True):
                continue  # for the process's own listeners only
            if self._local is None or self._has_listeners(event.room):
                if isinstance(event, TaskAvailable) and await self._private(event.room_id):
                    event = event.withheld()
                await self._emitter.emit(event.name, event_payload(event), room=event.room)

    async def _private(self, room_id: str) -> bool:
        return self._is_private is not None and await self._is_private(room_id)

    async def drain(self, within: float) -> None:
        if self._fanout is not None:
            await self._fanout.drain(within)

    def _has_listeners(self, room: str) -> bool:
        assert self._local is not None
        return next(iter(self._local.get_participants(NAMESPACE, room)), None) is not None
