"""Who may write a task: the one statement of the rule.

A superuser may do anything. Otherwise a caller acts through a role it holds towards the
task: the owner of the worker holding the task, or the user who submitted it. A PATCH
needs the worker's owner, except a cancel, which the submitter may also make. A claim
needs the claiming worker's owner.

The store builds the SQL guards of the claim and of the update from ``claim_roles`` and
``update_roles``; the services use ``check_claim`` and ``check_update`` to tell a refused
caller 403 (or 404: no such worker) once the guarded statement matched nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from uuid import UUID

from taskhub.rules.errors import DomainError, Forbidden, NotFound
from taskhub.rules.records import Principal
from taskhub.rules.states import TaskStatus
from taskhub.rules.worker_ownership import check_worker, may_act_for


class RoomAction(enum.Enum):
    """What a request does in a room, as the room rules (a private room's roles, then a
    host's policy) are asked about it. Who submitted or owns what is the business of the
    task roles below."""

    READ = "read"  # its tasks, jobs, workers, providers, stats, logs; watching its events
    SUBMIT = "submit"  # submitting; cancelling and re-running one's own tasks
    WORK = "work"  # a worker joining a job's room, claiming, pushed tasks, serving reads
    REGISTER = "register"  # registering jobs and providers
    MANAGE = "manage"  # anyone's tasks, bulk actions, the room's members and visibility

    @property
    def writes(self) -> bool:
        return self is not RoomAction.READ


class RoomRole(enum.Enum):
    """A member's role in a private room; each holds the actions of those before it."""

    VIEWER = "viewer"
    MEMBER = "member"
    MAINTAINER = "maintainer"

    @property
    def rank(self) -> int:
        return _ROLE_ORDER.index(self)


_ROLE_ORDER = (RoomRole.VIEWER, RoomRole.MEMBER, RoomRole.MAINTAINER)

# The one table of the private rooms' rule (docs/protocol.md, "Private rooms"): the least
# role each action needs. Open rooms and superusers need none.
ROOM_ACTION_ROLES: dict[RoomAction, RoomRole] = {
    RoomAction.READ: RoomRole.VIEWER,
    RoomAction.SUBMIT: RoomRole.MEMBER,
    RoomAction.WORK: RoomRole.MEMBER,
    RoomAction.REGISTER: RoomRole.MAINTAINER,
    RoomAction.MANAGE: RoomRole.MAINTAINER,
}


class MemberKind(enum.Enum):
    """Who a membership names: a user (by id) or a group (from identity claims)."""

    USER = "user"
    GROUP = "group"


@dataclass(frozen=True, slots=True)
class PrivateRoom:
    """A private room's members: ``(kind, subject)`` to role, where ``subject`` is a user
    id's text or a group name."""

    room_id: str
    members: Mapping[tuple[MemberKind, str], RoomRole] = field(default_factory=dict)


def room_role(principal: Principal, room: PrivateRoom) -> RoomRole | None:
    """The highest role ``principal`` holds in ``room``, as a user or through any of its
    groups (None: not a member)."""
    held = [room.members.get((MemberKind.USER, str(principal.id)))]
    held += [room.members.get((MemberKind.GROUP, group)) for group in principal.groups]
    roles = [role for role in held if role is not None]
    return max(roles, key=lambda role: role.rank) if roles else None


def may_in_room(principal: Principal, room: PrivateRoom | None, action: RoomAction) -> bool:
    """Whether ``principal`` may do ``action`` in a room: anyone in an open room (None),
    a superuser anywhere, else a member whose role is at least the action's."""
    if room is None or is_unrestricted(principal):
        return True
    role = room_role(principal, room)
    return role is not None and role.rank >= ROOM_ACTION_ROLES[action].rank


def check_in_room(
    principal: Principal,
    room: PrivateRoom | None,
    action: RoomAction,
    *,
    hidden: DomainError | None = None,
) -> None:
    """404 for a private room ``principal`` may not read (its existence stays hidden:
    ``hidden`` is raised when given, e.g. the task asked for not found), 403 for one it may
    read but not act in; else returns."""
    if may_in_room(principal, room, action):
        return
    assert room is not None
    if not may_in_room(principal, room, RoomAction.READ):
        raise hidden if hidden is not None else NotFound(f"No room {room.room_id!r}.")
    needed = ROOM_ACTION_ROLES[action].value
    raise Forbidden(f"Room {room.room_id!r} is private: this needs the role {needed!r}.")


class Role(enum.Enum):
    """A caller's relation to a task (or, for a claim, to the worker that claims)."""

    WORKER_OWNER = "worker-owner"  # owns the worker that holds the task (or claims)
    SUBMITTER = "submitter"  # submitted the task


def is_unrestricted(principal: Principal) -> bool:
    """A superuser: no role needed, no guard in the statement."""
    return principal.is_superuser


def update_roles(target: TaskStatus | None) -> tuple[Role, ...]:
    """The roles, any one of which lets a caller move a task to ``target`` (None: report
    progress), in the order the guard tests them."""
    if target == TaskStatus.CANCELLED:
        return (Role.WORKER_OWNER, Role.SUBMITTER)
    return (Role.WORKER_OWNER,)


def claim_roles() -> tuple[Role, ...]:
    """The roles, any one of which lets a caller claim for a worker."""
    return (Role.WORKER_OWNER,)


def holds_role(
    principal: Principal, role: Role, *, worker_owner: UUID | None, submitted_by: UUID | None
) -> bool:
    if role is Role.WORKER_OWNER:
        return worker_owner is not None and worker_owner == principal.id
    return submitted_by is not None and submitted_by == principal.id


def update_unrestricted(
    principal: Principal, target: TaskStatus | None, *, maintains_room: bool = False
) -> bool:
    """Whether an update needs no role towards the task: a superuser's, or the cancel of a
    maintainer of the task's private room (``maintains_room``), who cancels anyone's task
    there."""
    if is_unrestricted(principal):
        return True
    return maintains_room and target == TaskStatus.CANCELLED


def may_update(
    principal: Principal,
    target: TaskStatus | None,
    *,
    worker_owner: UUID | None,
    submitted_by: UUID | None,
    maintains_room: bool = False,
) -> bool:
    """``worker_owner``: the owner of the worker holding the task (None: no worker)."""
    if update_unrestricted(principal, target, maintains_room=maintains_room):
        return True
    facts = {"worker_owner": worker_owner, "submitted_by": submitted_by}
    return any(holds_role(principal, role, **facts) for role in update_roles(target))


def may_claim(principal: Principal, worker_owner: UUID | None) -> bool:
    """``worker_owner``: the owner of the claiming worker (None: no such worker, for
    which nobody may claim). Claiming is acting for the worker (``worker_ownership``)."""
    return worker_owner is not None and may_act_for(principal, worker_owner)


def check_update(
    principal: Principal,
    target: TaskStatus | None,
    *,
    worker_owner: UUID | None,
    submitted_by: UUID | None,
    maintains_room: bool = False,
) -> None:
    """403 unless ``may_update``."""
    facts = {"worker_owner": worker_owner, "submitted_by": submitted_by}
    if not may_update(principal, target, maintains_room=maintains_room, **facts):
        raise Forbidden(
            "Only the claiming worker's owner, the submitter (to cancel) or a superuser."
        )


def check_claim(principal: Principal, worker_id: UUID, worker_owner: UUID | None) -> None:
    """404 when the worker does not exist (``worker_owner`` None), 403 unless
    ``may_claim``: the rule of acting for a worker."""
    check_worker(principal, worker_id, worker_owner)
