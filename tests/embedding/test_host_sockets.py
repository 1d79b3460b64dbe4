"""The example host's one Socket.IO server, served by uvicorn in process: the host's own
``connect`` lets in only its signed-in users, its own ``room_join`` answers the host's way
and also lets the socket watch the room's tasks (``EmbeddedHub.watch_room``); Taskhub's
events (``join_job_room`` …) are there beside them."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import socketio

from examples.host_app.main import Host
from tests.conftest import Users
from tests.embedding.hosts import bearer, sign_in
from tests.realtime.hubs import served
from tests.support.api import ApiClient
from tests.support.sockets import SocketProbe, assert_task_status_payload

ROOM = "lab"


@pytest.fixture
async def url(host: Host) -> AsyncIterator[str]:
    async with served(host.asgi) as base_url:
        yield base_url


@pytest.fixture
async def web(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, timeout=10, trust_env=False) as client:
        yield client


@pytest.fixture
async def alice(web: httpx.AsyncClient) -> str:
    """Alice's host JWT; she created the room ``lab``."""
    token = await sign_in(web, "alice")
    assert (await web.post(f"/rooms/{ROOM}", headers=bearer(token))).status_code == 201
    return token


@pytest.mark.parametrize("who", ["nobody", "a Taskhub token"])
async def test_the_hosts_connect_refuses_sockets_without_a_host_jwt(
    url: str, tokens: Users, who: str
) -> None:
    token = None if who == "nobody" else tokens.alice
    refusals: list[Any] = []
    async with SocketProbe(who) as probe:
        probe.client.on("connect_error", refusals.append)
        with pytest.raises(socketio.exceptions.ConnectionError):
            await probe.connect(url, token)
    assert refusals == [
        {"message": "Sign in first (POST /auth/login), then connect with auth={'token': ...}."}
    ]


async def test_the_hosts_room_join_answers_its_way_and_the_socket_watches_the_room(
    url: str, web: httpx.AsyncClient, alice: str
) -> None:
    api = ApiClient(web, alice)
    job = await api.register(room=ROOM, name="Rotate")
    async with SocketProbe("member") as member:
        await member.connect(url, alice)
        unknown = await member.call("room_join", {"room_id": "nowhere"})
        assert (unknown["status"], unknown["type"]) == (404, "/problems/room-not-found")
        invalid = await member.call("room_join", {"room_id": "a:b"})
        assert (invalid["status"], invalid["type"]) == (422, "/problems/invalid-request")
        assert await member.call("room_join", {"room_id": ROOM}) == {
            "room_id": ROOM,
            "locked": False,
        }
        joined = await member.wait_for("member_joined")  # the host's own event
        assert joined.data == {"room_id": ROOM, "name": "alice"}

        task = await api.submit(job["full_name"], room=ROOM)
        assert (await api.claim(job["worker_id"]) or {})["id"] == task["id"]
        assert (await api.transition(task["id"], "running")).status_code == 200
        assert (await api.transition(task["id"], "completed")).status_code == 200
        done = await member.wait_status(task["id"], "completed")
        assert_task_status_payload(done.data)
        statuses = [
            data["status"] for data in member.named("task_status_event") if data["id"] == task["id"]
        ]
        assert statuses == ["pending", "claimed", "running", "completed"]
        told = await member.wait_for("task_ended")  # the host's on_task_ended, to its room
        assert told.data == {"id": task["id"], "status": "completed", "job_name": job["full_name"]}


async def test_a_locked_room_is_watched_and_served_and_taskhubs_events_stay_beside_the_hosts(
    url: str, web: httpx.AsyncClient, alice: str
) -> None:
    """The lock holds back edits (submits, new jobs), not readers nor the workers serving
    what was asked before it."""
    api = ApiClient(web, alice)
    job = await api.register(room=ROOM, name="Rotate")
    locked = await web.post(f"/rooms/{ROOM}/lock", headers=bearer(alice))
    assert locked.status_code == 201, locked.text
    async with SocketProbe("worker") as worker:
        await worker.connect(url, alice)
        watching = await worker.call("room_join", {"room_id": ROOM})
        assert watching == {"room_id": ROOM, "locked": True}
        await worker.join_job_room(job["full_name"], job["worker_id"])
        unknown = await worker.call("no_such_event", {})
        assert unknown["status"] == 404  # Taskhub answers events nobody registered
