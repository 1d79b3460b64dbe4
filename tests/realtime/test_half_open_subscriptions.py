"""A subscription whose connection goes half-open (Redis restarted or failed over behind a
partition, a NAT that forgot the connection: nothing arrives, nothing is closed) is found
dead by its unanswered ping and made again, so cross-replica wake-ups and Socket.IO events
resume within seconds instead of never (a private ``redis-server`` behind a proxy that
black-holes the connections it carries; a short ``Liveness`` for the test)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as redis
import socketio

from taskhub.realtime.redis_clients import (
    Liveness,
    TaskhubRedisManager,
    redis_options,
    subscription_messages,
)
from taskhub.realtime.waiters import TaskWaiters
from taskhub.realtime.wake_bus import RedisWakeBus
from tests.realtime.hubs import served
from tests.support.server import RedisServer
from tests.support.sockets import SocketProbe
from tests.support.tcp_proxy import TcpProxy

QUICK = Liveness(ping_after=0.3, answer_within=0.5)
# Found dead after QUICK's 0.8 s, one listener retry (1 s) later subscribed again: well
# within this; without the liveness check, never.
RESUMED_WITHIN = 6.0
TRY_EVERY = 0.2


async def arrives(
    send: Callable[[], Awaitable[Any]], arrived: asyncio.Event, within: float
) -> bool:
    """Send again and again (pub/sub keeps nothing for a subscriber that is not there yet)
    until ``arrived`` is set; whether it was within ``within`` seconds."""

    async def keep_sending() -> None:
        while not arrived.is_set():
            await send()
            await asyncio.sleep(TRY_EVERY)

    try:
        await asyncio.wait_for(asyncio.gather(keep_sending(), arrived.wait()), within)
    except TimeoutError:
        return False
    return True


async def test_a_quiet_subscription_on_a_live_connection_is_kept_and_hears_no_pongs(
    tmp_path: Path,
) -> None:
    """Redis answers the pings of a quiet spell: the subscription lives on, and what it
    yields is only what was published."""
    with RedisServer(tmp_path) as server:
        client = redis.Redis.from_url(server.url, **redis_options())
        publisher = redis.Redis.from_url(server.url)
        received: list[dict[str, Any]] = []
        arrived = asyncio.Event()

        async def listen() -> None:
            async with client.pubsub(ignore_subscribe_messages=True) as pubsub:
                await pubsub.subscribe("quiet")
                async for message in subscription_messages(pubsub, QUICK):
                    received.append(message)
                    arrived.set()

        listening = asyncio.create_task(listen())
        try:
            await asyncio.sleep(3 * (QUICK.ping_after + QUICK.answer_within))  # a few pings
            assert not listening.done(), listening
            assert await arrives(lambda: publisher.publish("quiet", "hello"), arrived, 5)
            assert [(m["type"], m["data"]) for m in received][:1] == [("message", b"hello")]
        finally:
            listening.cancel()
            await asyncio.gather(listening, return_exceptions=True)
            await client.aclose()
            await publisher.aclose()


async def test_a_wake_bus_whose_subscription_went_half_open_wakes_waiters_again(
    tmp_path: Path,
) -> None:
    channel = f"test-{uuid.uuid4().hex[:8]}:task-ended"
    with RedisServer(tmp_path) as server, TcpProxy(server.port) as proxy:
        waiters = TaskWaiters()
        bus = RedisWakeBus(proxy.url("redis"), channel, waiters, liveness=QUICK)
        other_replica = redis.Redis.from_url(server.url)
        await bus.start()
        try:

            async def woken() -> bool:
                task_id = uuid.uuid4()
                with waiters.watch(task_id) as wake:
                    announce = lambda: other_replica.publish(channel, str(task_id))  # noqa: E731
                    return await arrives(announce, wake, RESUMED_WITHIN)

            assert await woken()
            proxy.black_hole()
            assert await woken(), "the wake bus still reads from its half-open connection"
        finally:
            await bus.close(1)
            await other_replica.aclose()


async def test_a_socket_io_listener_whose_subscription_went_half_open_delivers_again(
    tmp_path: Path,
) -> None:
    """A browser on this replica gets the events of another process (a replica, the taskiq
    worker: a write-only manager) again soon after its replica's subscription went
    half-open."""
    channel = f"test-{uuid.uuid4().hex[:8]}:socketio"
    with RedisServer(tmp_path) as server, TcpProxy(server.port) as proxy:
        here = TaskhubRedisManager(
            proxy.url("redis"), channel=channel, redis_options=redis_options(), liveness=QUICK
        )
        sio = socketio.AsyncServer(async_mode="asgi", client_manager=here)

        async def connect(sid: str, _environ: dict[str, Any], _auth: Any = None) -> None:
            await sio.enter_room(sid, "room")

        sio.on("connect", connect)
        elsewhere = TaskhubRedisManager(
            server.url, channel=channel, write_only=True, redis_options=redis_options()
        )
        async with served(socketio.ASGIApp(sio)) as url, SocketProbe("browser") as browser:
            await browser.connect(url, None)

            async def delivered(label: str) -> bool:
                arrived = asyncio.Event()
                browser.client.on(label, lambda _data: arrived.set())
                emit = lambda: elsewhere.emit(label, {}, room="room")  # noqa: E731
                return await arrives(emit, arrived, RESUMED_WITHIN)

            try:
                assert await delivered("before")
                proxy.black_hole()
                assert await delivered("after"), "the listener reads from its half-open connection"
            finally:
                await elsewhere.drain(1)
                await here.drain(1)
