"""The private rooms' cache (``services.rooms.PrivateRooms``): open rooms cost no database
read once the cache is fresh; a change made here holds at once and its listeners are told;
a change made elsewhere holds once the cache is older than its lifetime. And the room
access asks the private rooms' rule before a host's policy."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from starlette.requests import HTTPConnection

from taskhub.rules.authorisation import MemberKind, RoomAction, RoomRole
from taskhub.rules.errors import Forbidden, NotFound
from taskhub.rules.records import Principal
from taskhub.services import rooms
from taskhub.services.identities import Caller
from taskhub.services.room_access import RoomAccess, RoomRequest
from taskhub.services.users import create_user
from taskhub.store import rooms as store
from taskhub.store.database import Database

CALLER = Caller(HTTPConnection({"type": "http", "headers": []}), None)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One entry per read of the private rooms."""
    counted: list[int] = []
    read = store.private_rooms

    async def counting(conn: Any) -> Any:
        counted.append(1)
        return await read(conn)

    monkeypatch.setattr(store, "private_rooms", counting)
    return counted


async def test_open_rooms_cost_one_read_per_lifetime(db: Database, reads: list[int]) -> None:
    cache = rooms.PrivateRooms(db, ttl=60)
    for room_id in ("a", "b", "c", "a"):
        assert await cache.room(room_id) is None
    assert len(reads) == 1


async def test_a_change_here_holds_at_once_and_is_told(db: Database, reads: list[int]) -> None:
    alice_id, _token = await create_user(db, "alice")
    cache = rooms.PrivateRooms(db, ttl=60)
    told: list[str] = []

    async def listener(room_id: str) -> None:
        told.append(room_id)

    cache.on_change(listener)
    assert await cache.room("lab") is None
    await rooms.set_visibility(db, cache, "lab", "private", maintainer=alice_id)
    room = await cache.room("lab")
    assert room is not None and told == ["lab"]
    alice = Principal(alice_id, "alice", False)
    assert await cache.closed_to(alice, RoomAction.MANAGE) == frozenset()
    bob = Principal(uuid.uuid4(), "bob", False)
    assert await cache.closed_to(bob, RoomAction.READ) == {"lab"}


async def test_a_change_elsewhere_holds_after_the_lifetime(db: Database) -> None:
    here = rooms.PrivateRooms(db, ttl=0.2)
    elsewhere = rooms.PrivateRooms(db, ttl=60)
    assert not await here.any()
    await rooms.set_visibility(db, elsewhere, "lab", "private", maintainer=None)
    assert not await here.any()  # still fresh
    await asyncio.sleep(0.25)
    assert await here.any()


async def test_the_private_rule_refuses_before_the_policy_is_asked(db: Database) -> None:
    asked: list[RoomRequest] = []

    async def policy(request: RoomRequest) -> None:
        asked.append(request)

    cache = rooms.PrivateRooms(db, ttl=60)
    alice_id, _token = await create_user(db, "alice")
    await rooms.set_visibility(db, cache, "lab", "private", maintainer=alice_id)
    await rooms.put_member(db, cache, "lab", MemberKind.GROUP, "physics", RoomRole.VIEWER)
    access = RoomAccess(policy, cache)
    outsider = Principal(uuid.uuid4(), "dave", False)
    viewer = Principal(uuid.uuid4(), "carol", False, frozenset({"physics"}))
    with pytest.raises(NotFound):
        await access.check(outsider, "lab", RoomAction.READ, CALLER)
    with pytest.raises(Forbidden):
        await access.check(viewer, "lab", RoomAction.SUBMIT, CALLER)
    assert asked == []
    await access.check(viewer, "lab", RoomAction.READ, CALLER)
    await access.check(outsider, "lobby", RoomAction.SUBMIT, CALLER)
    assert [(r.principal.name, r.room_id) for r in asked] == [("carol", "lab"), ("dave", "lobby")]
