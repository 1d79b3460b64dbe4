"""Socket.IO authorisation by role, on a real ``taskhub serve`` process (SQLite).

docs/protocol.md, "Socket.IO": an unauthenticated connect is refused; ``join_job_room`` only
for a worker the socket's user may act for (its owner; a superuser may act for any worker,
as on REST); ``room_join`` of any valid room is open to every authenticated user. Each
join's effect is checked too: a refused ``join_job_room`` delivers no ``task_available``,
an accepted one does, and a joined room delivers its ``task_status_event``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import socketio

from tests.support.api import PREFIX
from tests.support.server import HubServer, running_hub
from tests.support.sockets import SocketProbe, assert_problem_ack

ROOM = "sockets"


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    directory: Path = tmp_path_factory.mktemp("socket-authorization")
    with running_hub("sqlite", directory) as server:
        yield server


@pytest.fixture(scope="module")
def tokens(hub: HubServer) -> dict[str, str]:
    return {
        "alice": hub.create_user("alice"),
        "bob": hub.create_user("bob"),
        "admin": hub.admin_token,
    }


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_anonymous_connect_is_refused_and_a_user_is_accepted(
    hub: HubServer, tokens: dict[str, str]
) -> None:
    async with SocketProbe("anonymous") as anonymous:
        with pytest.raises(socketio.exceptions.ConnectionError):
            await anonymous.connect(hub.base_url, None, within=5.0)
        assert not anonymous.client.connected
    async with SocketProbe("bob") as bob:
        await bob.connect(hub.base_url, tokens["bob"], within=5.0)
        assert bob.client.connected


@pytest.mark.parametrize(("role", "may_join"), [("bob", False), ("alice", True), ("admin", True)])
async def test_join_job_room_for_alices_worker(
    hub: HubServer, tokens: dict[str, str], role: str, may_join: bool
) -> None:
    job = f"{ROOM}:modifiers:For{role.capitalize()}"  # a job (and worker) of its own per row
    async with httpx.AsyncClient(
        base_url=hub.base_url + PREFIX, timeout=10.0, trust_env=False
    ) as http:
        registered = await http.put(
            f"/rooms/{ROOM}/jobs",
            json={"category": "modifiers", "name": f"For{role.capitalize()}", "schema": {}},
            headers=headers(tokens["alice"]),
        )
        assert registered.status_code == 201, registered.text
        worker_id = registered.json()["worker_id"]

        async with SocketProbe(role) as probe:
            await probe.connect(hub.base_url, tokens[role])
            await probe.room_join(ROOM)  # any authenticated user may watch the room
            ack = await probe.call("join_job_room", {"job_name": job, "worker_id": worker_id})
            if may_join:
                assert ack == {"job_name": job, "worker_id": worker_id}, ack
            else:
                assert_problem_ack(ack, 403, "forbidden")

            start = probe.mark()
            submitted = await http.post(
                f"/rooms/{ROOM}/tasks/{job}", json={"payload": {}}, headers=headers(tokens["bob"])
            )
            assert submitted.status_code == 202, submitted.text
            task_id = submitted.json()["id"]
            await probe.wait_status(task_id, "pending", after=start)
            if may_join:
                available = await probe.wait_for(
                    "task_available", lambda d: d.get("task_id") == task_id, after=start
                )
                assert available.data == {"job_name": job, "room_id": ROOM, "task_id": task_id}
            # Sentinel: a later event on the same socket; nothing for the job room before it.
            cancelled = await http.patch(
                f"/tasks/{task_id}", json={"status": "cancelled"}, headers=headers(tokens["bob"])
            )
            assert cancelled.status_code == 200, cancelled.text
            sentinel = await probe.wait_status(task_id, "cancelled", after=start)
            job_room_events = [
                data
                for event, data in probe.between(start, sentinel.index)
                if event == "task_available"
            ]
            assert len(job_room_events) == (1 if may_join else 0), job_room_events


@pytest.mark.parametrize("role", ["bob", "alice", "admin"])
async def test_room_join_is_open_to_every_authenticated_user(
    hub: HubServer, tokens: dict[str, str], role: str
) -> None:
    async with SocketProbe(role) as probe:
        await probe.connect(hub.base_url, tokens[role])
        for room in ("anywhere", "@global", "@internal", f"room-of-{role}"):
            await probe.room_join(room)
        assert_problem_ack(
            await probe.call("room_join", {"room_id": "a:b"}), 400, "invalid-room-id"
        )
