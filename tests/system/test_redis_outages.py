"""Redis trouble costs real-time hints and seconds, never an answer, a task or a process
(PostgreSQL + a private Redis that the tests stall and restart; ``app/realtime/outbox.py``,
``app/realtime/redis_clients.py``, ``app/dispatch/broker.py``).

- A stalled Redis (SIGSTOP) holds up no REST answer; the events go out, in order, once it
  answers again.
- A restarted Redis (empty: no persistence) is reconnected to at once: the next internal
  submit is dispatched, ``/readyz`` is ready, and the taskiq worker, whose listener lost
  its connection, lives on: the internal task it was running completes, and the next one
  runs too.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import socketio

from tests.dispatch import slow_jobs
from tests.support.api import ApiClient
from tests.support.server import HubServer, RedisServer, TaskiqWorker, running_hub
from tests.support.sockets import SocketProbe

pytestmark = pytest.mark.timeout(180)

SLEEP = "@internal:modifiers:Sleep"
# No request of the hub waits on Redis: an answer that takes this long waited on it.
ANSWER_WITHIN = 5.0


@asynccontextmanager
async def api(server: HubServer, token: str) -> AsyncIterator[ApiClient]:
    async with httpx.AsyncClient(
        base_url=server.base_url, timeout=ANSWER_WITHIN, trust_env=False
    ) as http:
        yield ApiClient(http, token)


def hub_env(redis: RedisServer) -> dict[str, str]:
    return {
        "TASKHUB_REDIS_URL": redis.url,
        "TASKHUB_REDIS_NAMESPACE": f"test-{uuid.uuid4().hex[:12]}",
        "TASKHUB_INTERNAL_JOB_MODULES": slow_jobs.MODULE,
    }


async def ended(client: ApiClient, task_id: str, within: float = 30.0) -> dict[str, Any]:
    """The task once it ended (polled: a long-poll would outlast the client's timeout)."""
    deadline = time.monotonic() + within
    while True:
        task = await client.task(task_id)
        if task["status"] in {"completed", "failed", "cancelled"}:
            return task
        assert time.monotonic() < deadline, f"not ended within {within}s: {task}"
        await asyncio.sleep(0.1)


async def test_a_stalled_redis_holds_up_no_answer_and_the_events_follow_in_order(
    tmp_path: Path,
) -> None:
    room = f"lab-{uuid.uuid4().hex[:8]}"
    with (
        RedisServer(tmp_path / "redis") as redis,
        running_hub("postgres", tmp_path, env=hub_env(redis)) as server,
    ):
        token = server.create_user("alice")
        async with api(server, token) as alice, SocketProbe("browser") as browser:
            worker_id = (await alice.register(room=room, name="R", schema={}))["worker_id"]
            await browser.connect(server.base_url, token)
            await browser.room_join(room)
            redis.pause()
            try:
                stalled_at = time.monotonic()
                task = await alice.submit(f"{room}:modifiers:R", room=room)
                claimed = await alice.claim(worker_id)
                assert claimed is not None and claimed["id"] == task["id"]
                token_of = {"claim_token": claimed["claim_token"]}
                running = await alice.transition(task["id"], "running", **token_of)
                assert running.status_code == 200, running.text
                # (within the client's timeout: none of them waited for Redis)
                await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - stalled_at)))
            finally:
                redis.resume()
            await browser.wait_status(task["id"], "running", within=15)
        changes = [
            data["status"]
            for event, data in browser.between(0)
            if event == "task_status_event" and data["id"] == task["id"]
        ]
        assert changes == ["pending", "claimed", "running"]


