"""Three ``taskhub serve`` replicas behind HAProxy (sticky by cookie), on PostgreSQL through
PgBouncer in transaction mode (``TASKHUB_DATABASE_POOLER=transaction``), fanned out
through Redis: the production layout of docs/operations.md.

A browser (Playwright), Taskhub's SDK and the unmodified zndraw-joblib 0.1.7 SDK all go
through the balancer; test sockets are pinned to each replica by the balancer's cookie.
Events reach every room member whichever replica it is on, long-polls wake across
replicas, and one replica sweeps: an expired lease is ended once.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import asyncpg
import httpx
import pytest
import redis

from taskhub.clock import utcnow
from taskhub.sdk import Worker
from tests.page.browser import CHROMIUM, LAUNCH_ARGS, missing_prerequisites
from tests.page.extensions import Ping
from tests.support.api import ApiClient
from tests.support.balancer import Balancer, balanced_replicas
from tests.support.databases import REDIS_URL, _asyncpg_dsn
from tests.support.metrics import Samples
from tests.support.server import HubServer, create_user
from tests.support.sockets import SocketProbe
from tests.support.waiting import eventually
from tests.system.test_zndraw_joblib_compat import JobManagerProcess

REPLICAS = 3
SWEEPER_INTERVAL = 1.0
TERMINAL = {"completed", "failed", "cancelled"}


@dataclass
class Layout:
    replicas: list[HubServer]
    balancer: Balancer
    direct_url: str  # the database itself, not through the bouncer (for test set-up)
    admin_token: str
    alice: str
    bob: str
    directory: Path


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layout]:
    directory = tmp_path_factory.mktemp("balanced")
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    env = {
        "TASKHUB_REDIS_URL": REDIS_URL,
        "TASKHUB_REDIS_NAMESPACE": namespace,
        "TASKHUB_SOCKET_DISCONNECT_GRACE_SECONDS": "1",
        "TASKHUB_SWEEPER_INTERVAL_SECONDS": str(SWEEPER_INTERVAL),
    }
    try:
        with balanced_replicas(directory, REPLICAS, env=env) as started:
            url = started.direct_url
            yield Layout(
                started.replicas,
                started.balancer,
                url,
                started.admin_token,
                create_user(url, "alice"),
                create_user(url, "bob"),
                directory,
            )
    finally:
        with redis.Redis.from_url(REDIS_URL) as client:
            keys = list(client.scan_iter(f"{namespace}:*"))
            if keys:
                client.delete(*keys)


@pytest.fixture
def room() -> str:
    return f"balanced-{uuid.uuid4().hex[:10]}"


@pytest.fixture
async def http(layout: Layout) -> AsyncIterator[httpx.AsyncClient]:
    """Through the balancer, never sticky (the cookie is dropped after each response):
    requests go round-robin to the replicas."""

    async def forget_cookies(response: httpx.Response) -> None:
        client.cookies.clear()

    async with httpx.AsyncClient(
        base_url=layout.balancer.base_url,
        timeout=30.0,
        trust_env=False,
        event_hooks={"response": [forget_cookies]},
    ) as client:
        yield client


async def metrics(layout: Layout) -> list[Samples]:
    """Each replica's ``/metrics``, read from the replica itself."""
    async with httpx.AsyncClient(timeout=10.0, trust_env=False) as client:
        return [
            Samples((await client.get(f"{replica.base_url}/metrics")).text)
            for replica in layout.replicas
        ]


async def pinned_probes(
    layout: Layout, room: str, stack: contextlib.AsyncExitStack
) -> list[SocketProbe]:
    """A socket on each replica (through the balancer, pinned by its cookie) in ``room``."""
    probes = []
    for index in range(REPLICAS):
        probe = await stack.enter_async_context(SocketProbe(f"member-on-r{index}"))
        await probe.connect(
            layout.balancer.base_url, layout.admin_token, headers=layout.balancer.pin(index)
        )
        await probe.room_join(room)
        probes.append(probe)
    return probes


async def terminal(api: ApiClient, task_id: str) -> dict[str, Any]:
    """Long-poll through the balancer until the task has ended."""

    async def ended() -> dict[str, Any] | None:
        answer = await api.get(f"/tasks/{task_id}", headers={"Prefer": "wait=10"})
        assert answer.status_code == 200, answer.text
        task: dict[str, Any] = answer.json()
        return task if task["status"] in TERMINAL else None

    return dict(await eventually(ended, 60, f"task {task_id} to end"))


