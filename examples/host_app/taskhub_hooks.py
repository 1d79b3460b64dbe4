"""What Taskhub asks the host (docs/embedding.md, "Hooks"): who a caller is, and whether
a room may be read or written."""

from __future__ import annotations

from examples.host_app.accounts import Accounts
from examples.host_app.problems import room_locked, room_not_found
from examples.host_app.rooms import RoomRegistry
from taskhub.embedding import (
    Caller,
    HostAuthenticate,
    Principal,
    RoomAction,
    RoomPolicy,
    RoomRefused,
    RoomRequest,
)

LOCK_TOKEN = "Lock-Token"
# What an edit lock holds back: changes to the room. Reading it, and workers serving what
# was asked before the lock (joining job rooms, claiming, reporting), go on.
EDITS = frozenset({RoomAction.SUBMIT, RoomAction.REGISTER, RoomAction.MANAGE})


def authenticate_with(accounts: Accounts) -> HostAuthenticate:
    """The ``authenticate`` hook: the host's JWT (``Authorization: Bearer …`` or a socket's
    ``auth={"token": …}``) as Taskhub's principal. None for any other token: Taskhub then
    tries its own ``th_`` tokens."""

    async def authenticate(caller: Caller) -> Principal | None:
        user = accounts.verify(caller.token)
        if user is None:
            return None
        return Principal(user.id, user.name, user.is_admin)

    return authenticate


def room_policy_of(rooms: RoomRegistry) -> RoomPolicy:
    """The ``room_policy`` hook: a room must exist (404 ``room-not-found``), and an edit of
    a locked one must carry its ``Lock-Token`` (423 ``room-locked``). Taskhub's shared
    rooms (``@global``) are Taskhub's business: its own rules apply."""

    async def room_policy(request: RoomRequest) -> None:
        if request.room_id.startswith("@"):
            return
        room = await rooms.get(request.room_id)
        if room is None:
            refusal = room_not_found(request.room_id)
        elif request.action in EDITS and not room.unlocked_by(
            request.caller.connection.headers.get(LOCK_TOKEN)
        ):
            refusal = room_locked(request.room_id)
        else:
            return
        raise RoomRefused(refusal.status, refusal.slug, refusal.title, refusal.detail)

    return room_policy
