"""The host's own Socket.IO events: ``connect`` lets in only sockets with a valid host JWT,
``room_join`` is answered the host's way. Registered before ``taskhub.embedding.embed``,
so Taskhub keeps them (its bookkeeping is chained after ``connect``/``disconnect``)."""

from __future__ import annotations

from typing import Any

import socketio

from examples.host_app.accounts import Accounts
from examples.host_app.problems import HostProblem, room_not_found
from examples.host_app.rooms import RoomRegistry, valid_room_id
from taskhub.embedding import EmbeddedHub
from taskhub.rules.errors import DomainError


def host_room(room_id: str) -> str:
    """The host's own Socket.IO room of a room (Taskhub's is ``room:{room_id}``)."""
    return f"host:{room_id}"


def bearer(environ: dict[str, Any]) -> str | None:
    scheme, _, token = environ.get("HTTP_AUTHORIZATION", "").partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


class HostSockets:
    def __init__(self, sio: socketio.AsyncServer, accounts: Accounts, rooms: RoomRegistry) -> None:
        self.sio, self.accounts, self.rooms = sio, accounts, rooms
        self.hub: EmbeddedHub | None = None  # set once Taskhub is embedded
        sio.on("connect", self.connect)
        sio.on("room_join", self.room_join)

    async def connect(self, sid: str, environ: dict[str, Any], auth: Any = None) -> None:
        token = auth.get("token") if isinstance(auth, dict) else None
        user = self.accounts.verify(token if isinstance(token, str) else bearer(environ))
        if user is None:
            raise socketio.exceptions.ConnectionRefusedError(
                "Sign in first (POST /auth/login), then connect with auth={'token': ...}."
            )
        await self.sio.save_session(sid, {"user_id": str(user.id), "name": user.name})

    async def room_join(self, sid: str, data: Any) -> dict[str, Any]:
        """Enter the host's room and Taskhub's (its tasks' events). The answer: the room and
        whether it is locked, or a problem."""
        room_id = data.get("room_id") if isinstance(data, dict) else None
        if not valid_room_id(room_id):
            detail = "room_id: 1 to 64 letters, digits, '_' or '-'."
            return HostProblem(422, "invalid-request", "Unprocessable Content", detail).body()
        assert isinstance(room_id, str)
        room = await self.rooms.get(room_id)
        if room is None:
            return room_not_found(room_id).body()
        assert self.hub is not None
        try:
            await self.hub.watch_room(sid, room_id)
        except DomainError as refused:
            return HostProblem(refused.status, refused.slug, refused.title, refused.detail).body()
        await self.sio.enter_room(sid, host_room(room_id))
        member = await self.sio.get_session(sid)
        await self.sio.emit(
            "member_joined", {"room_id": room_id, "name": member["name"]}, room=host_room(room_id)
        )
        return {"room_id": room_id, "locked": room.locked}
