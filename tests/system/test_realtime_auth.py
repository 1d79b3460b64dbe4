"""Socket.IO authentication and room authorisation on a real server (SQLite and PostgreSQL).

docs/protocol.md, "Socket.IO": an unauthenticated connect is refused; ``join_job_room``
only for a worker the socket's user owns; ``room_join`` acknowledges ``{"room_id"}`` or a
problem object.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import pytest
import socketio

from tests.support.api import ApiClient
from tests.support.names import unique
from tests.support.server import HubServer
from tests.support.sockets import SocketProbe, assert_problem_ack

# Sockets' tokens are re-checked as often as HTTP re-reads them.
AUTH_CACHE_SECONDS = 1.0
SERVER_ENV = {"TASKHUB_AUTH_CACHE_SECONDS": str(AUTH_CACHE_SECONDS)}


@pytest.fixture
def alice_token(shared_server: HubServer) -> str:
    return shared_server.create_user(unique("alice"))


@pytest.fixture
def bob_token(shared_server: HubServer) -> str:
    return shared_server.create_user(unique("bob"))


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
    shared_server: HubServer, alice_token: str, lab: str
) -> None:
    for auth in (None, {}, {"token": ""}, {"token": "th_not-a-real-token"}, {"token": "\ud800"}):
        await refuse(shared_server.base_url, auth)

    async with SocketProbe("alice") as accepted:  # the same server takes a valid token
        await accepted.connect(shared_server.base_url, alice_token)
        assert accepted.client.connected
        await accepted.room_join(lab)


async def test_a_socket_whose_token_is_revoked_is_disconnected(
    shared_server: HubServer, alice_token: str, bob_token: str, lab: str
) -> None:
    """Revoking a token ends the sockets that connected with it (within the auth cache's
    lifetime), not only its later HTTP requests; other users' sockets stay."""
    async with SocketProbe("alice") as alice, SocketProbe("bob") as bob:
        for probe, token in ((alice, alice_token), (bob, bob_token)):
            await probe.connect(shared_server.base_url, token)
            await probe.room_join(lab)
        gone = asyncio.Event()
        alice.client.on("disconnect", lambda *_reason: gone.set())
        shared_server.revoke_token(alice_token)
        try:
            await asyncio.wait_for(gone.wait(), 2 * AUTH_CACHE_SECONDS + 3)
        except TimeoutError:
            pytest.fail("the revoked token's socket is still connected")
        assert bob.client.connected
        await bob.room_join(unique("lab"))  # and still served
    await refuse(shared_server.base_url, {"token": alice_token})


async def test_connect_with_a_token_that_is_not_a_string_is_refused(
    shared_server: HubServer,
) -> None:
    """Hostile ``auth`` payloads get the same clean refusal, not a server-side crash."""
    for auth in ({"token": 42}, {"token": ["th_x"]}, {"token": {"value": "th_x"}}, "th_x"):
        await refuse(shared_server.base_url, auth)


async def test_join_job_room_is_only_for_the_sockets_own_workers(
    shared_server: HubServer,
    http: httpx.AsyncClient,
    alice_token: str,
    bob_token: str,
    lab: str,
    job: str,
) -> None:
    """403 for another user's worker or a worker not registered for the job, 404 for an
    unknown one: the socket stays outside."""
    alice, admin = ApiClient(http, alice_token), ApiClient(http, shared_server.admin_token)
    worker_id = (await alice.register(room=lab, name="R", schema={}))["worker_id"]
    url = shared_server.base_url
    async with SocketProbe("bob") as bob, SocketProbe("alice-worker") as worker:
        await bob.connect(url, bob_token)
        await bob.room_join(lab)
        forbidden = await bob.call("join_job_room", {"job_name": job, "worker_id": worker_id})
        assert_problem_ack(forbidden, 403, "forbidden")
        unknown = await bob.call("join_job_room", {"job_name": job, "worker_id": str(uuid.uuid4())})
        assert_problem_ack(unknown, 404, "worker-not-found")
        malformed_job = await bob.call(
            "join_job_room", {"job_name": "no-colons", "worker_id": worker_id}
        )
        assert_problem_ack(malformed_job, 404, "job-not-found")
        bad_id = await bob.call("join_job_room", {"job_name": job, "worker_id": "nope"})
        assert_problem_ack(bad_id, 422, "validation-error")
        missing = await bob.call("join_job_room", {"worker_id": worker_id})
        assert_problem_ack(missing, 422, "validation-error")
        # Bob's own worker, registered for another job only: not a way into this job's
        # wake-ups (they would tell him of tasks in rooms he was never shown).
        bobs = await ApiClient(http, bob_token).register(room=f"{lab}-bob", name="Other", schema={})
        not_served = await bob.call(
            "join_job_room", {"job_name": job, "worker_id": bobs["worker_id"]}
        )
        assert_problem_ack(not_served, 403, "forbidden")
        served = await bob.call(
            "join_job_room", {"job_name": bobs["full_name"], "worker_id": bobs["worker_id"]}
        )
        assert served == {"job_name": bobs["full_name"], "worker_id": bobs["worker_id"]}

        await worker.connect(url, alice_token)  # the owner's join is the positive control
        await worker.join_job_room(job, worker_id)

        task = await admin.submit(job, room=lab)
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
    shared_server: HubServer, alice_token: str
) -> None:
    async with SocketProbe("alice") as probe:
        await probe.connect(shared_server.base_url, alice_token)
        for data, status, slug in INVALID_ROOM_JOINS:
            assert_problem_ack(await probe.call("room_join", data), status, slug)
        for valid in ("lab", "@global", "r" * 128):
            assert await probe.call("room_join", {"room_id": valid}) == {"room_id": valid}


