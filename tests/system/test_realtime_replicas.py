"""Two ``taskhub serve`` replicas on one PostgreSQL database, fanned out through Redis.

docs/protocol.md, "Guarantees": python-socketio's Redis manager delivers events to
sockets on every replica, long-polls wake on any replica within milliseconds of the
terminal commit (Redis pub/sub, not the slow safety re-check), and claims through
different replicas never hand out a task twice. Every test uses its own room, so other
servers sharing this Redis cannot be confused with ours; the one key our servers create
(the taskiq stream for ``@internal`` tasks) is deleted afterwards if nobody used it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.support.api import ApiClient
from tests.support.databases import REDIS_URL
from tests.support.metrics import Samples
from tests.support.server import HubServer, running_replicas
from tests.support.sockets import SocketProbe

# Without the Redis wake-up, a long-poll on the other replica answers only at the 5 s
# safety re-check.
LONG_POLL_LATENCY_LIMIT = 2.0
TASKS = 200
CLAIMERS = 8
GRACE = 1.0


@dataclass
class Cluster:
    a: HubServer
    b: HubServer
    alice_token: str
    namespace: str


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Replicas A and B (sharing one migrated PostgreSQL database and Redis, under a Redis
    namespace of their own)."""
    directory: Path = tmp_path_factory.mktemp("replicas")
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    env = {
        "TASKHUB_REDIS_URL": REDIS_URL,
        "TASKHUB_REDIS_NAMESPACE": namespace,
        "TASKHUB_SOCKET_DISCONNECT_GRACE_SECONDS": str(GRACE),
    }
    try:
        with running_replicas("postgres", directory, 2, env=env) as (a, b):
            yield Cluster(a, b, a.create_user("alice"), namespace)
    finally:
        with redis.Redis.from_url(REDIS_URL) as client:
            keys = list(client.scan_iter(f"{namespace}:*"))
            if keys:
                client.delete(*keys)


@pytest.fixture
def room() -> str:
    return f"replicas-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def https(cluster: Cluster) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    # Idle connections dropped well before the servers' keep-alive timeout (see
    # test_concurrent_claims.py).
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32, keepalive_expiry=1.0)
    async with (
        httpx.AsyncClient(
            base_url=cluster.a.base_url, timeout=30.0, trust_env=False, limits=limits
        ) as a,
        httpx.AsyncClient(
            base_url=cluster.b.base_url, timeout=30.0, trust_env=False, limits=limits
        ) as b,
    ):
        yield a, b


async def test_events_reach_sockets_on_every_replica_exactly_once(
    cluster: Cluster, https: tuple[httpx.AsyncClient, httpx.AsyncClient], room: str
) -> None:
    """Requests alternate between A and B; browsers on both see the same single stream."""
    on_a, on_b = (ApiClient(http, cluster.alice_token) for http in https)
    job = f"{room}:modifiers:R"
    async with (
        SocketProbe("browser-on-a") as browser_a,
        SocketProbe("browser-on-b") as browser_b,
        SocketProbe("worker-on-a") as worker_a,
    ):
        await browser_a.connect(cluster.a.base_url, cluster.a.admin_token)
        await browser_a.room_join(room)
        await browser_b.connect(cluster.b.base_url, cluster.b.admin_token)
        await browser_b.room_join(room)

        worker_id = (await on_b.register(room=room, name="R", schema={}))["worker_id"]
        for browser in (browser_a, browser_b):
            assert (await browser.wait_for("jobs_invalidate")).data == {}
        await worker_a.connect(cluster.a.base_url, cluster.alice_token)
        await worker_a.join_job_room(job, worker_id)

        task = await on_b.submit(job, room=room)
        available = await worker_a.wait_for("task_available")
        assert available.data == {"job_name": job, "room_id": room, "task_id": task["id"]}
        pending = await browser_a.wait_status(task["id"], "pending")
        assert pending.data["queue_position"] == 1

        claimed = await on_a.claim(worker_id)
        assert claimed is not None and claimed["id"] == task["id"]
        assert (await on_b.transition(task["id"], "running")).status_code == 200
        assert (await on_a.transition(task["id"], "completed")).status_code == 200
        deleted = await on_b.delete(f"/workers/{worker_id}")
        assert deleted.status_code == 204, deleted.text
        for browser in (browser_a, browser_b):
            await browser.wait_for("jobs_invalidate", after=1)  # sentinel: the last event

        lifecycle = [
            ("jobs_invalidate", None),
            ("task_status_event", "pending"),
            ("task_status_event", "claimed"),
            ("task_status_event", "running"),
            ("task_status_event", "completed"),
            ("jobs_invalidate", None),
        ]
        for browser in (browser_a, browser_b):
            seen = [(event, data.get("status")) for event, data in browser.between(0)]
            assert seen == lifecycle, browser.name
        assert browser_a.between(0) == browser_b.between(0)
        assert worker_a.between(0) == [("task_available", available.data)]


