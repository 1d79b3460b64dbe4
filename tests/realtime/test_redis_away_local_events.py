"""While Redis is away, a replica's own sockets still get its events at once: only the
publish to the other replicas waits for Redis (in the background), never the delivery in
this process (``TaskhubRedisManager``; an in-process replica, a private ``redis-server``
the test stops)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from tests.realtime.hubs import hub_database, hub_settings, new_user, replicas
from tests.support.server import RedisServer
from tests.support.sockets import SocketProbe

TASKS = 5
# Delivery in the process takes milliseconds; a failing publish to Redis takes about half
# a second or more (redis-py's reconnect attempts), and each event used to wait for the
# publishes of the ones before it.
LOCAL_DELIVERY_WITHIN = 1.0


async def test_while_redis_is_away_sockets_on_the_same_replica_get_every_event_at_once(
    tmp_path: Path,
) -> None:
    room = f"lab-{uuid.uuid4().hex[:8]}"
    job = f"{room}:modifiers:R"
    with RedisServer(tmp_path) as redis:
        async with hub_database() as (url, namespace):
            settings = hub_settings(url, redis.url, namespace, grace=5)
            token = await new_user(settings, "alice")
            async with replicas(settings) as (hub,), SocketProbe("browser") as browser:
                alice = hub.api(token)
                await alice.register(room=room, name="R", schema={})
                await browser.connect(hub.base_url, token)
                await browser.room_join(room)
                redis.stop()

                submitted = [(await alice.submit(job, room=room))["id"] for _ in range(TASKS)]
                deadline = asyncio.get_running_loop().time() + LOCAL_DELIVERY_WITHIN
                for task_id in submitted:
                    left = deadline - asyncio.get_running_loop().time()
                    await browser.wait_status(task_id, "pending", within=max(left, 0.01))
