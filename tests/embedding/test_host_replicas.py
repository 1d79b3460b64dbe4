"""Two replicas of the example host on one PostgreSQL database and one Redis, behind HAProxy:
the host's rooms and locks are shared through Redis (its keys under its own prefix), its
Socket.IO server fans out through Redis on the channel chosen for it and Taskhub
(``TASKHUB_SOCKETIO_CHANNEL``), and Taskhub's wake bus and provider results use
``TASKHUB_REDIS_NAMESPACE``. A watcher on either replica hears every
event of its room exactly once, whichever replica made the change."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack
from dataclasses import dataclass

import httpx
import pytest
import redis

from tests.embedding.hosts import HostServer, bearer, sign_in
from tests.support.api import ApiClient
from tests.support.balancer import Balancer
from tests.support.databases import REDIS_URL
from tests.support.server import new_admin_token, provisioned_database
from tests.support.sockets import SocketProbe

REPLICAS = 2
LIFECYCLE = ["pending", "claimed", "running", "completed"]


@dataclass
class Layout:
    replicas: list[HostServer]
    balancer: Balancer


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layout]:
    directory = tmp_path_factory.mktemp("host-replicas")
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    env = {
        "TASKHUB_REDIS_URL": REDIS_URL,
        "TASKHUB_REDIS_NAMESPACE": namespace,
        "TASKHUB_SOCKETIO_CHANNEL": f"{namespace}-host:socketio",
        "HOST_APP_REDIS_PREFIX": f"{namespace}-host",
    }
    try:
        with provisioned_database("postgres", directory) as url, ExitStack() as stack:
            admin_token = new_admin_token()
            replicas = [
                stack.enter_context(
                    HostServer(
                        url,
                        log_dir=directory,
                        env=env,
                        log_name=f"host-{index}.log",
                        admin_token=admin_token,
                    )
                )
                for index in range(REPLICAS)
            ]
            ports = [replica.port for replica in replicas]
            balancer = stack.enter_context(Balancer(ports, health_path="/healthz"))
            yield Layout(replicas, balancer)
    finally:
        with redis.Redis.from_url(REDIS_URL) as client:
            keys = list(client.scan_iter(f"{namespace}*"))
            if keys:
                client.delete(*keys)


@pytest.fixture
async def http(layout: Layout) -> AsyncIterator[httpx.AsyncClient]:
    """Through the balancer; each request pins its replica itself (``Balancer.pin``)."""
    async with httpx.AsyncClient(
        base_url=layout.balancer.base_url, timeout=30.0, trust_env=False
    ) as client:
        yield client


def statuses(probe: SocketProbe, task_id: str) -> list[str]:
    return [
        data["status"] for data in probe.named("task_status_event") if data.get("id") == task_id
    ]


async def test_a_watcher_on_either_replica_hears_every_event_once(
    layout: Layout, http: httpx.AsyncClient
) -> None:
    """The room is created on one replica and known on the other; each change of a task is
    made on alternating replicas; each watcher hears each status once and the host's own
    ``task_ended`` once."""
    pin = layout.balancer.pin
    token = await sign_in(http, "alice")
    alice = ApiClient(http, token)
    room = f"lab-{uuid.uuid4().hex[:8]}"
    created = await http.post(f"/rooms/{room}", headers={**bearer(token), **pin(0)})
    assert created.status_code == 201, created.text
    async with contextlib.AsyncExitStack() as stack:
        watchers = []
        for index in range(REPLICAS):
            watcher = await stack.enter_async_context(SocketProbe(f"watcher-on-r{index}"))
            await watcher.connect(layout.balancer.base_url, token, headers=pin(index))
            joined = await watcher.call("room_join", {"room_id": room})
            assert joined == {"room_id": room, "locked": False}
            watchers.append(watcher)

        job = await alice.register(room=room, name="Rotate", headers=pin(1))
        tasks = []
        for _ in range(3):
            submitted = await alice.post(
                f"/rooms/{room}/tasks/{job['full_name']}", json={"payload": {}}, headers=pin(0)
            )
            assert submitted.status_code == 202, submitted.text
            task_id = submitted.json()["id"]
            claimed = await alice.post(
                "/tasks/claim", json={"worker_id": job["worker_id"]}, headers=pin(1)
            )
            assert claimed.json()["task"]["id"] == task_id, claimed.text
            for status, replica in (("running", 0), ("completed", 1)):
                moved = await alice.transition(task_id, status, headers=pin(replica))
                assert moved.status_code == 200, moved.text
            tasks.append(task_id)

        for watcher in watchers:  # the host is told after the commit, in a task of its own
            await watcher.wait_for("task_ended", lambda data: data["id"] == tasks[-1])
        # A last event after all the others: what came before it on each socket is all
        # that will come of the tasks (events reach a socket in the order they were sent).
        sentinel = await alice.post(
            f"/rooms/{room}/tasks/{job['full_name']}", json={"payload": {}}, headers=pin(1)
        )
        assert sentinel.status_code == 202, sentinel.text
        for watcher in watchers:
            await watcher.wait_status(sentinel.json()["id"], "pending", within=20)
            for task_id in tasks:
                assert statuses(watcher, task_id) == LIFECYCLE, (watcher.name, task_id)
            ended = [data["id"] for data in watcher.named("task_ended")]
            assert ended == tasks, watcher.name