def lifecycle(probe: SocketProbe, task_id: str) -> list[str]:
    """The statuses of ``task_id`` the probe heard, in order."""
    return [
        data["status"]
        for data in probe.named("task_status_event")
        if isinstance(data, dict) and data.get("id") == task_id
    ]


async def test_every_room_member_hears_every_event_whichever_replica_it_is_on(
    layout: Layout, http: httpx.AsyncClient, room: str
) -> None:
    """A socket on each replica and a browser hear the tasks that Taskhub's SDK and the
    zndraw-joblib SDK serve (both connected through the balancer, wherever it put them),
    each event once."""
    from playwright.async_api import async_playwright, expect

    assert not missing_prerequisites(), missing_prerequisites()
    alice = ApiClient(http, layout.alice)
    async with contextlib.AsyncExitStack() as stack:
        probes = await pinned_probes(layout, room, stack)

        playwright = await stack.enter_async_context(async_playwright())
        chromium = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        stack.push_async_callback(chromium.close)
        context = await chromium.new_context()
        page = await context.new_page()
        await page.goto(f"{layout.balancer.base_url}/?room={room}")
        await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
        await page.get_by_label("Token").fill(layout.bob)
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.locator("#connection")).to_have_attribute(
            "data-state", "connected", timeout=20_000
        )

        # Taskhub's SDK: aiohttp keeps the balancer's cookie for a host name, not an IP.
        worker = Worker(
            layout.balancer.url_on("localhost"), layout.alice, [Ping], room=room, poll_interval=30
        )
        await asyncio.to_thread(worker.start)
        stack.push_async_callback(asyncio.to_thread, worker.close)
        await eventually(lambda: worker.listening, 30, "Taskhub's SDK worker to listen")

        hub = SimpleNamespace(base_url=layout.balancer.base_url, admin_token=layout.admin_token)
        manager = JobManagerProcess(hub, layout.directory / "joblib.log", socket=True)  # type: ignore[arg-type]
        stack.callback(manager.close)
        scale = "@global:modifiers:Scale"  # (what its ``submit`` names)
        await asyncio.to_thread(manager.call, "register", name="Scale")
        await eventually(
            lambda: asyncio.to_thread(manager.call, "joined"), 30, "the zndraw-joblib socket"
        )
        assert scale in await asyncio.to_thread(manager.call, "joined")

        served_by_sdk = await alice.submit(f"{room}:modifiers:Ping", room=room)
        served_by_joblib = await asyncio.to_thread(
            manager.call, "submit", name="Scale", params={"factor": 2.0}, room=room
        )
        for task_id in (served_by_sdk["id"], served_by_joblib):
            assert (await terminal(alice, task_id))["status"] == "completed"
            await expect(page.locator(f'.task[data-task-id="{task_id}"]')).to_have_attribute(
                "data-status", "completed", timeout=20_000
            )
            for probe in probes:
                await probe.wait_status(task_id, "completed")
            seen = [lifecycle(probe, task_id) for probe in probes]
            assert seen[0][0] == "pending" and seen[0][-1] == "completed", seen
            assert len(set(seen[0])) == len(seen[0]), seen  # each status once
            assert seen == [seen[0]] * REPLICAS, seen  # the same stream on every replica

        sockets = [sample.count("taskhub_connected_sockets") for sample in await metrics(layout)]
        assert all(count >= 1 for count in sockets), sockets  # a pinned probe on each


async def test_long_polls_on_two_replicas_wake_when_the_third_ends_the_task(
    layout: Layout, http: httpx.AsyncClient, room: str
) -> None:
    alice = ApiClient(http, layout.alice)
    worker_id = (await alice.register(room=room, name="R", schema={}))["worker_id"]
    task = await alice.submit(f"{room}:modifiers:R", room=room)
    assert (await alice.claim(worker_id) or {}).get("id") == task["id"]
    assert (await alice.transition(task["id"], "running")).status_code == 200

    before = [sample.count("taskhub_long_poll_waiters") for sample in await metrics(layout)]

    async def long_poll(index: int) -> httpx.Response:
        return await http.get(
            f"/v1/joblib/tasks/{task['id']}",
            headers={
                "Authorization": f"Bearer {layout.alice}",
                "Prefer": "wait=30",
                **layout.balancer.pin(index),
            },
        )

    polls = [asyncio.create_task(long_poll(index)) for index in (0, 2)]

    async def waiting() -> bool:
        now = [sample.count("taskhub_long_poll_waiters") for sample in await metrics(layout)]
        return now[0] == before[0] + 1 and now[2] == before[2] + 1

    await eventually(waiting, 30, "a long-poll waiting on r0 and on r2")
    assert not any(poll.done() for poll in polls)
    ended = await http.patch(
        f"/v1/joblib/tasks/{task['id']}",
        json={"status": "completed"},
        headers={"Authorization": f"Bearer {layout.alice}", **layout.balancer.pin(1)},
    )
    assert ended.status_code == 200, ended.text
    for answer in await asyncio.wait_for(asyncio.gather(*polls), 25):
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "completed"


