"""Worker presence under a burst and on a long-lived socket (in-process replica on
PostgreSQL, a private ``redis-server``, real Socket.IO clients):

- many worker sockets ending at once cost the replica a bounded number of Redis
  connections (a pool that waits for a free one), none of the shared-presence calls fails
  for want of a connection, and every worker is removed after the disconnect grace (a
  failed "is it connected elsewhere?" would keep it until the heartbeat timeout);
- a worker that registers again (a new worker id: the hub forgot the old one) and joins
  again on the same socket leaves no trace of its old ids: not in the socket's session,
  not in presence, not in a ``worker:`` room, not in Redis.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from pathlib import Path

import pytest
import redis.asyncio as redis

from tests.realtime.hubs import hub_database, hub_settings, new_user, replicas
from tests.support.server import RedisServer
from tests.support.sockets import SocketProbe
from tests.support.waiting import eventually

GRACE = 1.0
BURST = 120
# The most Redis connections a replica's presence may hold (README: real time).
PRESENCE_CONNECTIONS = 10


async def redis_clients(url: str) -> int:
    """How many clients the (private) Redis has, not counting the one asking."""
    client = redis.Redis.from_url(url)
    try:
        return len(await client.client_list()) - 1
    finally:
        await client.aclose()


async def test_a_burst_of_worker_disconnects_uses_a_bounded_number_of_redis_connections(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="taskhub.duties.presence")
    with RedisServer(tmp_path) as server:
        async with hub_database() as (url, namespace):
            settings = hub_settings(url, server.url, namespace, GRACE)
            async with replicas(settings) as (hub,):
                token = await new_user(settings, "alice")
                api = hub.api(token)
                room = f"lab-{uuid.uuid4().hex[:8]}"
                job = f"{room}:modifiers:R"
                workers = [
                    (await api.register(room=room, name="R", schema={}))["worker_id"]
                    for _ in range(BURST)
                ]
                sockets = [SocketProbe(f"worker-{i}") for i in range(BURST)]
                try:
                    for probe, worker_id in zip(sockets, workers, strict=True):
                        await probe.connect(hub.base_url, token)
                        await probe.join_job_room(job, worker_id)
                    assert hub.app.hub.presence.connected_workers == BURST
                    before = await redis_clients(server.url)

                    # Every worker socket ends at the same moment.
                    await asyncio.gather(*(probe.disconnect() for probe in sockets))

                    async def all_removed() -> bool:
                        listed = (await api.get("/workers", params={"limit": 500})).json()
                        return not listed["items"]

                    # Removed after the grace, not after the 60 s heartbeat timeout (the
                    # sweeper is off here: only the grace can remove them). The bound leaves
                    # room for 120 removals on a loaded machine (about 0.7 s idle, 4 s under
                    # load), and is still far short of the heartbeat timeout.
                    await eventually(
                        all_removed, GRACE + 30.0, "every worker removed", interval=0.1
                    )
                    after = await redis_clients(server.url)
                finally:
                    await asyncio.gather(*(probe.disconnect() for probe in sockets))
    failures = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert not failures, failures[:3]
    # The presence pool had at least one connection before the burst.
    assert after - before <= PRESENCE_CONNECTIONS - 1, (before, after)


REGISTRATIONS = 40


async def test_a_socket_lets_go_of_the_worker_ids_the_hub_removed_when_it_joins_for_a_new_one(
    tmp_path: Path,
) -> None:
    """The SDK registers again under a new id whenever the hub forgot its worker, and joins
    again on the socket it has: after many such turns the socket holds the last id only
    (session, presence, one ``worker:`` room, Redis). A second, live worker of the same
    socket is kept throughout."""
    with RedisServer(tmp_path) as server:
        async with hub_database() as (url, namespace):
            settings = hub_settings(url, server.url, namespace, GRACE)
            async with replicas(settings) as (hub,), SocketProbe("sdk") as probe:
                token = await new_user(settings, "alice")
                api = hub.api(token)
                room = f"lab-{uuid.uuid4().hex[:8]}"
                job = f"{room}:modifiers:R"
                other_job = f"{room}:modifiers:Other"
                other = (await api.register(room=room, name="Other", schema={}))["worker_id"]
                await probe.connect(hub.base_url, token)
                await probe.join_job_room(other_job, other)
                worker_id = ""
                for _ in range(REGISTRATIONS):
                    if worker_id:  # the hub forgets the worker (as its sweeper would)
                        response = await api.delete(f"/workers/{worker_id}")
                        assert response.status_code == 204, response.text
                    worker_id = (await api.register(room=room, name="R", schema={}))["worker_id"]
                    await probe.join_job_room(job, worker_id)

                sid = probe.client.get_sid()
                session = hub.app.sockets.sessions[sid]
                held = {worker_id, other}
                assert {str(w) for w in session.workers} == held
                assert {r for r in session.rooms if r.startswith("worker:")} == {
                    f"worker:{w}" for w in held
                }
                rooms = hub.app.sio.manager.get_rooms(sid, "/")
                assert {r for r in rooms if r.startswith("worker:")} == {
                    f"worker:{w}" for w in held
                }
                assert hub.app.hub.presence.connected_workers == 2
                client = redis.Redis.from_url(server.url, decode_responses=True)
                try:
                    prefix = settings.redis_key("worker-sockets")
                    keys = {
                        key.removeprefix(f"{prefix}:")
                        async for key in client.scan_iter(match=f"{prefix}:*")
                    }
                finally:
                    await client.aclose()
                assert {k for k in keys if not k.startswith("replica:")} == held

                # The live ids still get their notices: the last one's cancel reaches it.
                task = await api.submit(job, room=room)
                claimed = await api.claim(worker_id)
                assert claimed is not None and claimed["id"] == task["id"]
                mark = probe.mark()
                response = await api.transition(task["id"], "cancelled")
                assert response.status_code == 200, response.text
                notice = await probe.wait_for("task_cancelled", after=mark)
                assert notice.data["worker_id"] == worker_id
