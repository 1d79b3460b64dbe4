"""Taskhub's REST API through the example host (examples/host_app), in process: the host's
JWTs sign in, its rooms and their edit lock decide who may write, Taskhub's own tokens
still work beside them, and the host's own routes answer as the host defines them."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import jwt
import pytest
from sqlalchemy import func, select

from examples.host_app.accounts import USER_NAMESPACE
from examples.host_app.main import Host
from taskhub.store.tables import task_table
from tests.conftest import Users
from tests.embedding.hosts import ADMIN_PASSWORD, SECRET, assert_host_problem, bearer, sign_in
from tests.support.api import ApiClient, assert_problem
from tests.support.waiting import eventually

ROOM = "lab"


async def tasks_stored(host: Host) -> int:
    async with host.taskhub.hub.db.read() as conn:
        return int(await conn.scalar(select(func.count()).select_from(task_table)) or 0)


async def new_room(http: httpx.AsyncClient, token: str, room: str = ROOM) -> None:
    created = await http.post(f"/rooms/{room}", headers=bearer(token))
    assert created.status_code == 201, created.text


@pytest.fixture
async def alice(http: httpx.AsyncClient) -> ApiClient:
    """Alice signed in to the host, with the room ``lab`` she created."""
    token = await sign_in(http, "alice")
    await new_room(http, token)
    return ApiClient(http, token)


async def lock(http: httpx.AsyncClient, api: ApiClient, room: str = ROOM) -> str:
    locked = await http.post(f"/rooms/{room}/lock", headers=api.headers)
    assert locked.status_code == 201, locked.text
    return str(locked.json()["lock_token"])


async def test_a_host_jwt_signs_in_to_taskhub_as_the_hosts_user(alice: ApiClient) -> None:
    me = await alice.get("/users/me")
    assert me.status_code == 200, me.text
    assert me.json()["name"] == "alice"
    assert me.json()["id"] == str(uuid.uuid5(USER_NAMESPACE, "alice"))
    job = await alice.register(room=ROOM, name="Rotate")
    task = await alice.submit(job["full_name"], room=ROOM, payload={"angle": 1.0})
    assert task["submitted_by"] == me.json()["id"]


async def test_the_superuser_of_the_host_is_taskhubs_superuser(http: httpx.AsyncClient) -> None:
    root = ApiClient(http, await sign_in(http, "admin", ADMIN_PASSWORD))
    job = await root.register(room="@global", name="Everywhere")
    assert job["full_name"] == "@global:modifiers:Everywhere"
    alice = ApiClient(http, await sign_in(http, "alice"))
    refused = await alice.put(
        "/rooms/@global/jobs", json={"category": "modifiers", "name": "Mine", "schema": {}}
    )
    assert_problem(refused, 403, "forbidden")


def host_jwt(key: str = SECRET, audience: str = "host-app", expires: int = 2**40) -> str:
    claims = {"sub": str(uuid.uuid4()), "name": "x", "aud": audience, "exp": expires}
    return jwt.encode(claims, key, algorithm="HS256")


@pytest.mark.parametrize(
    "token",
    ["not-a-token", host_jwt(key="k" * 40), host_jwt(audience="another"), host_jwt(expires=1)],
    ids=["garbage", "another-key", "another-audience", "expired"],
)
async def test_a_token_the_host_did_not_issue_is_401(http: httpx.AsyncClient, token: str) -> None:
    assert_problem(await ApiClient(http, token).get("/users/me"), 401, "unauthorized")
    refused = await http.post(f"/rooms/{ROOM}", headers=bearer(token))
    assert_host_problem(refused, 401, "unauthorized")


async def test_taskhubs_own_tokens_work_beside_the_hosts(
    http: httpx.AsyncClient, alice: ApiClient, tokens: Users
) -> None:
    job = await alice.register(room=ROOM, name="Rotate")
    bob = ApiClient(http, tokens.bob)  # a th_ token: no host account at all
    task = await bob.submit(job["full_name"], room=ROOM)
    assert (await bob.task(task["id"]))["status"] == "pending"
    elsewhere = await bob.post(f"/rooms/elsewhere/tasks/{job['full_name']}", json={"payload": {}})
    assert_problem(elsewhere, 404, "room-not-found")  # the host's rooms bind every caller


async def test_a_locked_room_refuses_writes_without_its_lock_token_and_nothing_changes(
    host: Host, http: httpx.AsyncClient, alice: ApiClient
) -> None:
    job = await alice.register(room=ROOM, name="Rotate")
    key = await lock(http, alice)
    before = await tasks_stored(host)
    for headers in ({}, {"Lock-Token": "a-guess"}):
        refused = await alice.post(
            f"/rooms/{ROOM}/tasks/{job['full_name']}", json={"payload": {}}, headers=headers
        )
        body = assert_problem(refused, 423, "room-locked")
        assert "Lock-Token" in body["detail"]
    registering = await alice.put(
        f"/rooms/{ROOM}/jobs", json={"category": "modifiers", "name": "Other", "schema": {}}
    )
    assert_problem(registering, 423, "room-locked")
    assert await tasks_stored(host) == before
    assert (await alice.get(f"/rooms/{ROOM}/tasks")).status_code == 200  # reading stays open

    with_key = await alice.post(
        f"/rooms/{ROOM}/tasks/{job['full_name']}",
        json={"payload": {}},
        headers={"Lock-Token": key},
    )
    assert with_key.status_code == 202, with_key.text
    assert await tasks_stored(host) == before + 1


async def test_a_room_the_host_does_not_know_is_404(http: httpx.AsyncClient) -> None:
    alice = ApiClient(http, await sign_in(http, "alice"))
    for answer in (
        await alice.get("/rooms/nowhere/jobs"),
        await alice.get("/rooms/nowhere/tasks"),
        await alice.put(
            "/rooms/nowhere/jobs", json={"category": "modifiers", "name": "R", "schema": {}}
        ),
    ):
        body = assert_problem(answer, 404, "room-not-found")
        assert "POST /rooms/nowhere" in body["detail"]


async def test_the_hosts_sign_in_failing_is_503_and_knowing_nobody_is_401(
    host: Host, alice: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(_token: str | None) -> Any:
        raise ConnectionError("the host's user store is unreachable")

    monkeypatch.setattr(host.accounts, "verify", unreachable)
    assert_problem(await alice.get("/users/me"), 503, "identity-unavailable")
    monkeypatch.setattr(host.accounts, "verify", lambda _token: None)
    assert_problem(await alice.get("/users/me"), 401, "unauthorized")


async def test_the_room_registry_failing_is_503_and_nothing_changes(
    host: Host, alice: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await alice.register(room=ROOM, name="Rotate")
    before = await tasks_stored(host)

    async def unreachable(_room_id: str) -> Any:
        raise ConnectionError("the host's room store is unreachable")

    monkeypatch.setattr(host.rooms, "get", unreachable)
    refused = await alice.post(f"/rooms/{ROOM}/tasks/{job['full_name']}", json={"payload": {}})
    assert_problem(refused, 503, "room-policy-unavailable")
    assert await tasks_stored(host) == before


async def test_the_hosts_own_routes_answer_as_the_host_defines_them(
    http: httpx.AsyncClient, alice: ApiClient
) -> None:
    assert (await http.get("/healthz")).json() == {"status": "ok"}
    page = await http.get("/")
    assert page.status_code == 200 and "task_status_event" in page.text
    client = await http.get("/vendor/socket.io/socket.io.esm.min.js")
    assert client.status_code == 200, "the Socket.IO client the page imports"
    wrong = await http.post("/auth/login", json={"name": "admin", "password": "guess"})
    assert_host_problem(wrong, 401, "unauthorized")
    shown = await http.get(f"/rooms/{ROOM}", headers=alice.headers)
    assert shown.json() == {"id": ROOM, "locked": False}
    again = await http.post(f"/rooms/{ROOM}", headers=alice.headers)
    assert_host_problem(again, 409, "room-exists")
    missing = await http.get("/rooms/nowhere", headers=alice.headers)
    assert_host_problem(missing, 404, "room-not-found")
    bad = await http.post("/rooms/bad:name", headers=alice.headers)
    assert_host_problem(bad, 422, "invalid-request")

    key = await lock(http, alice)
    relock = await http.post(f"/rooms/{ROOM}/lock", headers=alice.headers)
    assert_host_problem(relock, 423, "room-locked")
    guessed = await http.delete(
        f"/rooms/{ROOM}/lock", headers={**alice.headers, "Lock-Token": "a-guess"}
    )
    assert_host_problem(guessed, 423, "room-locked")
    unlocked = await http.delete(
        f"/rooms/{ROOM}/lock", headers={**alice.headers, "Lock-Token": key}
    )
    assert unlocked.status_code == 204
    assert (await http.get(f"/rooms/{ROOM}", headers=alice.headers)).json()["locked"] is False


async def test_the_host_is_told_when_a_task_ends(host: Host, alice: ApiClient) -> None:
    job = await alice.register(room=ROOM, name="Rotate")
    task = await alice.submit(job["full_name"], room=ROOM)
    assert (await alice.claim(job["worker_id"]) or {})["id"] == task["id"]
    assert (await alice.transition(task["id"], "running")).status_code == 200
    assert not host.notices.ended
    assert (await alice.transition(task["id"], "completed", result=7)).status_code == 200
    await eventually(lambda: host.notices.ended, 10, "the host told of the ended task")
    [ended] = host.notices.ended
    assert (str(ended.id), ended.status.value, ended.room_id) == (task["id"], "completed", ROOM)


async def test_the_host_is_told_when_a_worker_goes_with_its_jobs(
    host: Host, alice: ApiClient
) -> None:
    job = await alice.register(room=ROOM, name="Rotate")
    assert (await alice.delete(f"/workers/{job['worker_id']}")).status_code == 204
    await eventually(lambda: host.notices.gone, 10, "the host told of the worker gone")
    [gone] = host.notices.gone
    assert (str(gone.worker_id), gone.jobs, gone.providers) == (
        job["worker_id"],
        (job["full_name"],),
        (),
    )
