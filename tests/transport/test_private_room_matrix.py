"""Private rooms: every REST door by every role, expected from the one rule.

docs/protocol.md, "Private rooms": in a private room a viewer reads, a member also submits,
cancels and re-runs their own tasks and runs workers, a maintainer also acts on anyone's
tasks, registers jobs and providers and manages the room; superusers act everywhere.
Who may not read the room gets 404 (a task door: ``task-not-found``), who may read but not
act 403.

The expected answer of every call is computed from ``rules.authorisation`` (the roles x
actions table), never written here; the action each room door asks is the one its
endpoint declares (``room=``). Every endpoint of the hub must be in one of the tables
below, so a new endpoint without a rule fails ``test_every_endpoint_has_a_rule``.

Each call builds a fresh world (in-process app, both backends): alice registers
``secret:modifiers:Rotate`` and a provider while the room is open, makes it private (she
becomes its maintainer), adds bob as a member, carol as a viewer and the group ``lab`` as a
viewer; bob and alice each submit a pending task and a task they cancel. dave is an
outsider, root a superuser. A refused call changes nothing the superuser can see.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

import httpx
import pytest

from taskhub.embedding import ENDPOINTS
from taskhub.rules.authorisation import (
    MemberKind,
    PrivateRoom,
    RoomAction,
    RoomRole,
    may_in_room,
)
from taskhub.rules.records import Principal
from taskhub.services.users import create_user
from taskhub.store.database import Database
from tests.support.api import ApiClient, assert_problem

ROOM = "secret"
JOB = f"{ROOM}:modifiers:Rotate"
PROVIDER = f"{ROOM}:frames:Frame"
ROLES = ("alice", "bob", "carol", "dave", "root")
SUCCESS = (200, 201, 202, 204)


@dataclass(frozen=True)
class Call:
    """One request; ``path`` and ``body`` are formatted with the world's ids. ``action``:
    what the room rule is asked; ``others``: asked instead of a caller who is not
    ``owner`` (a task door acting on someone's task). ``ok``: the answers of an allowed
    caller."""

    method: str
    path: str
    body: dict[str, Any] | None = None
    ok: tuple[int, ...] = (200,)
    action: RoomAction | None = None
    others: RoomAction | None = None
    owner: str | None = None
    headers: dict[str, str] | None = None
    task_door: bool = False


# The room doors, by the endpoint (method and path) they call: the action is the one the
# endpoint declares.
ROOM_DOORS: dict[tuple[str, str], Call] = {
    ("GET", "/rooms/{room_id:room}"): Call("GET", f"/rooms/{ROOM}"),
    ("PUT", "/rooms/{room_id:room}"): Call("PUT", f"/rooms/{ROOM}", {"visibility": "private"}),
    ("GET", "/rooms/{room_id:room}/members"): Call("GET", f"/rooms/{ROOM}/members"),
    ("PUT", "/rooms/{room_id:room}/members/{kind}/{subject}"): Call(
        "PUT", f"/rooms/{ROOM}/members/group/physics", {"role": "viewer"}, ok=(201,)
    ),
    ("DELETE", "/rooms/{room_id:room}/members/{kind}/{subject}"): Call(
        "DELETE", f"/rooms/{ROOM}/members/group/lab", ok=(204,)
    ),
    ("GET", "/rooms/{room_id:room}/stats"): Call("GET", f"/rooms/{ROOM}/stats"),
    ("POST", "/rooms/{room_id:room}/tasks/bulk"): Call(
        "POST",
        f"/rooms/{ROOM}/tasks/bulk",
        {"action": "cancel", "ids": ["{pending_by_bob}"]},
    ),
    ("POST", "/rooms/{room_id:room}/tasks/{full_name:path}"): Call(
        "POST", f"/rooms/{ROOM}/tasks/{JOB}", {"payload": {}}, ok=(202,)
    ),
    ("GET", "/rooms/{room_id:room}/tasks"): Call("GET", f"/rooms/{ROOM}/tasks"),
    ("GET", "/rooms/{room_id:room}/jobs/{full_name:path}/tasks"): Call(
        "GET", f"/rooms/{ROOM}/jobs/{JOB}/tasks"
    ),
    # A live job: a worker of the caller's joins it (a new job: ``register``, below).
    ("PUT", "/rooms/{room_id:room}/jobs"): Call(
        "PUT",
        f"/rooms/{ROOM}/jobs",
        {"category": "modifiers", "name": "Rotate", "schema": {}},
        ok=(200, 201),
    ),
    ("GET", "/rooms/{room_id:room}/jobs"): Call("GET", f"/rooms/{ROOM}/jobs"),
    ("GET", "/rooms/{room_id:room}/jobs/{full_name:path}"): Call(
        "GET", f"/rooms/{ROOM}/jobs/{JOB}"
    ),
    ("GET", "/rooms/{room_id:room}/workers"): Call("GET", f"/rooms/{ROOM}/workers"),
    ("PUT", "/rooms/{room_id:room}/providers"): Call(
        "PUT", f"/rooms/{ROOM}/providers", {"category": "frames", "name": "Other"}, ok=(201,)
    ),
    ("GET", "/rooms/{room_id:room}/providers"): Call("GET", f"/rooms/{ROOM}/providers"),
    ("GET", "/rooms/{room_id:room}/providers/{full_name:path}/info"): Call(
        "GET", f"/rooms/{ROOM}/providers/{PROVIDER}/info"
    ),
    # Nobody answers the read: an allowed caller waits 0 s for it.
    ("GET", "/rooms/{room_id:room}/providers/{full_name:path}"): Call(
        "GET", f"/rooms/{ROOM}/providers/{PROVIDER}", ok=(504,), headers={"Prefer": "wait=0"}
    ),
}

# The doors naming a task: the rule is asked about the task's room.
TASK_DOORS: dict[tuple[str, str], list[Call]] = {
    ("GET", "/tasks/{task_id}"): [
        Call("GET", "/tasks/{pending_by_bob}", action=RoomAction.READ, task_door=True),
        Call(
            "GET",
            "/tasks/{pending_by_bob}",
            action=RoomAction.READ,
            headers={"Prefer": "wait=1"},
            task_door=True,
        ),
    ],
    ("GET", "/tasks/{task_id}/place"): [
        Call("GET", "/tasks/{pending_by_bob}/place", action=RoomAction.READ, task_door=True)
    ],
    ("GET", "/tasks/{task_id}/logs"): [
        Call("GET", "/tasks/{pending_by_bob}/logs", action=RoomAction.READ, task_door=True)
    ],
    ("POST", "/tasks/{task_id}/rerun"): [
        Call(
            "POST",
            "/tasks/{cancelled_by_bob}/rerun",
            ok=(202,),
            action=RoomAction.SUBMIT,
            others=RoomAction.MANAGE,
            owner="bob",
            task_door=True,
        ),
    ],
    ("PATCH", "/tasks/{task_id}"): [
        Call(
            "PATCH",
            "/tasks/{pending_by_bob}",
            {"status": "cancelled"},
            action=RoomAction.SUBMIT,
            others=RoomAction.MANAGE,
            owner="bob",
            task_door=True,
        ),
        Call(
            "PATCH",
            "/tasks/{pending_by_alice}",
            {"status": "cancelled"},
            action=RoomAction.SUBMIT,
            others=RoomAction.MANAGE,
            owner="alice",
            task_door=True,
        ),
    ],
}

# Refinements a door makes inside its handler.
MORE_CALLS = [
    Call(  # a new job is registered, not joined
        "PUT",
        f"/rooms/{ROOM}/jobs",
        {"category": "modifiers", "name": "New", "schema": {}},
        ok=(201,),
        action=RoomAction.REGISTER,
    ),
]

# The doors that name no room, and why no room rule applies to them.
ROOMLESS = {
    ("GET", "/users/me"): "the caller itself",
    ("POST", "/workers"): "a worker is its owner's; it serves rooms through registrations",
    ("GET", "/workers"): "ids, owners, counts: no room, job or task of any room",
    ("PATCH", "/workers/{worker_id}"): "its owner's (403 else)",
    ("DELETE", "/workers/{worker_id}"): "its owner's (403 else)",
    ("POST", "/tasks/claim"): "a claim leaves alone the private rooms its owner may not work in",
    ("POST", "/tasks/{task_id}/logs"): "the run's claim token proves the writer",
    ("DELETE", "/providers/{provider_id}"): "its owner's (403 else)",
    ("POST", "/providers/{provider_id}/results"): "its owner's (403 else)",
}


def room_calls() -> list[Call]:
    declared = {(ep.method, ep.path): ep.room for ep in ENDPOINTS if ep.room is not None}
    calls = [Call(**{**call.__dict__, "action": declared[key]}) for key, call in ROOM_DOORS.items()]
    return calls + [call for calls in TASK_DOORS.values() for call in calls] + MORE_CALLS


def test_every_endpoint_has_a_rule() -> None:
    """A room door is in ``ROOM_DOORS`` (its action is its declaration), a task door in
    ``TASK_DOORS``, any other endpoint in ``ROOMLESS`` with the reason it has no rule."""
    every = {(ep.method, ep.path) for ep in ENDPOINTS}
    declared = {(ep.method, ep.path) for ep in ENDPOINTS if ep.room is not None}
    assert declared == set(ROOM_DOORS), "a room door without a call here, or one undeclared"
    assert every - declared == set(TASK_DOORS) | set(ROOMLESS), "an endpoint without a rule"
    assert not set(TASK_DOORS) & set(ROOMLESS)


@dataclass
class World:
    ids: dict[str, str]  # task, worker and user ids by name
    principals: dict[str, Principal]
    room: PrivateRoom


def expected(world: World, role: str, call: Call) -> int | str:
    """``ok`` when the rule allows, else the status the rule gives."""
    assert call.action is not None
    action = call.action
    if call.others is not None and role != call.owner:
        action = call.others
    principal = world.principals[role]
    if may_in_room(principal, world.room, action):
        return "ok"
    return 404 if not may_in_room(principal, world.room, RoomAction.READ) else 403


CALLS = room_calls()
MATRIX = [
    pytest.param(call, role, id=f"{call.method} {call.path} {call.body or ''} | {role}")
    for call in CALLS
    for role in ROLES
]


async def build_world(db: Database, clients: dict[str, ApiClient]) -> World:
    alice, bob = clients["alice"], clients["bob"]
    worker = (await alice.register(ROOM, schema={}))["worker_id"]
    provider = await alice.put(
        f"/rooms/{ROOM}/providers",
        json={"category": "frames", "name": "Frame", "worker_id": worker},
    )
    assert provider.status_code == 201, provider.text
    made = await alice.put(f"/rooms/{ROOM}", json={"visibility": "private"})
    assert made.status_code == 200, made.text
    assert made.json()["role"] == "maintainer"
    users = {role: (await clients[role].get("/users/me")).json() for role in ROLES}
    for role, as_what in (("bob", "member"), ("carol", "viewer")):
        added = await alice.put(
            f"/rooms/{ROOM}/members/user/{users[role]['id']}", json={"role": as_what}
        )
        assert added.status_code == 201, added.text
    added = await alice.put(f"/rooms/{ROOM}/members/group/lab", json={"role": "viewer"})
    assert added.status_code == 201, added.text
    ids = {"worker": worker}
    for name, client in (("bob", bob), ("alice", alice)):
        ids[f"pending_by_{name}"] = (await client.submit(JOB, ROOM))["id"]
        cancelled = (await client.submit(JOB, ROOM))["id"]
        assert (await client.transition(cancelled, "cancelled")).status_code == 200
        ids[f"cancelled_by_{name}"] = cancelled
    principals = {
        role: Principal(UUID(user["id"]), user["name"], user["is_superuser"])
        for role, user in users.items()
    }
    room = PrivateRoom(
        ROOM,
        {
            (MemberKind.USER, users["alice"]["id"]): RoomRole.MAINTAINER,
            (MemberKind.USER, users["bob"]["id"]): RoomRole.MEMBER,
            (MemberKind.USER, users["carol"]["id"]): RoomRole.VIEWER,
            (MemberKind.GROUP, "lab"): RoomRole.VIEWER,
        },
    )
    return World(ids, principals, room)


@pytest.fixture
async def clients(
    http: httpx.AsyncClient, db: Database, admin: ApiClient, alice: ApiClient, bob: ApiClient
) -> dict[str, ApiClient]:
    _, carol = await create_user(db, "carol")
    _, dave = await create_user(db, "dave")
    return {
        "alice": alice,
        "bob": bob,
        "carol": ApiClient(http, carol),
        "dave": ApiClient(http, dave),
        "root": admin,
    }


def fill(value: Any, ids: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**ids)
    if isinstance(value, dict):
        return {key: fill(item, ids) for key, item in value.items()}
    if isinstance(value, list):
        return [fill(item, ids) for item in value]
    return value


async def snapshot(root: ApiClient) -> dict[str, Any]:
    """What a refused call could have changed, as the superuser sees it."""
    state: dict[str, Any] = {}
    for path in (
        f"/rooms/{ROOM}",
        f"/rooms/{ROOM}/members",
        f"/rooms/{ROOM}/tasks",
        f"/rooms/{ROOM}/jobs",
        f"/rooms/{ROOM}/workers",
        f"/rooms/{ROOM}/providers",
        "/workers",
    ):
        response = await root.get(path, params={"limit": 500})
        assert response.status_code == 200, response.text
        state[path] = response.json()
    for item in state[f"/rooms/{ROOM}/members"]["items"]:
        item.pop("created_at")
    return state


@pytest.mark.parametrize(("call", "role"), MATRIX)
async def test_private_room_matrix(
    call: Call, role: str, db: Database, clients: dict[str, ApiClient]
) -> None:
    world = await build_world(db, clients)
    want = expected(world, role, call)
    before = await snapshot(clients["root"]) if want != "ok" else None

    kwargs: dict[str, Any] = {"headers": call.headers or {}}
    if call.body is not None:
        kwargs["json"] = fill(call.body, world.ids)
    response = await clients[role].request(call.method, fill(call.path, world.ids), **kwargs)

    if want == "ok":
        assert response.status_code in call.ok, response.text
    elif want == 404:
        assert_problem(response, 404, "task-not-found" if call.task_door else "not-found")
        if call.task_door:
            assert ROOM not in response.text  # not even the task's room's name
    else:
        assert_problem(response, 403, "forbidden")
    if before is not None:
        assert await snapshot(clients["root"]) == before, "a refused call changed state"


async def test_an_open_room_is_open_to_everyone(clients: dict[str, ApiClient]) -> None:
    """Nothing changes for open rooms: every signed-in user reads and acts there."""
    alice, dave = clients["alice"], clients["dave"]
    job = await alice.register("lobby", schema={})
    task = await dave.submit(job["full_name"], "lobby")
    room = await dave.get("/rooms/lobby")
    assert room.json() == {
        "room_id": "lobby",
        "visibility": "open",
        "role": None,
        "actions": [action.value for action in RoomAction],
    }
    assert (await alice.get(f"/tasks/{task['id']}")).status_code == 200
    assert (await dave.transition(task["id"], "cancelled")).status_code == 200