async def test_long_poll_on_one_replica_wakes_when_the_other_ends_the_task(
    cluster: Cluster,
    https: tuple[httpx.AsyncClient, httpx.AsyncClient],
    room: str,
) -> None:
    http_a, http_b = https
    on_b = ApiClient(http_b, cluster.alice_token)
    job = f"{room}:modifiers:R"
    worker_id = (await on_b.register(room=room, name="R", schema={}))["worker_id"]
    task = await on_b.submit(job, room=room)
    assert (await on_b.claim(worker_id) or {}).get("id") == task["id"]
    assert (await on_b.transition(task["id"], "running")).status_code == 200

    def long_poll(http: httpx.AsyncClient) -> asyncio.Task[httpx.Response]:
        return asyncio.create_task(
            http.get(
                f"/v1/joblib/tasks/{task['id']}",
                headers={
                    "Authorization": f"Bearer {cluster.alice_token}",
                    "Prefer": "wait=10",
                },
            )
        )

    async def waiters(http: httpx.AsyncClient) -> float:
        return Samples((await http.get("/metrics")).text).count("taskhub_long_poll_waiters")

    before = [await waiters(http) for http in https]
    remote, local = long_poll(http_a), long_poll(http_b)
    deadline = time.monotonic() + 30
    while [await waiters(http) for http in https] != [count + 1 for count in before]:
        assert time.monotonic() < deadline, "the long-polls did not start waiting"
        await asyncio.sleep(0.05)
    assert not remote.done() and not local.done()  # both are waiting on a running task

    started = time.monotonic()
    assert (await on_b.transition(task["id"], "completed")).status_code == 200
    answers = await asyncio.wait_for(asyncio.gather(remote, local), 15)
    latency = time.monotonic() - started
    assert latency < LONG_POLL_LATENCY_LIMIT, f"long-poll answered after {latency:.3f}s"
    for answer in answers:
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "completed"
        assert answer.headers["preference-applied"] == "wait=10"


async def test_worker_that_moves_to_the_other_replica_within_the_grace_is_kept(
    cluster: Cluster, https: tuple[httpx.AsyncClient, httpx.AsyncClient], room: str
) -> None:
    """The SDK reconnects through the load balancer to B: A's grace timer must not remove
    the worker; once it leaves B for good, B removes it and A's browsers hear of it."""
    on_a = ApiClient(https[0], cluster.alice_token)
    job = f"{room}:modifiers:R"
    worker_id = (await on_a.register(room=room, name="R", schema={}))["worker_id"]
    task = await on_a.submit(job, room=room)
    assert (await on_a.claim(worker_id) or {}).get("id") == task["id"]

    async with contextlib.AsyncExitStack() as stack:
        browser = await stack.enter_async_context(SocketProbe("browser-on-a"))
        await browser.connect(cluster.a.base_url, cluster.a.admin_token)
        await browser.room_join(room)
        on_replica_a = await stack.enter_async_context(SocketProbe("worker-on-a"))
        on_replica_b = await stack.enter_async_context(SocketProbe("worker-on-b"))
        await on_replica_a.connect(cluster.a.base_url, cluster.alice_token)
        await on_replica_a.join_job_room(job, worker_id)
        # Connected ahead (a socket that joined nothing stands for no worker), so that only
        # the join itself has to land within A's grace, also on a loaded machine.
        await on_replica_b.connect(cluster.b.base_url, cluster.alice_token)
        start = browser.mark()

        await on_replica_a.disconnect()
        await on_replica_b.join_job_room(job, worker_id)
        await asyncio.sleep(2.5 * GRACE)
        kept = await on_a.task(task["id"])
        assert (kept["status"], kept["worker_id"]) == ("claimed", worker_id)
        workers = await on_a.get("/workers", params={"limit": 500})
        assert worker_id in {item["id"] for item in workers.json()["items"]}
        assert browser.between(start) == []

        await on_replica_b.disconnect()
        failed = await browser.wait_status(task["id"], "failed")
        assert failed.data["error"] == "Worker disconnected"
        await browser.wait_for("jobs_invalidate", after=start)
    workers = await on_a.get("/workers", params={"limit": 500})
    assert worker_id not in {item["id"] for item in workers.json()["items"]}
    with redis.Redis.from_url(REDIS_URL) as client:  # its shared sockets went with it
        assert not client.exists(f"{cluster.namespace}:worker-sockets:{worker_id}")


