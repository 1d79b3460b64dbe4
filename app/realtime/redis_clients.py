"""How every Redis client of Taskhub connects (the wake bus, python-socketio's manager, the
taskiq broker), so that Redis trouble costs real-time hints and seconds, never a request's
answer or a process:

- a pooled connection that a restarted Redis closed is reconnected and the command sent
  again (without a retry policy, redis-py fails the first command on each such connection);
- a Redis that stops answering fails a command after ``COMMAND_TIMEOUT`` seconds instead of
  the operating system's TCP timeout (blocking reads of stream listeners are not cut by it);
- idle connections are checked before use;
- a subscription that hears nothing pings Redis, and one whose ping goes unanswered is taken
  for dead (``subscription_messages``): a connection left half-open (Redis restarted or
  failed over behind a partition, a NAT or load balancer that silently dropped an idle
  connection) would otherwise be read from forever;
- a client that many calls may use at once (worker presence) holds a bounded pool: a call
  that finds every connection busy waits for one (up to ``COMMAND_TIMEOUT``) instead of
  opening another (``bounded_client``);
- python-socketio's listener retries every ``LISTEN_RETRY_SECONDS`` while Redis is away (its
  own backs off up to a minute, so cross-replica events resumed that late after an outage),
  and its publishes go out in the background (``TaskhubRedisManager``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis.asyncio as redis
import socketio
from redis.asyncio.client import PubSub
from redis.asyncio.connection import BlockingConnectionPool
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from taskhub.duty import Reconnecting
from taskhub.realtime.outbox import Outbox
from taskhub.realtime.room_fanout import RoomFanout

COMMAND_TIMEOUT = 3.0
CONNECT_TIMEOUT = 2.0
RETRIES = 3
HEALTH_CHECK_SECONDS = 15
LISTEN_RETRY_SECONDS = 1.0

if TYPE_CHECKING:
    from taskhub.settings import Settings

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Liveness:
    """A subscription that has heard nothing for ``ping_after`` seconds pings Redis; without
    an answer within ``answer_within`` seconds its connection is taken for dead."""

    ping_after: float = 5.0
    answer_within: float = COMMAND_TIMEOUT


LIVENESS = Liveness()


class DeadSubscription(RedisConnectionError):
    """Redis did not answer a subscription's ping in time (a half-open connection)."""


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


def bounded_client(url: str, max_connections: int, *, name: str | None = None) -> redis.Redis:
    """A client (options as ``redis_options``) whose pool holds at most ``max_connections``
    connections: a call that finds them all busy waits up to ``COMMAND_TIMEOUT`` seconds for
    one to be free (then fails with a ``ConnectionError``, "No connection available"). A
    default pool opens a connection per concurrent call, keeps them all for the life of the
    process, and fails calls with "Too many connections" past 100. ``name`` is the
    connections' ``CLIENT SETNAME`` (seen in ``CLIENT LIST``)."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=COMMAND_TIMEOUT,
        client_name=name,
        **redis_options(),
    )
    return redis.Redis.from_pool(pool)


async def subscription_messages(
    pubsub: PubSub, liveness: Liveness = LIVENESS
) -> AsyncIterator[dict[str, Any]]:
    """The messages of a subscribed ``pubsub``, like ``pubsub.listen()``, but reads wait at
    most ``liveness.ping_after`` seconds: after a quiet spell it pings Redis, and raises
    ``DeadSubscription`` when no answer (nor anything else) arrives in time, so the caller
    reconnects and subscribes again."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + liveness.ping_after
    pinged = False
    while True:
        message = await pubsub.get_message(timeout=max(deadline - loop.time(), 0.0))
        if message is not None:
            pinged = False
            deadline = loop.time() + liveness.ping_after
            if message["type"] != "pong":
                yield message
        elif loop.time() < deadline:
            continue  # something redis-py keeps to itself arrived (a health check's answer)
        elif pinged:
            raise DeadSubscription(
                f"no answer to a ping within {liveness.answer_within:g} s: connection dead"
            )
        else:
            await pubsub.ping()
            pinged = True
            deadline = loop.time() + liveness.answer_within


class TaskhubRedisManager(socketio.AsyncRedisManager, RoomFanout):
    """python-socketio's Redis manager, with:

    - a listener that keeps retrying at a steady pace, says once that Redis went away and
      once that it is back, and takes a subscription whose ping goes unanswered for dead;
    - publishes sent in the background, in order, through an ``Outbox``: an emit reaches
      this process's sockets at once, whatever Redis does; while Redis is away (a publish
      just failed) the next ones fail at once instead of each waiting for its own failure;
    - delivery to this process's sockets (its own events and the other replicas') through
      ``RoomFanout`` (it comes after ``AsyncPubSubManager`` in the MRO, before
      ``AsyncManager``).
    """

    def __init__(self, *args: Any, liveness: Liveness = LIVENESS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.liveness = liveness
        self._outbox: Outbox[str] = Outbox(
            "socket-events", self._send, size=len, rest_after_failure=LISTEN_RETRY_SECONDS
        )

    def _client(self) -> Any:
        """The Redis client (made on first use; redis-py reconnects its connections)."""
        if not self.connected:
            self._redis_connect()
        return self.redis

    async def _publish(self, data: Any) -> None:
        """Queue a message for the other processes; encoded now, sent in the background."""
        self._outbox.put(self.json.dumps(data))

    async def _send(self, message: str) -> None:
        await self._client().publish(self.channel, message)

    async def drain(self, within: float) -> None:
        """Send what is waiting (for up to ``within`` seconds; at shutdown)."""
        await self._outbox.drain(within)

    async def _redis_listen_with_retries(self) -> AsyncGenerator[Any, None]:
        """The messages of the manager's channel, subscribed again whenever the
        subscription is lost (python-socketio's ``_listen`` reads them)."""
        reconnecting = Reconnecting("Socket.IO fan-out", LISTEN_RETRY_SECONDS)

        async def subscribed() -> AsyncGenerator[dict[str, Any], None]:
            async with self._client().pubsub(ignore_subscribe_messages=True) as pubsub:
                await pubsub.subscribe(self.channel)
                reconnecting.connected()
                async for message in subscription_messages(pubsub, self.liveness):
                    yield message

        async for message in reconnecting.stream(subscribed):
            yield message


def socket_manager(settings: Settings, *, write_only: bool = False) -> TaskhubRedisManager:
    """The Socket.IO client manager that fans events out across processes through Redis."""
    return TaskhubRedisManager(
        settings.redis_url,
        channel=settings.socket_channel,
        write_only=write_only,
        redis_options=redis_options(),
    )
