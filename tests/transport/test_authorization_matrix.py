"""Who may call what: every REST endpoint by {anonymous, another user, the owner, a superuser}.

docs/protocol.md, "Authentication": every ``/v1`` call needs a valid bearer token (else a 401
problem); a worker is owned by the user who created it, and only that user or a superuser
may heartbeat it, delete it, claim for it, link it to a job, or update the tasks it claimed;
the submitter may cancel their own task; ``@global``/``@internal`` registration is for
superusers; reads are open to any authenticated user.

Each row builds a fresh world (in-process app, both backends): alice registers
``room1:modifiers:Rotate`` (creating her worker), bob submits a task that alice's worker
claims, alice submits one that her worker claims, then alice and bob each submit one that
stays pending. A refused call must change nothing an admin can see.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from tests.support.api import ApiClient, assert_problem

ROOM = "room1"
JOB = f"{ROOM}:modifiers:Rotate"
ROLES = ("anonymous", "bob", "alice", "admin")
SUCCESS = (200, 201, 202, 204)


@dataclass(frozen=True)
class Endpoint:
    """One call; ``path`` and ``body`` are formatted with the world's ids."""

    name: str
    method: str
    path: str
    body: dict[str, Any] | None = None
    # expected status for bob, alice and admin (anonymous is always 401)
    bob: int = 200
    alice: int = 200
    admin: int = 200
    check: Callable[[dict[str, Any], dict[str, str]], None] | None = field(default=None)


def is_page(body: dict[str, Any], _world: dict[str, str]) -> None:
    assert set(body) >= {"items", "total", "limit", "offset"}, body
    assert body["total"] >= 1, body


def task_status(status: str) -> Callable[[dict[str, Any], dict[str, str]], None]:
    def check(body: dict[str, Any], _world: dict[str, str]) -> None:
        assert body["status"] == status, body

    return check


def same_id(key: str) -> Callable[[dict[str, Any], dict[str, str]], None]:
    def check(body: dict[str, Any], world: dict[str, str]) -> None:
        assert body["id"] == world[key], body

    return check


def claimed_by_alices_worker(body: dict[str, Any], world: dict[str, str]) -> None:
    task = body["task"]
    assert task is not None and task["status"] == "claimed", body
    assert task["worker_id"] == world["worker"], body
    assert task["id"] in (world["pending_by_alice"], world["pending_by_bob"]), body


def registered(
    room: str, with_alices_worker: bool = False
) -> Callable[[dict[str, Any], dict[str, str]], None]:
    def check(body: dict[str, Any], world: dict[str, str]) -> None:
        assert body["room_id"] == room and body["full_name"] == f"{room}:modifiers:New", body
        if with_alices_worker:
            assert body["worker_id"] == world["worker"], body
        else:  # a new worker, owned by the caller
            assert body["worker_id"] != world["worker"], body

    return check


def submitted(body: dict[str, Any], _world: dict[str, str]) -> None:
    assert body["status"] == "pending" and body["job_name"] == JOB, body


def is_a_user(body: dict[str, Any], _world: dict[str, str]) -> None:
    assert set(body) == {"id", "name", "is_superuser"}, body


NEW_JOB = {"category": "modifiers", "name": "New", "schema": {}}
ENDPOINTS = [
    Endpoint("who am I", "GET", "/users/me", check=is_a_user),
    Endpoint("create worker", "POST", "/workers", bob=201, alice=201, admin=201),
    Endpoint("list workers", "GET", "/workers", check=is_page),
    Endpoint(
        "heartbeat alice's worker",
        "PATCH",
        "/workers/{worker}",
        bob=403,
        check=same_id("worker"),
    ),
    Endpoint("delete alice's worker", "DELETE", "/workers/{worker}", bob=403, alice=204, admin=204),
    Endpoint(
        "register a room job",
        "PUT",
        "/rooms/room2/jobs",
        NEW_JOB,
        bob=201,
        alice=201,
        admin=201,
        check=registered("room2"),
    ),
    Endpoint(
        "register with alice's worker",
        "PUT",
        "/rooms/room2/jobs",
        {**NEW_JOB, "worker_id": "{worker}"},
        bob=403,
        alice=201,
        admin=201,
        check=registered("room2", with_alices_worker=True),
    ),
    Endpoint(
        "register in @global",
        "PUT",
        "/rooms/@global/jobs",
        NEW_JOB,
        bob=403,
        alice=403,
        admin=201,
        check=registered("@global"),
    ),
    Endpoint(
        "register in @internal",
        "PUT",
        "/rooms/@internal/jobs",
        NEW_JOB,
        bob=403,
        alice=403,
        admin=201,
        check=registered("@internal"),
    ),
    Endpoint("list room jobs", "GET", f"/rooms/{ROOM}/jobs", check=is_page),
    Endpoint("get job", "GET", f"/rooms/{ROOM}/jobs/{JOB}"),
    Endpoint("list job tasks", "GET", f"/rooms/{ROOM}/jobs/{JOB}/tasks", check=is_page),
    Endpoint("list room workers", "GET", f"/rooms/{ROOM}/workers", check=is_page),
    Endpoint("list room tasks", "GET", f"/rooms/{ROOM}/tasks", check=is_page),
    Endpoint(
        "get task",
        "GET",
        "/tasks/{claimed_by_alice}",
        check=same_id("claimed_by_alice"),
    ),
    Endpoint(
        "submit",
        "POST",
        f"/rooms/{ROOM}/tasks/{JOB}",
        {"payload": {"angle": 1}},
        bob=202,
        alice=202,
        admin=202,
        check=submitted,
    ),
    Endpoint(
        "claim for alice's worker",
        "POST",
        "/tasks/claim",
        {"worker_id": "{worker}"},
        bob=403,
        check=claimed_by_alices_worker,
    ),
    Endpoint(
        "start alice's task claimed by her worker",
        "PATCH",
        "/tasks/{claimed_by_alice}",
        {"status": "running"},
        bob=403,
        check=task_status("running"),
    ),
    Endpoint(
        "start bob's task claimed by alice's worker",  # the submitter may only cancel
        "PATCH",
        "/tasks/{claimed_for_bob}",
        {"status": "running"},
        bob=403,
        check=task_status("running"),
    ),
    Endpoint(
        "cancel alice's task claimed by her worker",
        "PATCH",
        "/tasks/{claimed_by_alice}",
        {"status": "cancelled"},
        bob=403,
        check=task_status("cancelled"),
    ),
    Endpoint(
        "cancel bob's task claimed by alice's worker",  # submitter and worker owner both may
        "PATCH",
        "/tasks/{claimed_for_bob}",
        {"status": "cancelled"},
        check=task_status("cancelled"),
    ),
    Endpoint(
        "cancel alice's pending task",
        "PATCH",
        "/tasks/{pending_by_alice}",
        {"status": "cancelled"},
        bob=403,
        check=task_status("cancelled"),
    ),
    Endpoint(
        "cancel bob's pending task",
        "PATCH",
        "/tasks/{pending_by_bob}",
        {"status": "cancelled"},
        alice=403,
        check=task_status("cancelled"),
    ),
    Endpoint(
        "start an unclaimed task",  # nobody but a superuser may; pending→running is invalid
        "PATCH",
        "/tasks/{pending_by_alice}",
        {"status": "running"},
        bob=403,
        alice=403,
        admin=409,
    ),
]


