"""Cross-process wake-ups for long-polls over Redis pub/sub.

Why Redis rather than PostgreSQL LISTEN/NOTIFY: a multi-replica deployment already needs
Redis (python-socketio's manager, the taskiq broker), NOTIFY would tie wake-ups to one
database engine, and a pub/sub listener holds no database connection. The channel carries
only the ids of tasks that reached a terminal state; each replica wakes its own waiters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable
from uuid import UUID

import redis.asyncio as redis

from taskhub.duties.outbox import Outbox
from taskhub.realtime.redis_clients import (
    LISTEN_RETRY_SECONDS,
    LIVENESS,
    Liveness,
    redis_options,
    subscription_messages,
)
from taskhub.realtime.waiters import TaskWaiters

log = logging.getLogger(__name__)


class RedisWakeBus:
    def __init__(
        self, url: str, channel: str, waiters: TaskWaiters, *, liveness: Liveness = LIVENESS
    ) -> None:
        self._redis = redis.Redis.from_url(url, **redis_options())
        self._channel = channel
        self._waiters = waiters
        self._liveness = liveness
        self._listener: asyncio.Task[None] | None = None
        self._subscribed = asyncio.Event()
        self._outbox: Outbox[str] = Outbox(
            "wake-ups", self._send, size=len, rest_after_failure=LISTEN_RETRY_SECONDS
        )

    async def start(self) -> None:
        self._listener = asyncio.create_task(self._listen(), name="taskhub-wake-bus")
        await asyncio.wait_for(self._subscribed.wait(), 10)

    async def ping(self) -> None:
        """Raise unless Redis answers (readiness)."""
        await self._redis.ping()

    def announce(self, task_ids: Iterable[UUID]) -> None:
        """Tell the other replicas these tasks ended (sent in the background, in order)."""
        ids = ",".join(str(task_id) for task_id in task_ids)
        if ids:
            self._outbox.put(ids)

    async def _send(self, ids: str) -> None:
        await self._redis.publish(self._channel, ids)

    async def _listen(self) -> None:
        lost = False
        while True:
            try:
                async with self._redis.pubsub() as pubsub:
                    await pubsub.subscribe(self._channel)
                    self._subscribed.set()
                    if lost:
                        log.info("wake bus reconnected")
                        lost = False
                    async for message in subscription_messages(pubsub, self._liveness):
                        if message.get("type") != "message":
                            continue
                        for raw in message["data"].decode().split(","):
                            with contextlib.suppress(ValueError):
                                self._waiters.notify(UUID(raw))
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # Waiters still have their slow safety re-check; reconnect and go on. One
                # warning per outage, not one per attempt.
                if not lost:
                    log.warning("wake bus connection lost (%s); reconnecting", exc)
                lost = True
                await asyncio.sleep(LISTEN_RETRY_SECONDS)

    async def close(self, drain_timeout: float = 5.0) -> None:
        await self._outbox.drain(drain_timeout)
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        await self._redis.aclose()
