"""Private rooms on Socket.IO and at the doors that cross rooms (a real server, both
backends): every socket event by every role, expected from the one rule; a private room's
events reach only who may read it, and stop at once for a member removed or a watcher of a
room made private; a claim leaves alone the private rooms its worker's owner may not work
in (``@global`` jobs too), and its ``task_available`` hints to an ``@global`` job's
workers name only the job."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

import httpx
import pytest
from zndraw_joblib.events import TaskAvailable

from taskhub.main import create_app
from taskhub.rules.authorisation import MemberKind, PrivateRoom, RoomAction, RoomRole, may_in_room
from taskhub.rules.records import Principal
from taskhub.services.users import create_user
from taskhub.settings import Settings
from taskhub.store.database import Database
from taskhub.transport.sockets.handlers import CLIENT_EVENTS
from taskhub.transport.sockets.providers import PROVIDER_EVENTS
from tests.conftest import Users
from tests.realtime.hubs import served
from tests.support.api import ApiClient, assert_problem
from tests.support.sockets import SocketProbe, assert_problem_ack

ROOM = "secret"
JOB = f"{ROOM}:modifiers:Rotate"
PROVIDER = f"{ROOM}:frames:Frame"
ROLES = ("alice", "bob", "carol", "dave", "root")

# The socket events that enter a room's Socket.IO rooms, and the action each asks; the
# others, and why no room rule applies to them.
ROOM_EVENTS = {
    "room_join": RoomAction.READ,
    "join_job_room": RoomAction.WORK,
    "join_provider_room": RoomAction.WORK,
}
ROOMLESS_EVENTS = {
    "leave_job_room": "leaving",
    "room_leave": "leaving",
    "leave_provider_room": "leaving",
    "worker_ready": "only a worker that joined a job room through this socket",
    "worker_pause": "only a worker that joined a job room through this socket",
    "task_update": "PATCH /tasks/{task_id}'s rule",
}


def test_every_socket_event_has_a_rule() -> None:
    events = set(CLIENT_EVENTS) | set(PROVIDER_EVENTS)
    assert events == set(ROOM_EVENTS) | set(ROOMLESS_EVENTS)


@asynccontextmanager
async def hub(settings: Settings, db: Database, tokens: Users) -> AsyncIterator[dict[str, Any]]:
    """A served hub and a REST client and token per role."""
    found = {"alice": tokens.alice, "bob": tokens.bob, "root": tokens.admin}
    for name in ("carol", "dave"):
        found[name] = (await create_user(db, name))[1]
    async with served(create_app(settings)) as url, httpx.AsyncClient(base_url=url) as http:
        yield {
            "url": url,
            "tokens": found,
            "clients": {role: ApiClient(http, token) for role, token in found.items()},
        }


async def private_room(clients: dict[str, ApiClient]) -> tuple[dict[str, str], PrivateRoom]:
    """alice's job and provider in ``ROOM``, made private: bob a member, carol a viewer.
    The user ids by role, and the room as the rule sees it."""
    alice = clients["alice"]
    worker = (await alice.register(ROOM, schema={}))["worker_id"]
    provider = {"category": "frames", "name": "Frame", "worker_id": worker}
    assert (await alice.put(f"/rooms/{ROOM}/providers", json=provider)).status_code == 201
    assert (await alice.put(f"/rooms/{ROOM}", json={"visibility": "private"})).status_code == 200
    ids = {role: (await client.get("/users/me")).json()["id"] for role, client in clients.items()}
    for role, as_what in (("bob", "member"), ("carol", "viewer")):
        response = await alice.put(
            f"/rooms/{ROOM}/members/user/{ids[role]}", json={"role": as_what}
        )
        assert response.status_code == 201, response.text
    ids["alices_worker"] = worker
    room = PrivateRoom(
        ROOM,
        {
            (MemberKind.USER, ids["alice"]): RoomRole.MAINTAINER,
            (MemberKind.USER, ids["bob"]): RoomRole.MEMBER,
            (MemberKind.USER, ids["carol"]): RoomRole.VIEWER,
        },
    )
    return ids, room


@pytest.mark.parametrize("role", ROLES)
async def test_socket_events_by_role(
    role: str, settings: Settings, db: Database, tokens: Users
) -> None:
    async with hub(settings, db, tokens) as world:
        clients = world["clients"]
        ids, room = await private_room(clients)
        principal = Principal(UUID(ids[role]), role, role == "root")
        worker = ids["alices_worker"] if role == "alice" else None
        if worker is None and may_in_room(principal, room, RoomAction.WORK):
            worker = (await clients[role].register(ROOM, schema={}))["worker_id"]
        if worker is None:  # a worker of its own that serves nothing here
            worker = (await clients[role].post("/workers")).json()["id"]
        calls = {
            "room_join": {"room_id": ROOM},
            "join_job_room": {"job_name": JOB, "worker_id": worker},
            "join_provider_room": {"provider_name": PROVIDER, "worker_id": worker},
        }
        async with SocketProbe(role) as probe:
            await probe.connect(world["url"], world["tokens"][role])
            for event, action in ROOM_EVENTS.items():
                ack = await probe.call(event, calls[event])
                if may_in_room(principal, room, action):
                    # Past the room's door (a provider is served only by its own worker).
                    assert not refused_by_the_room(ack), (event, ack)
                elif may_in_room(principal, room, RoomAction.READ):
                    assert_problem_ack(ack, 403, "forbidden")
                    assert refused_by_the_room(ack)
                else:
                    assert_problem_ack(ack, 404, "not-found")


def refused_by_the_room(ack: Any) -> bool:
    if not isinstance(ack, dict) or "status" not in ack:
        return False
    return ack["type"] == "/v1/problems/not-found" or "is private" in ack["detail"]


async def test_a_private_rooms_events_reach_only_its_readers(
    settings: Settings, db: Database, tokens: Users
) -> None:
    async with hub(settings, db, tokens) as world:
        clients = world["clients"]
        alice, bob = clients["alice"], clients["bob"]
        lobby = (await alice.register("lobby", schema={}))["full_name"]
        # dave watches the room while it is still open.
        async with (
            SocketProbe("carol") as carol,
            SocketProbe("dave") as dave,
        ):
            await carol.connect(world["url"], world["tokens"]["carol"])
            await dave.connect(world["url"], world["tokens"]["dave"])
            await dave.room_join(ROOM)
            await dave.room_join("lobby")
            await carol.room_join("lobby")
            ids, _room = await private_room(clients)
            await carol.room_join(ROOM)
            refused = await dave.call("room_join", {"room_id": ROOM})
            assert_problem_ack(refused, 404, "not-found")

            start = dave.mark(), carol.mark()
            task = await bob.submit(JOB, ROOM)
            await carol.wait_status(task["id"], "pending", after=start[1])
            sentinel = await alice.submit(lobby, "lobby")
            await dave.wait_status(sentinel["id"], "pending", after=start[0])
            assert not [data for _event, data in dave.between(start[0]) if ROOM in str(data)]

            # carol removed: she gets none of the room's events from then on.
            removed = await alice.delete(f"/rooms/{ROOM}/members/user/{ids['carol']}")
            assert removed.status_code == 204
            start = dave.mark(), carol.mark()
            await bob.submit(JOB, ROOM)
            sentinel = await alice.submit(lobby, "lobby")
            await carol.wait_status(sentinel["id"], "pending", after=start[1])
            assert not [data for _event, data in carol.between(start[1]) if ROOM in str(data)]


async def test_a_claim_leaves_alone_the_private_rooms_its_owner_may_not_work_in(
    settings: Settings, db: Database, tokens: Users
) -> None:
    async with hub(settings, db, tokens) as world:
        clients = world["clients"]
        root, bob, dave = clients["root"], clients["bob"], clients["dave"]
        ids, _room = await private_room(clients)
        daves_worker = (await dave.post("/workers")).json()["id"]
        shared = await root.register("@global", name="Shared", schema={}, worker_id=daves_worker)
        secret_task = await bob.submit(shared["full_name"], ROOM)
        lobby_task = await bob.submit(shared["full_name"], "lobby")

        claimed = await dave.claim(daves_worker, max_tasks=5)
        assert claimed is not None and claimed["id"] == lobby_task["id"]
        assert await dave.claim(daves_worker) is None
        hidden = await dave.get(f"/tasks/{secret_task['id']}")
        assert_problem(hidden, 404, "task-not-found")

        # A member's worker may take it.
        added = await clients["alice"].put(
            f"/rooms/{ROOM}/members/user/{ids['dave']}", json={"role": "member"}
        )
        assert added.status_code == 201
        claimed = await dave.claim(daves_worker)
        assert claimed is not None and claimed["id"] == secret_task["id"]


async def test_an_outsiders_worker_is_woken_for_a_private_rooms_task_without_learning_it(
    settings: Settings, db: Database, tokens: Users
) -> None:
    async with hub(settings, db, tokens) as world:
        clients = world["clients"]
        root, bob, dave = clients["root"], clients["bob"], clients["dave"]
        await private_room(clients)
        daves_worker = (await dave.post("/workers")).json()["id"]
        shared = await root.register("@global", name="Shared", schema={}, worker_id=daves_worker)
        async with SocketProbe("dave") as probe:
            await probe.connect(world["url"], world["tokens"]["dave"])
            await probe.join_job_room(shared["full_name"], daves_worker)
            start = probe.mark()
            secret_task = await bob.submit(shared["full_name"], ROOM)
            lobby_task = await bob.submit(shared["full_name"], "lobby")
            await probe.wait_for(
                "task_available", lambda data: data["task_id"] == lobby_task["id"], after=start
            )
            hints = [data for event, data in probe.between(start) if event == "task_available"]
            # The lobby's hint names its task; the private room's names only the job, in
            # the shape zndraw-joblib's workers read (and are woken by).
            assert hints == [
                {"job_name": shared["full_name"], "room_id": "", "task_id": ""},
                {"job_name": shared["full_name"], "room_id": "lobby", "task_id": lobby_task["id"]},
            ]
            assert TaskAvailable.model_validate(hints[0]).job_name == shared["full_name"]
            assert secret_task["id"] not in str(probe.between(start))
