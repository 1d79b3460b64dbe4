"""Worker presence over Socket.IO on a real server (SQLite and PostgreSQL).

docs/protocol.md, "Leases and heartbeats": when a socket that joined job rooms for a worker
disconnects and the worker does not come back (re-join on another socket, or heartbeat)
within the grace period, the worker is cleaned up as by ``DELETE /workers/{id}``: its
claimed/running tasks fail with "Worker disconnected", its links go, and jobs left orphaned
without pending tasks are soft-deleted.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
import pytest

from tests.support.api import ApiClient, assert_problem
from tests.support.metrics import Samples
from tests.support.names import unique
from tests.support.server import HubServer
from tests.support.sockets import SocketProbe, assert_problem_ack, assert_task_status_payload

GRACE = 1.0
# Long enough that a removal due after GRACE would have happened (and been announced).
BEYOND_GRACE = 2.5 * GRACE
SERVER_ENV = {"TASKHUB_SOCKET_DISCONNECT_GRACE_SECONDS": str(GRACE)}  # for ``shared_server``


@dataclass
class Scene:
    """Alice's worker serving one job (``Doomed``) in a room of the test's own, holding one
    claimed task."""

    server: HubServer
    room: str
    alice_token: str
    admin: ApiClient
    alice: ApiClient
    worker_id: str
    task_id: str
    probes: list[SocketProbe] = field(default_factory=list)

    @property
    def doomed(self) -> str:
        return f"{self.room}:modifiers:Doomed"

    @property
    def busy(self) -> str:
        return f"{self.room}:modifiers:Busy"

    async def connect(self, name: str, token: str) -> SocketProbe:
        """A connected probe, disconnected at the end of the test whatever happens."""
        probe = SocketProbe(name)
        self.probes.append(probe)
        await probe.connect(self.server.base_url, token)
        return probe

    async def worker_ids(self) -> set[str]:
        response = await self.admin.get("/workers", params={"limit": 500})
        assert response.status_code == 200, response.text
        return {item["id"] for item in response.json()["items"]}

    async def connect_worker(self, name: str, *jobs: str) -> SocketProbe:
        probe = await self.connect(name, self.alice_token)
        for job in jobs:
            await probe.join_job_room(job, self.worker_id)
        return probe

    async def connected_sockets(self) -> float:
        """The server's count of connected sockets (one less once it saw a disconnect)."""
        metrics = await self.admin.http.get("/metrics")
        return Samples(metrics.text).count("taskhub_connected_sockets")

    async def assert_worker_kept(self) -> None:
        assert self.worker_id in await self.worker_ids()
        task = await self.admin.task(self.task_id)
        assert (task["status"], task["worker_id"]) == ("claimed", self.worker_id)


@pytest.fixture
async def scene(shared_server: HubServer, http: httpx.AsyncClient) -> AsyncIterator[Scene]:
    alice_token = shared_server.create_user(unique("alice"))
    admin, alice = ApiClient(http, shared_server.admin_token), ApiClient(http, alice_token)
    room = unique("lab")
    worker_id = (await alice.register(room=room, name="Doomed", schema={}))["worker_id"]
    task = await admin.submit(f"{room}:modifiers:Doomed", room=room)
    claimed = await alice.claim(worker_id)
    assert claimed is not None and claimed["id"] == task["id"]
    built = Scene(shared_server, room, alice_token, admin, alice, worker_id, task["id"])
    yield built
    for probe in built.probes:
        await probe.disconnect()


async def browser_in(scene: Scene, room: str) -> SocketProbe:
    browser = await scene.connect("browser", scene.server.admin_token)
    await browser.room_join(room)
    return browser


