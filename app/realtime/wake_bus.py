"""Cross-process wake-ups for long-polls over Redis pub/sub.

A second channel carries the names of jobs that have a task available, so that every
replica can push tasks to the idle workers whose sockets it holds (``task_push.py``).

Why Redis rather than PostgreSQL LISTEN/NOTIFY: a multi-replica deployment already needs
Redis (python-socketio's manager, the taskiq broker), NOTIFY would tie wake-ups to one
database engine, and a pub/sub listener holds no database connection. The channel carries
only the ids of tasks that reached a terminal state; each replica wakes its own waiters.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from uuid import UUID, uuid4

import redis.asyncio as redis

from taskhub.duty import Reconnecting
from taskhub.realtime.outbox import Outbox
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
        self,
        url: str,
        channel: str,
        waiters: TaskWaiters,
        *,
        available_channel: str | None = None,
        liveness: Liveness = LIVENESS,
    ) -> None:
        self._redis = redis.Redis.from_url(url, **redis_options())
        self._channel = channel
        self._available_channel = available_channel or f"{channel}:available"
        self._waiters = waiters
        # Set by the task pusher: wakes its grants for the jobs another replica announced.
        self.on_available: Callable[[list[str]], None] | None = None
        self._origin = uuid4().hex  # this replica's own announcements come back to it too
        self._liveness = liveness
        self._listener: asyncio.Task[None] | None = None
        self._reconnecting = Reconnecting("wake bus", LISTEN_RETRY_SECONDS)
        self._subscribed = asyncio.Event()
        self._outbox: Outbox[tuple[str, str]] = Outbox(
            "wake-ups",
            self._send,
            size=lambda message: len(message[1]),
            rest_after_failure=LISTEN_RETRY_SECONDS,
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
            self._outbox.put((self._channel, ids))

    def announce_available(self, job_names: Iterable[str]) -> None:
        """Tell the other replicas these jobs have a task available (one name per task)."""
        names = "\n".join(job_names)
        if names:
            self._outbox.put((self._available_channel, f"{self._origin}\n{names}"))

    async def _send(self, message: tuple[str, str]) -> None:
        await self._redis.publish(*message)

    async def _listen(self) -> None:
        """Subscribed until cancelled: a lost subscription is made again (waiters still
        have their slow safety re-check meanwhile)."""
        await self._reconnecting.run(self._listen_once)

    async def _listen_once(self) -> None:
        """One subscription, read until its connection ends."""
        async with self._redis.pubsub() as pubsub:
            await pubsub.subscribe(self._channel, self._available_channel)
            self._subscribed.set()
            self._reconnecting.connected()
            async for message in subscription_messages(pubsub, self._liveness):
                if message.get("type") != "message":
                    continue
                if message.get("channel") == self._available_channel.encode():
                    self._available(message["data"].decode())
                    continue
                for raw in message["data"].decode().split(","):
                    with contextlib.suppress(ValueError):
                        self._waiters.notify(UUID(raw))

    def _available(self, message: str) -> None:
        """Another replica's available jobs (this one's own it woke when it published)."""
        origin, _, names = message.partition("\n")
        if self.on_available is not None and origin != self._origin and names:
            self.on_available(names.split("\n"))

    async def close(self, drain_timeout: float = 5.0) -> None:
        await self._outbox.drain(drain_timeout)
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        await self._redis.aclose()
