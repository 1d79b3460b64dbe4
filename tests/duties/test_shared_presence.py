"""Worker presence shared by replicas through Redis outlives Redis losing or missing data:
each replica writes its own share again and again, so a worker connected to a live replica
is never removed for a socket that ended on another one, and a failed write does not keep
a worker that is gone from being removed after the grace of its last socket (in-process
replicas on PostgreSQL, a private ``redis-server``, a proxy that cuts Redis away).

docs/protocol.md, "Leases and heartbeats": a worker whose socket disconnects is removed
after the grace period unless it re-joins (on any replica) or heartbeats meanwhile."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from taskhub.settings import Settings
from tests.realtime.hubs import Replica, hub_database, hub_settings, new_user, replicas
from tests.support.server import RedisServer
from tests.support.sockets import SocketProbe
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import eventually

GRACE = 1.0
# Long enough that a removal due after GRACE would have happened.
BEYOND_GRACE = 2.5 * GRACE


@dataclass
class Worker:
    """Alice's worker serving ``job``, holding one claimed task."""

    token: str
    job: str
    worker_id: str
    task_id: str

    @property
    def room(self) -> str:
        return self.job.split(":")[0]

    async def socket(self, name: str, on: Replica) -> SocketProbe:
        """A socket of the worker, joined on replica ``on`` (disconnect it yourself)."""
        probe = SocketProbe(name)
        await probe.connect(on.base_url, self.token)
        await probe.join_job_room(self.job, self.worker_id)
        return probe

    async def is_kept(self, by: Replica) -> bool:
        api = by.api(self.token)
        task = await api.task(self.task_id)
        listed = (await api.get("/workers", params={"limit": 500})).json()["items"]
        registered = self.worker_id in {item["id"] for item in listed}
        return registered and (task["status"], task["worker_id"]) == ("claimed", self.worker_id)


async def grace_over(replica: Replica, worker: Worker, within: float = 10.0) -> None:
    """Until the grace period ``replica`` started when the worker's socket there ended is
    over and its check done (whatever it decided has happened): the check itself is waited
    for, not a time long enough to hope it ran."""
    pending = replica.app.hub.presence._pending  # (keyed by the hub's own UUID type)

    def started() -> asyncio.Task[None] | None:
        return next((task for key, task in pending.items() if str(key) == worker.worker_id), None)

    grace = await eventually(started, within, "the grace period to start")
    await asyncio.wait_for(asyncio.shield(grace), GRACE + within)


async def a_worker(settings: Settings, on: Replica) -> Worker:
    token = await new_user(settings, "alice")
    api = on.api(token)
    room = f"lab-{uuid.uuid4().hex[:8]}"
    job = f"{room}:modifiers:R"
    worker_id = (await api.register(room=room, name="R", schema={}))["worker_id"]
    task = await api.submit(job, room=room)
    claimed = await api.claim(worker_id)
    assert claimed is not None and claimed["id"] == task["id"]
    return Worker(token, job, worker_id, task["id"])


async def test_a_worker_on_another_replica_is_kept_though_redis_restarted_empty_meanwhile(
    tmp_path: Path,
) -> None:
    """The worker's new socket joined B while A still held its old one (A notices the old
    one's end only later, as with a dead connection found by its ping timeout); Redis
    restarts without its data before A notices: B's share is back before A's grace ends."""
    with RedisServer(tmp_path) as redis:
        async with hub_database() as (url, namespace):
            settings = hub_settings(url, redis.url, namespace, GRACE)
            async with replicas(settings, settings) as (a, b):
                worker = await a_worker(settings, a)
                old = await worker.socket("old-on-a", a)
                new = await worker.socket("new-on-b", b)
                try:
                    redis.restart()
                    await old.disconnect()
                    await grace_over(a, worker)
                    assert await worker.is_kept(by=a), "removed, though connected to B"
                finally:
                    await old.disconnect()
                    await new.disconnect()


async def test_a_worker_that_joined_while_redis_was_unreachable_is_kept_once_it_is_back(
    tmp_path: Path,
) -> None:
    """B could not tell Redis of the worker's new socket when it joined: B tells it once
    Redis answers again, before A's grace for the old socket ends."""
    with RedisServer(tmp_path) as redis, TcpProxy(redis.port) as to_redis:
        async with hub_database() as (url, namespace):
            a_settings = hub_settings(url, redis.url, namespace, GRACE)
            b_settings = hub_settings(url, to_redis.url("redis"), namespace, GRACE)
            async with replicas(a_settings, b_settings) as (a, b):
                worker = await a_worker(a_settings, a)
                old = await worker.socket("old-on-a", a)
                to_redis.cut()
                new = await worker.socket("new-on-b", b)
                to_redis.mend()
                try:
                    await old.disconnect()
                    await grace_over(a, worker)
                    assert await worker.is_kept(by=a), "removed, though connected to B"
                finally:
                    await old.disconnect()
                    await new.disconnect()


async def logged(caplog: pytest.LogCaptureFixture, text: str, within: float = 5.0) -> None:
    """Wait until a log line containing ``text`` was written."""
    await eventually(
        lambda: any(text in record.getMessage() for record in caplog.records),
        within,
        f"a log line with {text!r}",
    )


async def test_a_worker_is_removed_after_the_grace_of_its_last_socket_though_a_removal_failed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Redis was unreachable when the worker's first socket ended (its removal from Redis
    failed) and when the SDK reconnected; when that socket ends for good, the worker is
    removed after the grace period (docs/protocol.md, "Leases and heartbeats": the disconnect
    itself starts the removal), not left to the sweeper."""
    caplog.set_level(logging.WARNING, logger="taskhub.duties.presence")
    with RedisServer(tmp_path) as redis, TcpProxy(redis.port) as to_redis:
        async with hub_database() as (url, namespace):
            settings = hub_settings(url, to_redis.url("redis"), namespace, GRACE)
            async with replicas(settings) as (hub,), SocketProbe("browser") as browser:
                worker = await a_worker(settings, hub)
                await browser.connect(hub.base_url, worker.token)
                await browser.room_join(worker.room)
                first = await worker.socket("first", hub)
                to_redis.cut()
                await first.disconnect()
                await logged(caplog, "could not unshare worker")
                last = await worker.socket("reconnected", hub)
                to_redis.mend()
                try:
                    await last.disconnect()
                    failed = await browser.wait_status(
                        worker.task_id, "failed", within=GRACE + BEYOND_GRACE
                    )
                    assert failed.data["error"] == "Worker disconnected"
                finally:
                    await last.disconnect()
