"""Taskhub's Redis clients against a real, private ``redis-server``: a command on a stalled
Redis gives up after one timeout (it is not sent again: redis-py's default would try four
times, 12 s), and runs once when Redis answers; a connection a restart closed is
reconnected at once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import redis.asyncio as redis
from redis.exceptions import TimeoutError as RedisTimeoutError

from taskhub.realtime.redis_clients import COMMAND_TIMEOUT, redis_options
from tests.support.server import RedisServer


async def test_a_command_on_a_stalled_redis_gives_up_after_one_timeout(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as server:
        client = redis.Redis.from_url(server.url, **redis_options())
        listener = redis.Redis.from_url(server.url)
        try:
            async with listener.pubsub() as pubsub:
                await pubsub.subscribe("channel")
                await client.ping()
                server.pause()
                try:
                    started = time.monotonic()
                    with pytest.raises(RedisTimeoutError):
                        await client.publish("channel", "once")
                    assert time.monotonic() - started < 2 * COMMAND_TIMEOUT
                finally:
                    server.resume()
                received = []
                while (message := await pubsub.get_message(timeout=COMMAND_TIMEOUT)) is not None:
                    if message["type"] == "message":
                        received.append(message["data"])
            assert received == [b"once"]
        finally:
            await client.aclose()
            await listener.aclose()


async def test_a_connection_a_restart_closed_is_reconnected_at_once(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as server:
        client = redis.Redis.from_url(server.url, **redis_options())
        try:
            assert await client.ping()
            server.restart()
            assert await asyncio.wait_for(client.ping(), COMMAND_TIMEOUT)
        finally:
            await client.aclose()
