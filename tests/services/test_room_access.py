"""The room policy: asked what a caller does in a room; its refusal is answered as it
chose, its failure to decide as 503 with nothing done, no policy leaves every room open."""

from __future__ import annotations

import uuid

import pytest
from starlette.requests import HTTPConnection

from taskhub.rules.authorisation import RoomAction
from taskhub.rules.errors import RoomPolicyUnavailable, RoomRefused
from taskhub.rules.records import Principal
from taskhub.services.identities import Caller
from taskhub.services.room_access import RoomAccess, RoomRequest

ALICE = Principal(uuid.uuid4(), "alice", False)
CALLER = Caller(HTTPConnection({"type": "http", "headers": [(b"lock-token", b"t1")]}), None)


async def test_without_a_policy_every_room_is_open():
    for action in RoomAction:
        await RoomAccess().check(ALICE, "room1", action, CALLER)


async def test_the_policy_is_asked_with_the_caller_room_action_and_request():
    asked: list[RoomRequest] = []

    async def policy(request: RoomRequest) -> None:
        asked.append(request)

    await RoomAccess(policy).check(ALICE, "room1", RoomAction.SUBMIT, CALLER)
    assert asked == [RoomRequest(ALICE, "room1", RoomAction.SUBMIT, CALLER)]
    assert asked[0].caller.connection.headers["lock-token"] == "t1"


async def test_a_refusal_is_answered_with_the_problem_the_policy_chose():
    async def locked(request: RoomRequest) -> None:
        if request.action.writes:
            raise RoomRefused(423, "room-locked", "Room Locked", "room1 is locked by bob")

    access = RoomAccess(locked)
    await access.check(ALICE, "room1", RoomAction.READ, CALLER)
    with pytest.raises(RoomRefused) as refused:
        await access.check(ALICE, "room1", RoomAction.SUBMIT, CALLER)
    assert (refused.value.status, refused.value.slug, refused.value.detail) == (
        423,
        "room-locked",
        "room1 is locked by bob",
    )


async def test_a_policy_that_fails_is_unavailable():
    async def broken(_request: RoomRequest) -> None:
        raise KeyError("room1")

    with pytest.raises(RoomPolicyUnavailable) as failed:
        await RoomAccess(broken).check(ALICE, "room1", RoomAction.READ, CALLER)
    assert failed.value.status == 503