async def test_one_replica_sweeps_and_an_expired_lease_is_ended_once(
    layout: Layout, http: httpx.AsyncClient, room: str
) -> None:
    alice = ApiClient(http, layout.alice)
    async with contextlib.AsyncExitStack() as stack:
        probes = await pinned_probes(layout, room, stack)
        worker_id = (await alice.register(room=room, name="R", schema={}))["worker_id"]
        task = await alice.submit(f"{room}:modifiers:R", room=room, max_attempts=2)
        assert (await alice.claim(worker_id) or {}).get("id") == task["id"]
        await eventually(  # the claim's event has reached every member
            lambda: all("claimed" in lifecycle(probe, task["id"]) for probe in probes),
            30,
            "the claim's event",
        )
        marks = [probe.mark() for probe in probes]
        before = await metrics(layout)

        conn = await asyncpg.connect(_asyncpg_dsn(layout.direct_url))
        try:
            await conn.execute(
                "UPDATE task SET lease_expires_at = $1 WHERE id = $2",
                utcnow() - timedelta(seconds=1),
                uuid.UUID(task["id"]),
            )
        finally:
            await conn.close()

        for probe, mark in zip(probes, marks, strict=True):
            retried = await probe.wait_status(task["id"], "pending", after=mark, within=30)
            assert retried.data["error"] == "Lease expired"

        async def two_more_sweeps() -> bool:  # had another replica swept too, it shows now
            runs = sum(s.count("taskhub_sweeper_runs_total") for s in await metrics(layout))
            return runs >= sum(s.count("taskhub_sweeper_runs_total") for s in before) + 2

        await eventually(two_more_sweeps, 30, "two more sweeps")
        after = await metrics(layout)
        expired = [
            s.labelled("taskhub_sweeper_cleaned_total", "kind").get("leases_expired", 0)
            - b.labelled("taskhub_sweeper_cleaned_total", "kind").get("leases_expired", 0)
            for s, b in zip(after, before, strict=True)
        ]
        assert sum(expired) == 1, expired
        sweeping = [s.count("taskhub_sweeper_runs_total") > 0 for s in after]
        assert sweeping.count(True) == 1, sweeping  # the lease never changed hands
        for probe, mark in zip(probes, marks, strict=True):
            since = [data.get("status") for event, data in probe.between(mark)]
            assert since == ["pending"], since  # the retry, once
        now = await alice.task(task["id"])
        assert (now["status"], now["error"]) == ("pending", "Lease expired")


async def test_claims_through_the_balancer_hand_out_every_task_once(
    layout: Layout, http: httpx.AsyncClient, room: str
) -> None:
    """Six workers claim round-robin over the three replicas (each request to whichever the
    balancer picks), on the bouncer's few server connections: each task once."""
    alice = ApiClient(http, layout.alice)
    job = f"{room}:modifiers:Crunch"
    workers = [(await alice.register(room=room, name="Crunch", schema={}))["worker_id"]]
    for _ in range(5):
        created = await alice.post("/workers")
        assert created.status_code == 201, created.text
        linked = await alice.register(
            room=room, name="Crunch", schema={}, worker_id=created.json()["id"]
        )
        workers.append(linked["worker_id"])
    submitted = {(await alice.submit(job, room=room, payload={"n": n}))["id"] for n in range(60)}

    claimed: list[str] = []

    async def claimer(worker_id: str) -> None:
        while (task := await alice.claim(worker_id)) is not None:
            assert (task["status"], task["worker_id"]) == ("claimed", worker_id)
            claimed.append(task["id"])

    await asyncio.wait_for(asyncio.gather(*(claimer(worker) for worker in workers)), 120)
    assert sorted(claimed) == sorted(submitted)  # every task, none twice
    pending = await alice.get(f"/rooms/{room}/tasks", params={"status": "pending"})
    assert pending.json()["total"] == 0, pending.text
