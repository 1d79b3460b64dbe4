"""Clients that hang up, against a real server process (SQLite and PostgreSQL).

- A long-poll whose client hung up ends its wait at once. Waits whose clients have gone
  would otherwise stay until their deadline, re-reading the task every few seconds for
  nobody.
- A client that hangs up in the middle of its request body is no internal error: nothing
  is logged as one, and nothing was written."""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass

import httpx
import pytest

from tests.support.api import ApiClient
from tests.support.metrics import Samples
from tests.support.names import unique
from tests.support.server import HubServer

SERVER_ENV = {"TASKHUB_LONG_POLL_MAX_WAIT_SECONDS": "60"}
WAITERS = "taskhub_long_poll_waiters"


async def waiting(http: httpx.AsyncClient) -> float:
    return Samples((await http.get("/metrics")).text).count(WAITERS)


@dataclass
class Lab:
    """A user of the shared server with a job ``R`` in a room of the test's own."""

    token: str
    alice: ApiClient
    room: str


@pytest.fixture
async def lab(shared_server: HubServer, http: httpx.AsyncClient) -> Lab:
    token = shared_server.create_user(unique("alice"))
    alice, room = ApiClient(http, token), unique("lab")
    await alice.register(room=room, name="R", schema={})
    return Lab(token, alice, room)


async def test_a_long_poll_whose_client_hung_up_stops_waiting(
    shared_server: HubServer, http: httpx.AsyncClient, lab: Lab
) -> None:
    token, alice, room = lab.token, lab.alice, lab.room
    task = await alice.submit(f"{room}:modifiers:R", room=room)
    before = await waiting(http)

    async with httpx.AsyncClient(base_url=shared_server.base_url, trust_env=False) as caller:
        polls = [
            asyncio.create_task(
                caller.get(
                    f"/v1/joblib/tasks/{task['id']}",
                    headers={"Authorization": f"Bearer {token}", "Prefer": "wait=60"},
                )
            )
            for _ in range(20)
        ]
        deadline = time.monotonic() + 10
        while await waiting(http) < before + 20:
            assert time.monotonic() < deadline, "the long-polls did not start waiting"
            await asyncio.sleep(0.05)
        for poll in polls:
            poll.cancel()  # the client gives up: its connections close
        await asyncio.gather(*polls, return_exceptions=True)

    deadline = time.monotonic() + 10  # far less than the 60 s they asked to wait
    while await waiting(http) > before:
        assert time.monotonic() < deadline, "the abandoned long-polls are still waiting"
        await asyncio.sleep(0.05)
    samples = Samples((await http.get("/metrics")).text)
    assert samples.count("taskhub_long_poll_seconds_count", {"outcome": "abandoned"}) >= 20
    assert (await alice.task(task["id"]))["status"] == "pending"


async def test_a_client_that_hangs_up_mid_body_is_no_internal_error(
    shared_server: HubServer, lab: Lab
) -> None:
    token, alice, room = lab.token, lab.alice, lab.room
    host, port = shared_server.base_url.removeprefix("http://").split(":")
    request = (
        f"POST /v1/joblib/rooms/{room}/tasks/{room}:modifiers:R HTTP/1.1\r\n"
        f"Host: {host}\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
        '{"pay'
    ).encode()
    for _ in range(5):
        with socket.create_connection((host, int(port))) as hanging_up:
            hanging_up.sendall(request)
    await asyncio.sleep(0.5)  # let the server read what came and notice the hang-ups
    assert (await alice.get(f"/rooms/{room}/tasks")).json()["total"] == 0
    assert "unhandled error" not in shared_server.output()
    assert "ClientDisconnect" not in shared_server.output()