async def test_an_event_sent_with_several_arguments_is_answered_422(
    shared_server: HubServer, alice_token: str, lab: str
) -> None:
    """Every client event gets an acknowledgement, also one with extra arguments."""
    async with SocketProbe("alice") as probe:
        await probe.connect(shared_server.base_url, alice_token)
        for event in ("room_join", "room_leave", "join_job_room", "leave_job_room"):
            ack = await probe.call(event, ({"room_id": lab}, "extra"))
            assert_problem_ack(ack, 422, "validation-error")
        assert await probe.call("room_join", {"room_id": lab}) == {"room_id": lab}


async def test_an_event_the_protocol_does_not_have_is_answered_404(
    shared_server: HubServer, alice_token: str
) -> None:
    """Every client event gets an acknowledgement: an unknown one a 404 naming the events."""
    async with SocketProbe("alice") as probe:
        await probe.connect(shared_server.base_url, alice_token)
        for data in ({"room_id": "lab"}, None, ({"a": 1}, "extra")):
            ack = await probe.call("join_room", data)
            assert_problem_ack(ack, 404, "not-found")
            assert "room_join" in ack["detail"]


async def test_leaving_rooms_stops_their_events(
    shared_server: HubServer, http: httpx.AsyncClient, alice_token: str, lab: str, job: str
) -> None:
    """After ``room_leave`` / ``leave_job_room`` the socket hears only the rooms it kept."""
    kept = unique("kept")
    alice, admin = ApiClient(http, alice_token), ApiClient(http, shared_server.admin_token)
    worker_id = (await alice.register(room=lab, name="R", schema={}))["worker_id"]
    async with SocketProbe("alice") as probe:
        await probe.connect(shared_server.base_url, alice_token)
        await probe.room_join(lab)
        await probe.room_join(kept)
        await probe.join_job_room(job, worker_id)
        assert await probe.call("room_leave", {"room_id": lab}) == {"room_id": lab}
        left = await probe.call("leave_job_room", {"job_name": job, "worker_id": worker_id})
        assert left == {"job_name": job}

        await admin.submit(job, room=lab)  # room:lab and jobs:lab:modifiers:R: not heard
        await alice.register(room=kept, name="R", schema={})  # sentinel in room:kept
        await probe.wait_for("jobs_invalidate")
        assert probe.between(0) == [("jobs_invalidate", {})]


# The documented cap on the rooms one socket is in (README, Socket.IO):
# MAX_ROOMS_PER_SOCKET in app/transport/sockets/handlers.py.
MAX_ROOMS = 256


async def test_a_socket_is_in_at_most_256_rooms_and_a_join_beyond_is_answered_429(
    shared_server: HubServer, http: httpx.AsyncClient, alice_token: str, lab: str, job: str
) -> None:
    """room_join rooms and join_job_room's two rooms count; a re-join counts once and a
    leave frees a place."""
    alice = ApiClient(http, alice_token)
    worker_id = (await alice.register(room=lab, name="R", schema={}))["worker_id"]
    other_job = (await alice.register(room=lab, name="S", schema={}, worker_id=worker_id))[
        "full_name"
    ]
    rooms = [f"{lab}-{i}" for i in range(MAX_ROOMS - 2)]
    async with SocketProbe("alice") as probe:
        await probe.connect(shared_server.base_url, alice_token)
        await probe.join_job_room(job, worker_id)  # jobs:{job} and worker:{worker_id}
        for room in rooms:
            await probe.room_join(room)

        full = await probe.call("room_join", {"room_id": unique("one-more")})
        assert_problem_ack(full, 429, "too-many-rooms")
        assert full["title"] == "Too Many Rooms"
        assert str(MAX_ROOMS) in full["detail"], full
        job_full = await probe.call(
            "join_job_room", {"job_name": other_job, "worker_id": worker_id}
        )
        assert_problem_ack(job_full, 429, "too-many-rooms")

        # Rooms it is already in: no new place taken.
        await probe.room_join(rooms[0])
        await probe.join_job_room(job, worker_id)

        # Leaving frees a place, for one join only.
        assert await probe.call("room_leave", {"room_id": rooms[0]}) == {"room_id": rooms[0]}
        await probe.room_join(lab)
        assert_problem_ack(
            await probe.call("room_join", {"room_id": rooms[0]}), 429, "too-many-rooms"
        )
        left = await probe.call("leave_job_room", {"job_name": job, "worker_id": worker_id})
        assert left == {"job_name": job}
        await probe.join_job_room(other_job, worker_id)  # the worker room still counts once
        assert_problem_ack(
            await probe.call("room_join", {"room_id": rooms[0]}), 429, "too-many-rooms"
        )

        # The refused room's events do not reach the socket; the joined room's do.
        await ApiClient(http, shared_server.admin_token).register(
            room=rooms[0], name="R", schema={}
        )
        await alice.register(room=lab, name="T", schema={})  # sentinel in room:{lab}
        await probe.wait_for("jobs_invalidate")
        assert probe.between(0) == [("jobs_invalidate", {})]


async def test_joins_sent_at_once_cannot_pass_the_room_cap_together(
    shared_server: HubServer, alice_token: str, lab: str
) -> None:
    async with SocketProbe("alice") as probe:
        await probe.connect(shared_server.base_url, alice_token)
        acks = await asyncio.gather(
            *(probe.call("room_join", {"room_id": f"{lab}-{i}"}) for i in range(MAX_ROOMS + 44))
        )
        refused = [ack for ack in acks if "room_id" not in ack]
        assert len(acks) - len(refused) == MAX_ROOMS
        for ack in refused:
            assert_problem_ack(ack, 429, "too-many-rooms")