async def test_worker_that_joined_the_other_replica_before_its_old_socket_ended_is_kept(
    cluster: Cluster, https: tuple[httpx.AsyncClient, httpx.AsyncClient], room: str
) -> None:
    """The worker's new socket joins on B while A still holds its old one (A notices the
    old one's end only later, as with a dead connection found by its ping timeout): A's
    grace period must not remove a worker that is connected to B."""
    on_a = ApiClient(https[0], cluster.alice_token)
    job = f"{room}:modifiers:R"
    worker_id = (await on_a.register(room=room, name="R", schema={}))["worker_id"]
    task = await on_a.submit(job, room=room)
    assert (await on_a.claim(worker_id) or {}).get("id") == task["id"]
    async with SocketProbe("old-on-a") as old, SocketProbe("new-on-b") as new:
        await old.connect(cluster.a.base_url, cluster.alice_token)
        await old.join_job_room(job, worker_id)
        await new.connect(cluster.b.base_url, cluster.alice_token)
        await new.join_job_room(job, worker_id)
        await old.disconnect()
        await asyncio.sleep(2.5 * GRACE)
        kept = await on_a.task(task["id"])
        assert (kept["status"], kept["worker_id"]) == ("claimed", worker_id)
        workers = await on_a.get("/workers", params={"limit": 500})
        assert worker_id in {item["id"] for item in workers.json()["items"]}


@dataclass
class ClaimLedger:
    """What the claimers saw, shared by all of them (one event loop, so no locks)."""

    claims: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    replicas: Counter[str] = field(default_factory=Counter)
    in_flight: int = 0
    false_empties: list[str] = field(default_factory=list)


async def _claimer(
    clients: tuple[ApiClient, ApiClient], first: int, worker_id: str, ledger: ClaimLedger
) -> None:
    """Claim, switching replica every time, until the server says nothing is left. An
    empty answer is sound only if every unclaimed task may be held by a claim in flight."""
    turn = first
    while True:
        client = clients[turn % 2]
        turn += 1
        ledger.in_flight += 1
        try:
            task = await client.claim(worker_id)
        finally:
            ledger.in_flight -= 1
        if task is not None:
            ledger.claims.append((worker_id, task))
            ledger.replicas["ab"[(turn - 1) % 2]] += 1
            continue
        unaccounted = TASKS - len(ledger.claims)
        if unaccounted <= ledger.in_flight:
            return
        ledger.false_empties.append(
            f"{worker_id}: null with {unaccounted} unclaimed, {ledger.in_flight} in flight"
        )
        await asyncio.sleep(0.01)


async def test_claims_through_both_replicas_hand_out_every_task_exactly_once(
    cluster: Cluster, https: tuple[httpx.AsyncClient, httpx.AsyncClient], room: str
) -> None:
    clients = (ApiClient(https[0], cluster.alice_token), ApiClient(https[1], cluster.alice_token))
    job = f"{room}:modifiers:Crunch"
    workers = [(await clients[0].register(room=room, name="Crunch", schema={}))["worker_id"]]
    for index in range(1, CLAIMERS):
        created = await clients[index % 2].post("/workers")
        assert created.status_code == 201, created.text
        linked = await clients[index % 2].register(
            room=room, name="Crunch", schema={}, worker_id=created.json()["id"]
        )
        workers.append(linked["worker_id"])
    assert len(set(workers)) == CLAIMERS

    gate = asyncio.Semaphore(16)

    async def submit(index: int) -> str:
        async with gate:
            return (await clients[index % 2].submit(job, room=room, payload={"n": index}))["id"]

    submitted = await asyncio.gather(*(submit(index) for index in range(TASKS)))
    assert len(set(submitted)) == TASKS

    ledger = ClaimLedger()
    await asyncio.wait_for(
        asyncio.gather(
            *(_claimer(clients, index, worker, ledger) for index, worker in enumerate(workers))
        ),
        120,
    )

    assert ledger.false_empties == []
    counts = Counter(task["id"] for _, task in ledger.claims)
    assert {task_id: n for task_id, n in counts.items() if n > 1} == {}
    assert set(counts) == set(submitted)
    assert min(ledger.replicas["a"], ledger.replicas["b"]) > 0, ledger.replicas
    for worker_id, task in ledger.claims:
        assert (task["status"], task["worker_id"]) == ("claimed", worker_id)
    for client in clients:  # both replicas agree: nothing left pending, all claimed once
        pending = await client.get(f"/rooms/{room}/tasks", params={"status": "pending"})
        assert pending.json()["total"] == 0, pending.text
        claimed = await client.get(f"/rooms/{room}/tasks", params={"status": "claimed"})
        assert claimed.json()["total"] == TASKS, claimed.text
