"""The private rooms' rule (docs/protocol.md, "Private rooms"): roles x actions, a user's
role through itself or its groups (the highest wins), superusers and open rooms unbound,
and the refusal that hides a room from who may not read it."""

from __future__ import annotations

import uuid

import pytest

from taskhub.rules.authorisation import (
    ROOM_ACTION_ROLES,
    MemberKind,
    PrivateRoom,
    RoomAction,
    RoomRole,
    check_in_room,
    may_in_room,
    room_role,
)
from taskhub.rules.errors import Forbidden, NotFound, TaskNotFound
from taskhub.rules.records import Principal

ALICE = Principal(uuid.uuid4(), "alice", False, frozenset({"physics"}))
ROOT = Principal(uuid.uuid4(), "root", True)

# What each role may do: the table of docs/protocol.md, written out.
ALLOWED = {
    RoomRole.VIEWER: {RoomAction.READ},
    RoomRole.MEMBER: {RoomAction.READ, RoomAction.SUBMIT, RoomAction.WORK},
    RoomRole.MAINTAINER: set(RoomAction),
}


def room_with(*members: tuple[MemberKind, str, RoomRole]) -> PrivateRoom:
    return PrivateRoom("lab", {(kind, subject): role for kind, subject, role in members})


def test_every_action_has_a_least_role() -> None:
    assert set(ROOM_ACTION_ROLES) == set(RoomAction)


@pytest.mark.parametrize("role", list(RoomRole))
@pytest.mark.parametrize("action", list(RoomAction))
def test_a_roles_actions(role: RoomRole, action: RoomAction) -> None:
    room = room_with((MemberKind.USER, str(ALICE.id), role))
    assert may_in_room(ALICE, room, action) is (action in ALLOWED[role])


@pytest.mark.parametrize("action", list(RoomAction))
def test_an_open_room_and_a_superuser_are_unbound(action: RoomAction) -> None:
    assert may_in_room(ALICE, None, action)
    assert may_in_room(ROOT, room_with(), action)


def test_the_highest_of_a_users_roles_holds() -> None:
    room = room_with(
        (MemberKind.USER, str(ALICE.id), RoomRole.VIEWER),
        (MemberKind.GROUP, "physics", RoomRole.MAINTAINER),
        (MemberKind.GROUP, "chemistry", RoomRole.MEMBER),
    )
    assert room_role(ALICE, room) is RoomRole.MAINTAINER
    assert room_role(ROOT, room) is None
    # A group named like a user's id is not that user.
    assert room_role(ALICE, room_with((MemberKind.GROUP, str(ALICE.id), RoomRole.VIEWER))) is None


def test_a_refusal_hides_the_room_from_who_may_not_read_it() -> None:
    with pytest.raises(NotFound):
        check_in_room(ALICE, room_with(), RoomAction.READ)
    hidden = TaskNotFound("Task t not found.")
    with pytest.raises(TaskNotFound) as refused:
        check_in_room(ALICE, room_with(), RoomAction.SUBMIT, hidden=hidden)
    assert refused.value is hidden
    viewer = room_with((MemberKind.GROUP, "physics", RoomRole.VIEWER))
    with pytest.raises(Forbidden):
        check_in_room(ALICE, viewer, RoomAction.SUBMIT, hidden=hidden)
    check_in_room(ALICE, viewer, RoomAction.READ)