async def test_worker_is_removed_when_its_socket_stays_away_past_the_grace(scene: Scene) -> None:
    await scene.alice.register(room=scene.room, name="Busy", schema={}, worker_id=scene.worker_id)
    # A pending task that keeps Busy alive once orphaned.
    waiting = await scene.admin.submit(scene.busy, room=scene.room)
    browser = await browser_in(scene, scene.room)
    worker = await scene.connect_worker("worker", scene.doomed, scene.busy)
    start = browser.mark()
    disconnected_at = time.monotonic()
    await worker.disconnect()
    await scene.assert_worker_kept()  # not before the grace period is over

    failed = await browser.wait_status(scene.task_id, "failed")
    assert time.monotonic() - disconnected_at >= 0.9 * GRACE
    assert_task_status_payload(failed.data)
    assert failed.data["error"] == "Worker disconnected"
    assert failed.data["worker_id"] == scene.worker_id
    assert failed.data["completed_at"] is not None

    assert scene.worker_id not in await scene.worker_ids()
    task = await scene.admin.task(scene.task_id)
    assert (task["status"], task["error"]) == ("failed", "Worker disconnected")
    assert (await scene.admin.task(waiting["id"]))["status"] == "pending"
    listed = await scene.admin.get(f"/rooms/{scene.room}/jobs", params={"limit": 500})
    names = {job["full_name"]: job for job in listed.json()["items"]}
    assert scene.doomed not in names  # orphaned, nothing pending: soft-deleted
    assert names[scene.busy]["workers"] == []  # orphaned, but a task still waits for it
    assert_problem(
        await scene.admin.get(f"/rooms/{scene.room}/jobs/{scene.doomed}"), 404, "job-not-found"
    )

    # Sentinel: cancelling Busy's last pending task (which also soft-deletes Busy).
    assert (await scene.admin.transition(waiting["id"], "cancelled")).status_code == 200
    cancelled = await browser.wait_status(waiting["id"], "cancelled")
    await browser.wait_for("jobs_invalidate", after=cancelled.index)
    # One removal: one failure event and one jobs_invalidate for the room of both jobs.
    assert browser.between(start) == [
        ("task_status_event", failed.data),
        ("jobs_invalidate", {}),
        ("task_status_event", cancelled.data),
        ("jobs_invalidate", {}),
    ]


async def test_worker_that_rejoins_on_a_new_socket_within_the_grace_is_kept(
    scene: Scene,
) -> None:
    browser = await browser_in(scene, scene.room)
    first = await scene.connect_worker("first-socket", scene.doomed)
    # Connected ahead (a socket that joined nothing stands for no worker), so that only the
    # re-join has to land within the grace, also on a loaded machine.
    second = await scene.connect("second-socket", scene.alice_token)
    start = browser.mark()
    await first.disconnect()
    await second.join_job_room(scene.doomed, scene.worker_id)  # the SDK's reconnect
    await asyncio.sleep(BEYOND_GRACE)
    await scene.assert_worker_kept()
    assert browser.between(start) == []

    # The new socket now carries the worker: losing it starts a fresh grace period.
    await second.disconnect()
    failed = await browser.wait_status(scene.task_id, "failed")
    assert failed.data["error"] == "Worker disconnected"
    assert scene.worker_id not in await scene.worker_ids()


async def test_heartbeat_within_the_grace_keeps_the_worker(scene: Scene) -> None:
    browser = await browser_in(scene, scene.room)
    worker = await scene.connect_worker("worker", scene.doomed)
    start = browser.mark()
    connected = await scene.connected_sockets()
    await worker.disconnect()
    deadline = time.monotonic() + 10  # the server sees the disconnect first (grace begun)
    while await scene.connected_sockets() != connected - 1:
        assert time.monotonic() < deadline, "the server never saw the disconnect"
        await asyncio.sleep(0.01)
    beat = await scene.alice.patch(f"/workers/{scene.worker_id}")
    assert beat.status_code == 200, beat.text
    await asyncio.sleep(BEYOND_GRACE)
    await scene.assert_worker_kept()
    assert browser.between(start) == []


async def test_a_refused_join_does_not_tie_the_worker_to_that_socket(scene: Scene) -> None:
    """Bob's socket was refused alice's worker (403): bob leaving does not remove it."""
    bob = await scene.connect("bob", scene.server.create_user(unique("bob")))
    ack = await bob.call("join_job_room", {"job_name": scene.doomed, "worker_id": scene.worker_id})
    assert_problem_ack(ack, 403, "forbidden")
    await bob.disconnect()
    await asyncio.sleep(BEYOND_GRACE)
    await scene.assert_worker_kept()


async def test_a_socket_that_drops_while_its_join_is_checked_leaves_nothing_behind(
    scene: Scene,
) -> None:
    """A flapping connection: sockets that send ``join_job_room`` and drop at once (before
    the hub has checked the join) must not stay attached to the worker, or the grace period
    of its real socket would never start."""
    for attempt in range(3):
        flapping = await scene.connect(f"flapping-{attempt}", scene.alice_token)
        join = {"job_name": scene.doomed, "worker_id": scene.worker_id}
        await flapping.client.emit("join_job_room", join)
        await asyncio.sleep(0.001)  # sent, and still being checked when the socket drops
        await flapping.client.eio.disconnect(abort=True)
    browser = await browser_in(scene, scene.room)
    worker = await scene.connect_worker("worker", scene.doomed)
    await worker.disconnect()
    failed = await browser.wait_status(scene.task_id, "failed", within=BEYOND_GRACE + 2)
    assert failed.data["error"] == "Worker disconnected"
    assert scene.worker_id not in await scene.worker_ids()
