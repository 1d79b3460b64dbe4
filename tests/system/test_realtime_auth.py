"""Socket.IO authentication and room authorisation on a real server (SQLite and PostgreSQL).

PROTOCOL.md: an unauthenticated connect is refused; ``join_job_room`` only for a worker
the socket's user owns; ``room_join`` acknowledges ``{"room_id"}`` or a problem object.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import socketio

from tests.support.api import ApiClient
from tests.support.server import HubServer
from tests.support.sockets import SocketProbe, assert_problem_ack

ROOM = "lab"
JOB = f"{ROOM}:modifiers:R"


@pytest.fixture
def alice_token(hub_server: HubServer) -> str:
    return hub_server.create_user("alice")


@pytest.fixture
def bob_token(hub_server: HubServer) -> str:
    return hub_server.create_user("bob")


@pytest.fixture
async def http(hub_server: HubServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(
        base_url=hub_server.base_url, timeout=15.0, trust_env=False
    ) as client:
        yield client


# A refusal is the server's answer (a ``connect_error``), not the client giving up.
REFUSAL_LIMIT = 2.0


async def refuse(base_url: str, auth: Any) -> None:
    """Connecting with ``auth`` fails promptly, with a ``connect_error`` from the server."""
    client = socketio.AsyncClient(reconnection=False)
    refusals: list[Any] = []

    async def on_connect_error(data: Any = None) -> None:
        refusals.append(data)

    client.on("connect_error", on_connect_error)
    started = time.monotonic()
    with pytest.raises(socketio.exceptions.ConnectionError):
        await client.connect(base_url, auth=auth, transports=["websocket"], wait_timeout=5)
    elapsed = time.monotonic() - started
    await client.disconnect()
    assert not client.connected, auth
    assert refusals, f"auth={auth!r}: no refusal from the server (gave up after {elapsed:.1f}s)"
    assert elapsed < REFUSAL_LIMIT, (auth, elapsed)


async def test_connect_without_a_valid_token_is_refused(
    hub_server: HubServer, alice_token: str
) -> None:
    for auth in (None, {}, {"token": ""}, {"token": "th_not-a-real-token"}):
        await refuse(hub_server.base_url, auth)

    async with SocketProbe("alice") as accepted:  # the same server takes a valid token
        await accepted.connect(hub_server.base_url, alice_token)
        assert accepted.client.connected
        await accepted.room_join(ROOM)


async def test_connect_with_a_token_that_is_not_a_string_is_refused(
    hub_server: HubServer,
) -> None:
    """Hostile ``auth`` payloads get the same clean refusal, not a server-side crash."""
    for auth in ({"token": 42}, {"token": ["th_x"]}, {"token": {"value": "th_x"}}, "th_x"):
        await refuse(hub_server.base_url, auth)


async def test_join_job_room_is_only_for_the_sockets_own_workers(
    hub_server: HubServer, http: httpx.AsyncClient, alice_token: str, bob_token: str
) -> None:
    """403 for another user's worker, 404 for an unknown one: the socket stays outside."""
    alice, admin = ApiClient(http, alice_token), ApiClient(http, hub_server.admin_token)
    worker_id = (await alice.register(room=ROOM, name="R", schema={}))["worker_id"]
    url = hub_server.base_url
    async with SocketProbe("bob") as bob, SocketProbe("alice-worker") as worker:
        await bob.connect(url, bob_token)
        await bob.room_join(ROOM)
        forbidden = await bob.call("join_job_room", {"job_name": JOB, "worker_id": worker_id})
        assert_problem_ack(forbidden, 403, "forbidden")
        unknown = await bob.call("join_job_room", {"job_name": JOB, "worker_id": str(uuid.uuid4())})
        assert_problem_ack(unknown, 404, "worker-not-found")
        malformed_job = await bob.call(
            "join_job_room", {"job_name": "no-colons", "worker_id": worker_id}
        )
        assert_problem_ack(malformed_job, 404, "job-not-found")
        bad_id = await bob.call("join_job_room", {"job_name": JOB, "worker_id": "nope"})
        assert_problem_ack(bad_id, 422, "validation-error")
        missing = await bob.call("join_job_room", {"worker_id": worker_id})
        assert_problem_ack(missing, 422, "validation-error")

        await worker.connect(url, alice_token)  # the owner's join is the positive control
        await worker.join_job_room(JOB, worker_id)

        task = await admin.submit(JOB, room=ROOM)
        await worker.wait_for("task_available", lambda data: data["task_id"] == task["id"])
        # Sentinel: an event bob gets after the submit's events.
        assert (await admin.transition(task["id"], "cancelled")).status_code == 200
        await bob.wait_status(task["id"], "cancelled")
        assert [event for event, _ in bob.between(0)] == [
            "task_status_event",
            "task_status_event",
        ]


INVALID_ROOM_JOINS: list[tuple[dict[str, Any], int, str]] = [
    ({"room_id": "a@b"}, 400, "invalid-room-id"),
    ({"room_id": "a:b"}, 400, "invalid-room-id"),
    ({"room_id": "@elsewhere"}, 400, "invalid-room-id"),
    ({"room_id": "r" * 129}, 400, "invalid-room-id"),
    ({}, 422, "validation-error"),
    ({"room_id": 7}, 422, "validation-error"),
]


async def test_room_join_acknowledges_valid_rooms_and_refuses_invalid_ones(
    hub_server: HubServer, alice_token: str
) -> None:
    async with SocketProbe("alice") as probe:
        await probe.connect(hub_server.base_url, alice_token)
        for data, status, slug in INVALID_ROOM_JOINS:
            assert_problem_ack(await probe.call("room_join", data), status, slug)
        for valid in ("lab", "@global", "r" * 128):
            assert await probe.call("room_join", {"room_id": valid}) == {"room_id": valid}


async def test_leaving_rooms_stops_their_events(
    hub_server: HubServer, http: httpx.AsyncClient, alice_token: str
) -> None:
    """After ``room_leave`` / ``leave_job_room`` the socket hears only the rooms it kept."""
    alice, admin = ApiClient(http, alice_token), ApiClient(http, hub_server.admin_token)
    worker_id = (await alice.register(room=ROOM, name="R", schema={}))["worker_id"]
    async with SocketProbe("alice") as probe:
        await probe.connect(hub_server.base_url, alice_token)
        await probe.room_join(ROOM)
        await probe.room_join("kept")
        await probe.join_job_room(JOB, worker_id)
        assert await probe.call("room_leave", {"room_id": ROOM}) == {"room_id": ROOM}
        left = await probe.call("leave_job_room", {"job_name": JOB, "worker_id": worker_id})
        assert left == {"job_name": JOB}

        await admin.submit(JOB, room=ROOM)  # room:lab and jobs:lab:modifiers:R: not heard
        await alice.register(room="kept", name="R", schema={})  # sentinel in room:kept
        await probe.wait_for("jobs_invalidate")
        assert probe.between(0) == [("jobs_invalidate", {})]
