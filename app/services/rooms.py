"""Private rooms: the cache the room rule reads at every door, and the use cases that
change a room's visibility and members (REST ``/rooms/{room_id}…`` and ``taskhub rooms``).

An open room costs nothing: the private rooms and their members are held in this process
and read again every ``TASKHUB_AUTH_CACHE_SECONDS`` (so a change made on another replica
holds there within that time), and at once here after a change made here."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from uuid import UUID

from taskhub.clock import utcnow
from taskhub.rules.authorisation import (
    MemberKind,
    PrivateRoom,
    RoomAction,
    RoomRole,
    may_in_room,
    room_role,
)
from taskhub.rules.errors import Forbidden, NotFound, TaskNotFound, ValidationFailed
from taskhub.rules.naming import is_reserved, validate_room_id
from taskhub.rules.records import Principal
from taskhub.store import rooms as store
from taskhub.store import users as user_store
from taskhub.store.database import Database

log = logging.getLogger(__name__)
Visibility = str  # "open" or "private"
VISIBILITIES = (store.OPEN, store.PRIVATE)
RoomChanged = Callable[[str], Awaitable[object]]


class PrivateRooms:
    """The private rooms and their members, as last read (at most ``ttl`` seconds ago).
    ``on_change`` callbacks are told a room whose access changed here (the sockets then
    leave the rooms their users may no longer read)."""

    def __init__(self, db: Database, ttl: float) -> None:
        self._db = db
        self._ttl = ttl
        self._rooms: dict[str, PrivateRoom] = {}
        self._read_at: float | None = None
        self._reading = asyncio.Lock()
        self._listeners: list[RoomChanged] = []

    def on_change(self, listener: RoomChanged) -> None:
        self._listeners.append(listener)

    async def rooms(self) -> dict[str, PrivateRoom]:
        """Every private room, by id (read again once the cache is older than ``ttl``)."""
        if self._fresh():
            return self._rooms
        async with self._reading:
            if not self._fresh():
                async with self._db.read() as conn:
                    self._rooms = await store.private_rooms(conn)
                self._read_at = time.monotonic()
        return self._rooms

    def _fresh(self) -> bool:
        return self._read_at is not None and time.monotonic() - self._read_at < self._ttl

    async def room(self, room_id: str) -> PrivateRoom | None:
        """The room if it is private (None: open)."""
        return (await self.rooms()).get(room_id)

    async def any(self) -> bool:
        """Whether any room is private (else no door needs to know a task's room)."""
        return bool(await self.rooms())

    async def closed_to(self, principal: Principal, action: RoomAction) -> frozenset[str]:
        """The private rooms where ``principal`` may not do ``action`` (a claim leaves
        their tasks alone)."""
        return frozenset(
            room_id
            for room_id, room in (await self.rooms()).items()
            if not may_in_room(principal, room, action)
        )

    async def changed(self, room_id: str) -> None:
        """A room's access changed here: read again at the next door, tell the listeners."""
        self._read_at = None
        for listener in self._listeners:
            try:
                await listener(room_id)
            except Exception:
                log.exception("a listener of room %.100r's access failed", room_id)


@dataclass(frozen=True, slots=True)
class RoomView:
    """A room as its REST answer shows it: its visibility and the caller's standing."""

    room_id: str
    visibility: Visibility
    role: RoomRole | None  # the caller's, in a private room
    actions: list[RoomAction]  # what the caller may do there


async def show_room(rooms: PrivateRooms, principal: Principal, room_id: str) -> RoomView:
    room = await rooms.room(validate_room_id(room_id))
    return RoomView(
        room_id,
        store.PRIVATE if room is not None else store.OPEN,
        room_role(principal, room) if room is not None else None,
        [action for action in RoomAction if may_in_room(principal, room, action)],
    )


async def set_visibility(
    db: Database,
    rooms: PrivateRooms,
    room_id: str,
    visibility: Visibility,
    *,
    maintainer: UUID | None,
) -> None:
    """Open the room, or make it private: ``maintainer`` (whoever makes it private; None
    from the command line without ``--maintainer``) becomes a maintainer, unless it holds a
    role there already."""
    room_id = validate_room_id(room_id)
    if is_reserved(room_id):
        raise Forbidden(f"{room_id!r} holds jobs for every room: it stays open.")
    if visibility not in VISIBILITIES:
        raise ValidationFailed(
            "visibility must be 'open' or 'private'.",
            errors=[{"loc": ["body", "visibility"], "msg": "'open' or 'private'"}],
        )
    now = utcnow()
    async with db.write() as conn:
        await store.set_visibility(conn, room_id, visibility, now)
        if visibility == store.PRIVATE and maintainer is not None:
            held = {(row.kind, row.subject) for row in await store.members(conn, room_id)}
            if (MemberKind.USER, str(maintainer)) not in held:
                await store.put_member(
                    conn, room_id, MemberKind.USER, str(maintainer), RoomRole.MAINTAINER, now
                )
    await rooms.changed(room_id)


async def visibility(db: Database, room_id: str) -> Visibility:
    """As stored (the command line's view; the doors read ``PrivateRooms``)."""
    async with db.read() as conn:
        return await store.visibility(conn, validate_room_id(room_id))


async def user_id_named(db: Database, name: str) -> UUID:
    """The id of the user called ``name`` (404 else)."""
    async with db.read() as conn:
        found = await user_store.user_named(conn, name)
    if found is None:
        raise NotFound(f"No user named {name!r}.")
    return found


async def list_members(db: Database, room_id: str) -> list[store.MemberRow]:
    async with db.read() as conn:
        return await store.members(conn, validate_room_id(room_id))


async def put_member(
    db: Database, rooms: PrivateRooms, room_id: str, kind: MemberKind, subject: str, role: RoomRole
) -> bool:
    """Add a member or change its role; True if it is new."""
    room_id = validate_room_id(room_id)
    subject = member_subject(kind, subject)
    async with db.write() as conn:
        created = await store.put_member(conn, room_id, kind, subject, role, utcnow())
    await rooms.changed(room_id)
    return created


async def remove_member(
    db: Database, rooms: PrivateRooms, room_id: str, kind: MemberKind, subject: str
) -> None:
    """Remove a member (404 when there is none); its sockets leave the room at once here."""
    room_id = validate_room_id(room_id)
    subject = member_subject(kind, subject)
    async with db.write() as conn:
        removed = await store.remove_member(conn, room_id, kind, subject)
    if not removed:
        raise NotFound(f"Room {room_id!r} has no {kind.value} member {subject!r}.")
    await rooms.changed(room_id)


def member_subject(kind: MemberKind, subject: str) -> str:
    """A user member by its id (a UUID, written in its canonical form), a group by a
    name of 1 to 255 characters (422 else)."""
    if kind is MemberKind.USER:
        try:
            return str(UUID(subject))
        except ValueError:
            raise ValidationFailed(
                "A user member is named by its user id (a UUID).",
                errors=[{"loc": ["path", "subject"], "msg": "Input should be a valid UUID"}],
            ) from None
    if not 0 < len(subject) <= 255 or "\x00" in subject:
        raise ValidationFailed(
            "A group is named by 1 to 255 characters.",
            errors=[{"loc": ["path", "subject"], "msg": "1 to 255 characters"}],
        )
    return subject


async def hide_closed_tasks(db: Database, lists: list[list[UUID]], closed: frozenset[str]) -> None:
    """Take out of each of ``lists`` the tasks of the ``closed`` rooms (private rooms the
    caller may not read), in place."""
    if not closed or not any(lists):
        return
    async with db.read() as conn:
        rooms = await store.rooms_of_tasks(conn, {task for ids in lists for task in ids})
    for ids in lists:
        ids[:] = [task for task in ids if rooms.get(task) not in closed]


async def task_room_and_submitter(db: Database, task_id: UUID) -> tuple[str, UUID | None]:
    """A task's room and submitter, or ``TaskNotFound``."""
    async with db.read() as conn:
        found = await store.task_room_and_submitter(conn, task_id)
    if found is None:
        raise TaskNotFound(f"Task {task_id} not found.")
    return found