async def test_after_a_redis_restart_dispatch_and_the_taskiq_worker_carry_on(
    tmp_path: Path,
) -> None:
    room = f"internal-{uuid.uuid4().hex[:8]}"
    with (
        RedisServer(tmp_path / "redis") as redis,
        running_hub("postgres", tmp_path, env=(env := hub_env(redis))) as server,
        TaskiqWorker(server.database_url, env=env, log_dir=tmp_path) as worker,
    ):
        token = server.create_user("alice")
        async with api(server, token) as alice:
            running = await alice.submit(SLEEP, room=room, payload={"seconds": 2})
            deadline = time.monotonic() + 15
            while (await alice.task(running["id"]))["status"] != "running":
                assert time.monotonic() < deadline, worker.output()
                await asyncio.sleep(0.05)
            redis.restart()

            ready = await alice.http.get("/readyz")
            assert ready.status_code == 200, ready.text
            after = await alice.submit(SLEEP, room=room, payload={"seconds": 0})
            assert after["status"] != "failed", after

            done = await ended(alice, running["id"])
            assert (done["status"], done["result"]) == ("completed", {"slept": 2}), (
                done,
                worker.output(),
            )
            later = await ended(alice, after["id"])
            assert later["status"] == "completed", (later, worker.output())
        assert worker.process is not None and worker.process.poll() is None
        assert "worker-0 is dead" not in worker.output()


async def test_cross_replica_events_resume_soon_after_a_long_redis_outage(
    tmp_path: Path,
) -> None:
    """Two replicas; Redis is away for 20 s. Once it answers again, events of one replica
    reach the other's sockets within a few seconds (python-socketio's own listener backs
    off towards a minute, so after 20 s away its next try could be 10 s later still)."""
    room = f"lab-{uuid.uuid4().hex[:8]}"
    with RedisServer(tmp_path / "redis") as redis:
        env = hub_env(redis)
        with (
            running_hub("postgres", tmp_path / "one", env=env) as one,
            HubServer(
                one.database_url, admin_token=one.admin_token, env=env, log_dir=tmp_path
            ) as two,
        ):
            token = one.create_user("alice")
            async with api(one, token) as alice, SocketProbe("browser") as browser:
                await alice.register(room=room, name="R", schema={})
                await browser.connect(two.base_url, token)
                await browser.room_join(room)
                redis.stop()
                await asyncio.sleep(20)
                redis.start()
                back = time.monotonic()
                while True:
                    task = await alice.submit(f"{room}:modifiers:R", room=room)
                    try:
                        await browser.wait_status(task["id"], "pending", within=0.5)
                        break
                    except AssertionError:
                        assert time.monotonic() - back < 5.0, "no event crossed over"


async def test_a_replica_that_stops_takes_its_sockets_out_of_the_shared_sets(
    tmp_path: Path,
) -> None:
    """A worker's socket on the HTTP long-polling transport, which a stopping replica does
    not close itself (so no disconnect takes it out): the stop takes it out of the worker's
    Redis set, or other replicas would think the worker still connected."""
    room = f"lab-{uuid.uuid4().hex[:8]}"
    with RedisServer(tmp_path / "redis") as redis_server:
        env = hub_env(redis_server)
        key_prefix = f"{env['TASKHUB_REDIS_NAMESPACE']}:worker-sockets:"
        with running_hub("postgres", tmp_path, env=env) as server:
            token = server.create_user("alice")
            async with api(server, token) as alice:
                job = await alice.register(room=room, name="R", schema={})
            key = key_prefix + job["worker_id"]
            polling = socketio.AsyncClient(reconnection=False)
            await polling.connect(
                server.base_url, auth={"token": token}, transports=["polling"], wait_timeout=10
            )
            ack = await polling.call(
                "join_job_room",
                {"job_name": f"{room}:modifiers:R", "worker_id": job["worker_id"]},
                timeout=10,
            )
            assert ack["worker_id"] == job["worker_id"], ack
            with redis.Redis.from_url(redis_server.url) as client:
                assert client.scard(key) == 1
            server.stop()
            with redis.Redis.from_url(redis_server.url) as client:
                assert client.scard(key) == 0
            await polling.disconnect()
