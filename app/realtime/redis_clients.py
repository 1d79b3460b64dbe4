"""How every Redis client of Taskhub connects (the wake bus, python-socketio's manager, the
taskiq broker), so that Redis trouble costs real-time hints and seconds, never a request's
answer or a process:

- a pooled connection that a restarted Redis closed is reconnected and the command sent
  again (without a retry policy, redis-py fails the first command on each such connection);
- a Redis that stops answering fails a command after ``COMMAND_TIMEOUT`` seconds instead of
  the operating system's TCP timeout (blocking reads of subscriptions and stream listeners
  are not cut by it);
- idle connections are checked before use;
- python-socketio's listener retries every ``LISTEN_RETRY_SECONDS`` while Redis is away (its
  own backs off up to a minute, so cross-replica events resumed that late after an outage).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

import socketio
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

COMMAND_TIMEOUT = 3.0
CONNECT_TIMEOUT = 2.0
RETRIES = 3
HEALTH_CHECK_SECONDS = 15
LISTEN_RETRY_SECONDS = 1.0

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger(__name__)


def redis_options() -> dict[str, Any]:
    """Keyword arguments for ``redis.asyncio.Redis.from_url`` (and the pools built alike)."""
    return {
        "socket_timeout": COMMAND_TIMEOUT,
        "socket_connect_timeout": CONNECT_TIMEOUT,
        # Only lost connections are retried: a command that timed out is not sent again, so
        # a stalled Redis costs one timeout (redis-py's default retries timeouts too: four
        # of them, 12 s).
        "retry": Retry(
            ExponentialBackoff(cap=1.0, base=0.05),
            RETRIES,
            supported_errors=(RedisConnectionError,),
        ),
        "health_check_interval": HEALTH_CHECK_SECONDS,
    }


class TaskhubRedisManager(socketio.AsyncRedisManager):  # type: ignore[misc]
    """python-socketio's Redis manager with a listener that keeps retrying at a steady pace
    and says once that Redis went away and once that it is back."""

    async def _redis_listen_with_retries(self) -> AsyncIterator[Any]:
        failing = False
        while True:
            try:
                self._redis_connect()
                await self.pubsub.subscribe(self.channel)
                if failing:
                    log.info("Socket.IO fan-out: Redis is back")
                    failing = False
                async for message in self.pubsub.listen():
                    yield message
            except Exception as exc:
                if not failing:
                    log.warning(
                        "Socket.IO fan-out: lost Redis (%s); retrying every %.0f s",
                        exc,
                        LISTEN_RETRY_SECONDS,
                    )
                failing = True
            await asyncio.sleep(LISTEN_RETRY_SECONDS)


def socket_manager(settings: Settings, *, write_only: bool = False) -> socketio.AsyncRedisManager:
    """The Socket.IO client manager that fans events out across processes through Redis."""
    return TaskhubRedisManager(
        settings.redis_url,
        channel=settings.redis_key("socketio"),
        write_only=write_only,
        redis_options=redis_options(),
    )
