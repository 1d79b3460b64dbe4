"""Whether a caller may do something in a room, asked at every door before anything is
read or changed there: first Taskhub's own rule of private rooms (``rules.authorisation``:
a private room's members and roles; 404 for who may not read it, 403 for who may read but
not act), then the host's room policy.

Without private rooms and a policy every room is open to every signed-in caller. A host
application gives a policy (``taskhub.embed(..., room_policy=...)``): it refuses by
raising ``RoomRefused`` with the problem to answer (404 for a room it does not know, 423
``room-locked``, ...); any other exception is its failure to decide, answered 503 with
nothing changed."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from uuid import UUID

from taskhub.rules.authorisation import RoomAction, check_in_room, may_in_room
from taskhub.rules.errors import (
    DomainError,
    RoomPolicyUnavailable,
    RoomRefused,
    ServiceUnavailable,
    TaskNotFound,
)
from taskhub.rules.records import Principal
from taskhub.services.identities import Caller
from taskhub.services.rooms import PrivateRooms, task_room_and_submitter
from taskhub.store.database import Database

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RoomRequest:
    """What a room policy is asked: may ``principal`` do ``action`` in ``room_id``?
    ``caller``: the request or socket asking (its headers, e.g. a ``Lock-Token``)."""

    principal: Principal
    room_id: str
    action: RoomAction
    caller: Caller


RoomPolicy = Callable[[RoomRequest], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RoomAccess:
    policy: RoomPolicy | None = None
    private: PrivateRooms | None = None  # None: every room is open (no database)

    async def check(
        self,
        principal: Principal,
        room_id: str,
        action: RoomAction,
        caller: Caller,
        *,
        hidden: DomainError | None = None,
    ) -> None:
        """Returns when allowed. Refused by the private rooms' rule: ``NotFound`` (or
        ``hidden``, e.g. the task asked for was not found) for who may not read the room,
        ``Forbidden`` for who may read it but not do ``action``. Refused by the policy:
        ``RoomRefused`` with its problem, else ``RoomPolicyUnavailable`` when it failed."""
        if self.private is not None:
            check_in_room(principal, await self.private.room(room_id), action, hidden=hidden)
        if self.policy is None:
            return
        try:
            await self.policy(RoomRequest(principal, room_id, action, caller))
        except RoomRefused:
            raise
        except Exception as exc:
            log.exception("the room policy failed for room %.100r", room_id)
            raise RoomPolicyUnavailable(
                f"The room policy could not decide ({type(exc).__name__}); nothing was done."
            ) from None

    def private_rooms(self) -> PrivateRooms:
        """The private rooms this hub keeps (a hub always does; a bare ``RoomAccess``
        keeps every room open)."""
        if self.private is None:
            raise ServiceUnavailable("This hub keeps no private rooms.")
        return self.private

    async def is_private(self, room_id: str) -> bool:
        """Whether ``room_id`` is a private room (from the cache the doors read)."""
        return self.private is not None and await self.private.room(room_id) is not None

    async def guards_tasks(self) -> bool:
        """Whether a door naming only a task must read its room (a policy, or a private
        room, could refuse it); else an open hub reads nothing more."""
        return self.policy is not None or (self.private is not None and await self.private.any())

    async def closed_to(self, principal: Principal, action: RoomAction) -> frozenset[str]:
        """The private rooms where ``principal`` may not do ``action`` (none without
        private rooms)."""
        if self.private is None:
            return frozenset()
        return await self.private.closed_to(principal, action)

    async def check_task(
        self,
        db: Database,
        principal: Principal,
        task_id: UUID,
        action: RoomAction,
        caller: Caller,
        *,
        others: RoomAction | None = None,
    ) -> None:
        """``check`` for the room of a task, read only when something could refuse it (a
        task in a private room its caller may not read is not found). ``others``: what a
        private room asks on a task the caller did not submit (re-running anyone's)."""
        if not await self.guards_tasks():
            return
        room_id, submitter = await task_room_and_submitter(db, task_id)
        hidden = TaskNotFound(f"Task {task_id} not found.")
        await self.check(principal, room_id, action, caller, hidden=hidden)
        if others is not None and submitter != principal.id and self.private is not None:
            check_in_room(principal, await self.private.room(room_id), others, hidden=hidden)

    async def check_update(
        self, db: Database, principal: Principal, task_id: UUID, *, cancel: bool
    ) -> bool:
        """The room's part of a task update (a PATCH); whether the caller maintains the
        task's private room (``transitions.update_task``'s ``maintains_room``). In a
        private room: a caller who may not read it is told the task is not found; a cancel
        of one's own task needs one to be a member still. The task rules do the rest."""
        if self.private is None or not await self.private.any():
            return False
        room_id, submitter = await task_room_and_submitter(db, task_id)
        room = await self.private.room(room_id)
        if room is None:
            return False
        check_in_room(
            principal, room, RoomAction.READ, hidden=TaskNotFound(f"Task {task_id} not found.")
        )
        maintains = may_in_room(principal, room, RoomAction.MANAGE)
        if cancel and not maintains and submitter == principal.id:
            check_in_room(principal, room, RoomAction.SUBMIT)
        return maintains