def expected_status(endpoint: Endpoint, role: str) -> int:
    return 401 if role == "anonymous" else getattr(endpoint, role)


MATRIX = [
    pytest.param(endpoint, role, id=f"{endpoint.name} | {role}")
    for endpoint in ENDPOINTS
    for role in ROLES
]


def fill(value: Any, world: dict[str, str]) -> Any:
    if isinstance(value, str):
        return value.format(**world)
    if isinstance(value, dict):
        return {key: fill(item, world) for key, item in value.items()}
    return value


async def build_world(alice: ApiClient, bob: ApiClient) -> dict[str, str]:
    worker = (await alice.register(ROOM))["worker_id"]
    claimed_for_bob = (await bob.submit(JOB, ROOM, {"angle": 0}))["id"]
    assert (await alice.claim(worker))["id"] == claimed_for_bob  # type: ignore[index]
    claimed_by_alice = (await alice.submit(JOB, ROOM, {"angle": 0}))["id"]
    assert (await alice.claim(worker))["id"] == claimed_by_alice  # type: ignore[index]
    return {
        "worker": worker,
        "claimed_for_bob": claimed_for_bob,
        "claimed_by_alice": claimed_by_alice,
        "pending_by_alice": (await alice.submit(JOB, ROOM, {"angle": 0}))["id"],
        "pending_by_bob": (await bob.submit(JOB, ROOM, {"angle": 0}))["id"],
    }


async def snapshot(admin: ApiClient) -> dict[str, Any]:
    """Everything a refused call could have changed, as an admin sees it."""
    state: dict[str, Any] = {}
    for path in (
        "/workers",
        f"/rooms/{ROOM}/tasks",
        f"/rooms/{ROOM}/jobs",
        "/rooms/room2/jobs",
        f"/rooms/{ROOM}/workers",
    ):
        response = await admin.get(path, params={"limit": 500})
        assert response.status_code == 200, response.text
        state[path] = response.json()
    return state


async def call(client: ApiClient, endpoint: Endpoint, world: dict[str, str]) -> httpx.Response:
    kwargs: dict[str, Any] = {}
    if endpoint.body is not None:
        kwargs["json"] = fill(endpoint.body, world)
    return await client.request(endpoint.method, fill(endpoint.path, world), **kwargs)


@pytest.mark.parametrize(("endpoint", "role"), MATRIX)
async def test_authorization_matrix(
    endpoint: Endpoint,
    role: str,
    anonymous: ApiClient,
    bob: ApiClient,
    alice: ApiClient,
    admin: ApiClient,
) -> None:
    world = await build_world(alice, bob)
    clients = {"anonymous": anonymous, "bob": bob, "alice": alice, "admin": admin}
    expected = expected_status(endpoint, role)
    refused = expected not in SUCCESS
    before = await snapshot(admin) if refused else None

    response = await call(clients[role], endpoint, world)

    if expected == 401:
        assert_problem(response, 401, "unauthorized")
    elif expected == 403:
        assert_problem(response, 403, "forbidden")
    elif expected == 409:
        assert_problem(response, 409, "invalid-task-transition")
    else:
        assert response.status_code == expected, response.text
        if expected != 204 and endpoint.check is not None:
            endpoint.check(response.json(), world)
    if refused:
        assert await snapshot(admin) == before, f"a refused {endpoint.name!r} changed state"


async def test_every_endpoint_refuses_a_bad_credential(
    http: httpx.AsyncClient, alice: ApiClient, bob: ApiClient
) -> None:
    world = await build_world(alice, bob)
    impostor = ApiClient(http, None)
    for authorization in ("Bearer th_not-a-real-token", "Bearer ", "Basic YWxpY2U6c2VjcmV0"):
        impostor.headers = {"Authorization": authorization}
        for endpoint in ENDPOINTS:
            response = await call(impostor, endpoint, world)
            assert response.status_code == 401, (authorization, endpoint.name, response.text)
            assert_problem(response, 401, "unauthorized")
