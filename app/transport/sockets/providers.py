"""Socket.IO events of providers (docs/protocol.md, "Providers"): a provider's worker joins
the room its reads are sent to (``provider_request``), and leaves it. Registered on the
same server as ``SocketHandlers``, whose sessions (the socket's user, its rooms, its
workers) they share."""

from __future__ import annotations

from typing import Any

from taskhub.rules.authorisation import RoomAction
from taskhub.rules.errors import DomainError
from taskhub.rules.providers import ProviderName, ProviderNotFound
from taskhub.rules.rooms import provider_room
from taskhub.services import providers as service
from taskhub.services.workers import heartbeat
from taskhub.transport.sockets.acks import (
    MAX_ROOMS_PER_SOCKET,
    SOCKET_GONE,
    TOO_MANY_ROOMS,
    problem_of,
    text_field,
    uuid_field,
)
from taskhub.transport.sockets.handlers import SocketHandlers

PROVIDER_EVENTS = ("join_provider_room", "leave_provider_room")


class ProviderSocketHandlers:
    def __init__(self, sockets: SocketHandlers, *, take_over: bool = False) -> None:
        self.sockets = sockets
        self.sio = sockets.sio
        self.hub = sockets.hub
        for name in PROVIDER_EVENTS:
            sockets.register(name, getattr(self, name), take_over=take_over)
        sockets.events.extend(PROVIDER_EVENTS)

    async def join_provider_room(self, sid: str, data: Any) -> dict[str, Any]:
        """Join as the provider ``provider_name`` for ``worker_id``: the worker serving it,
        and the socket user's own (zndraw-joblib's host checks nothing here). Counts as a
        heartbeat and ties the worker's presence to the socket, as ``join_job_room``."""
        try:
            full_name = text_field(data, "provider_name")
            worker_id = uuid_field(data, "worker_id")
            session = await self.sockets.session_of(sid)
            parsed = ProviderName.parse(full_name)
            await self.sockets.check_room(session, parsed.room_id, RoomAction.WORK)
            principal = session.principal
            record = await service.check_serves(self.hub.db, principal, full_name, worker_id)
            room = provider_room(record.id)
            if len(session.rooms | {room}) > MAX_ROOMS_PER_SOCKET:
                return TOO_MANY_ROOMS
            await heartbeat(self.hub.db, principal, worker_id)
        except DomainError as exc:
            return problem_of(exc)
        if sid not in self.sockets.sessions:  # gone meanwhile: attach nothing
            return SOCKET_GONE
        if not session.reserve({room}):
            return TOO_MANY_ROOMS
        session.workers.add(worker_id)
        await self.hub.presence.attach(worker_id, sid)
        if sid not in self.sockets.sessions:
            await self.hub.presence.detach(sid, {worker_id})
            return SOCKET_GONE
        await self.sio.enter_room(sid, room)
        return {"provider_name": full_name, "worker_id": str(worker_id)}

    async def leave_provider_room(self, sid: str, data: Any) -> dict[str, Any]:
        """Leave the provider's room (a ``worker_id`` is accepted and ignored); a provider
        that is gone has no room to leave."""
        try:
            full_name = text_field(data, "provider_name")
            parsed = ProviderName.parse(full_name)
            record = await service.get_provider(
                self.hub.db,
                self.sockets.sessions[sid].principal,
                parsed.room_id,
                full_name,
                (),
            )
        except (ProviderNotFound, KeyError):
            return {"provider_name": data.get("provider_name") if isinstance(data, dict) else None}
        except DomainError as exc:
            return problem_of(exc)
        room = provider_room(record.id)
        session = self.sockets.sessions.get(sid)
        if session is not None:
            session.rooms.discard(room)
        await self.sio.leave_room(sid, room)
        return {"provider_name": full_name}
