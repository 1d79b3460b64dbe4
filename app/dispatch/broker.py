"""The taskiq broker for ``@internal`` tasks.

Embedded default: taskiq's in-memory broker; tasks execute inside the server process.
With ``TASKHUB_REDIS_URL``: taskiq-redis's stream broker (messages are acknowledged after
execution, so a killed worker does not lose them), executed by
``taskiq worker taskhub.internal_jobs.broker:broker``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator
from typing import Any
from uuid import UUID

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from taskiq import AckableMessage, AsyncBroker, Context, InMemoryBroker, TaskiqDepends
from taskiq_redis import RedisStreamBroker

from taskhub.dispatch.executor import InternalRuntime
from taskhub.dispatch.providers import PROVIDER_TASK_NAME, read_internal_provider
from taskhub.duty import Reconnecting
from taskhub.realtime.redis_clients import LISTEN_RETRY_SECONDS, redis_options
from taskhub.settings import Settings

TASK_NAME = "taskhub.run_internal"
AUTOCLAIM_LOCK_SECONDS = 30.0
log = logging.getLogger(__name__)


async def run_internal(task_id: str, attempt: int, context: Context = TaskiqDepends()) -> None:
    """The one taskiq task: execute ``(task_id, attempt)`` against the task row."""
    runtime: InternalRuntime = context.state.taskhub
    await runtime.execute(UUID(task_id), attempt)


class ResilientStreamBroker(RedisStreamBroker):
    """taskiq-redis's stream broker whose listener outlives Redis outages: taskiq-redis's
    own ends on the first connection error, and with it the whole worker process, with the
    internal tasks it was running (their runs lost, their messages already taken). This one
    says so once, waits, and goes on reading. A Redis restarted without persistence has
    lost the consumer group: it is declared again from the stream's start, so that the
    messages hubs added since the restart are read too."""

    async def listen(self) -> AsyncGenerator[AckableMessage, None]:
        reconnecting = Reconnecting(
            "internal task queue", LISTEN_RETRY_SECONDS, retry_if=_redis_away
        )
        read_stream = super().listen  # taskiq-redis's: ends on the first Redis error

        async def reading() -> AsyncGenerator[AckableMessage, None]:
            if reconnecting.failing:
                await self._declare_consumer_group(from_start=True)
                reconnecting.connected()
            async for message in read_stream():
                yield message

        async for message in reconnecting.stream(reading):
            yield message

    async def _declare_consumer_group(self, from_start: bool = False) -> None:
        if not from_start:
            return await super()._declare_consumer_group()
        first, self.consumer_id = self.consumer_id, "0"
        try:
            return await super()._declare_consumer_group()
        finally:
            self.consumer_id = first

    async def trim_done(self) -> int:
        """Drop the messages of the stream that every consumer group has acknowledged (the
        stream keeps them otherwise: ``XACK`` does not delete, and a length cap would drop
        messages no executor has taken yet); how many went. Nothing while no group exists:
        the messages wait for the first executor."""
        async with Redis(connection_pool=self.connection_pool) as redis:
            try:
                groups = await redis.xinfo_groups(self.queue_name)
            except ResponseError:  # no stream yet
                return 0
            if not groups:
                return 0
            floor = min([await self._oldest_kept(redis, group) for group in groups], key=_id)
            return int(await redis.xtrim(self.queue_name, minid=floor, approximate=False))

    async def _oldest_kept(self, redis: Redis, group: dict[str, Any]) -> bytes:
        """The oldest message ``group`` still needs: its oldest unacknowledged one, else the
        last one delivered (those after it are not delivered yet)."""
        pending = await redis.xpending(self.queue_name, group["name"])
        return pending["min"] if pending["pending"] else group["last-delivered-id"]


def _redis_away(error: Exception) -> bool:
    """Whether the stream listener's ``error`` means Redis is away (or came back without
    the consumer group): anything else ends the listener."""
    if isinstance(error, ResponseError):
        return str(error).startswith("NOGROUP")
    return isinstance(error, (RedisConnectionError, RedisTimeoutError, OSError))


def _id(message_id: bytes | str) -> tuple[int, int]:
    """A stream message id, ordered as Redis orders them."""
    text = message_id.decode() if isinstance(message_id, bytes) else message_id
    milliseconds, _, sequence = text.partition("-")
    return int(milliseconds), int(sequence or 0)


def make_broker(settings: Settings) -> AsyncBroker:
    broker: Any
    if settings.redis_url:
        broker = ResilientStreamBroker(
            settings.redis_url,
            queue_name=settings.redis_key("internal"),
            consumer_group_name=settings.redis_key("executors"),
            # A message taken by a worker that died unacknowledged is redelivered after this.
            idle_timeout=int(settings.internal_redelivery_seconds * 1000),
            # The lock around taking such messages over: without a timeout, a worker killed
            # while holding it would stop every redelivery for good.
            unacknowledged_lock_timeout=AUTOCLAIM_LOCK_SECONDS,
            **redis_options(),
        )
    else:
        broker = InMemoryBroker()
    broker.register_task(run_internal, task_name=TASK_NAME)
    broker.register_task(read_internal_provider, task_name=PROVIDER_TASK_NAME)
    return broker
