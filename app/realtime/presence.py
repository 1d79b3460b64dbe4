"""Which workers have a live socket, and the grace period after a drop.

When a worker's last socket here disconnects, it is removed after ``grace`` seconds unless
it was heard of meanwhile: a re-join (on any replica) or a heartbeat touches
``last_heartbeat``, and the removal is guarded by ``last_heartbeat < disconnected_at``.

With several replicas a worker's socket may move to another one before this one notices
the old socket's end (a reconnect through a load balancer; a dead connection found only by
its ping timeout): so each worker's sockets are also kept in a Redis set, shared by the
replicas, and a worker with a socket anywhere is not removed. A replica that dies leaves its
sockets in the set: the worker is then left to the sweeper's heartbeat timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Awaitable, Callable
from datetime import datetime
from uuid import UUID

import redis.asyncio as redis

from app.persistence.types import utcnow
from app.realtime.redis_clients import redis_options

log = logging.getLogger(__name__)
# Removes the worker unless it was heard of since; whether it did.
Cleanup = Callable[[UUID, datetime], Awaitable[bool]]


class SharedSockets:
    """Every replica's sockets of each worker, in Redis (a set per worker)."""

    # Left behind by a replica that died (its sockets were never removed), a set goes
    # after this long unless a socket joins again.
    KEEP_SECONDS = 24 * 3600

    def __init__(self, url: str, prefix: str) -> None:
        self._redis = redis.Redis.from_url(url, **redis_options())
        self._prefix = prefix

    def _key(self, worker_id: UUID) -> str:
        return f"{self._prefix}:{worker_id}"

    async def add(self, worker_id: UUID, sid: str) -> None:
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.sadd(self._key(worker_id), sid)
            pipe.expire(self._key(worker_id), self.KEEP_SECONDS)
            await pipe.execute()

    async def remove(self, worker_id: UUID, sid: str) -> None:
        await self._redis.srem(self._key(worker_id), sid)

    async def count(self, worker_id: UUID) -> int:
        return int(await self._redis.scard(self._key(worker_id)))

    async def forget(self, worker_id: UUID) -> None:
        """The worker is gone: so is its set."""
        await self._redis.delete(self._key(worker_id))

    async def remove_all(self, sockets: dict[UUID, set[str]]) -> None:
        """Take these sockets out of their workers' sets (one round trip): this replica is
        stopping, and sockets it does not close itself (HTTP long-polling ones) would not
        be taken out by a disconnect."""
        if not sockets:
            return
        async with self._redis.pipeline(transaction=False) as pipe:
            for worker_id, sids in sockets.items():
                pipe.srem(self._key(worker_id), *sids)
            await pipe.execute()

    async def close(self) -> None:
        await self._redis.aclose()


class WorkerPresence:
    def __init__(self, grace: float, cleanup: Cleanup, shared: SharedSockets | None = None):
        self._grace = grace
        self._cleanup = cleanup
        self._shared = shared
        self._sockets: defaultdict[UUID, set[str]] = defaultdict(set)
        self._pending: dict[UUID, asyncio.Task[None]] = {}

    async def attach(self, worker_id: UUID, sid: str) -> None:
        self._sockets[worker_id].add(sid)
        pending = self._pending.pop(worker_id, None)
        if pending is not None:
            pending.cancel()
        if self._shared is not None:
            try:
                await self._shared.add(worker_id, sid)
            except Exception as exc:
                log.warning("could not share worker %s's socket (%s)", worker_id, exc)

    async def detach(self, sid: str, workers: set[UUID]) -> None:
        """The socket ``sid`` is gone; start the grace period of workers it was the last
        socket of."""
        disconnected_at = utcnow()
        if self._shared is not None:
            for worker_id in workers:
                try:
                    await self._shared.remove(worker_id, sid)
                except Exception as exc:
                    log.warning("could not unshare worker %s's socket (%s)", worker_id, exc)
        for worker_id in workers:
            sockets = self._sockets.get(worker_id)
            if sockets is not None:
                sockets.discard(sid)
                if sockets:
                    continue
                del self._sockets[worker_id]
            if worker_id not in self._pending:
                self._pending[worker_id] = asyncio.create_task(
                    self._expire(worker_id, disconnected_at), name=f"grace-{worker_id}"
                )

    async def _expire(self, worker_id: UUID, disconnected_at: datetime) -> None:
        try:
            await asyncio.sleep(self._grace)
            if worker_id in self._sockets:  # came back on this replica
                return
            if self._shared is not None and await self._connected_elsewhere(worker_id):
                return
            if await self._cleanup(worker_id, disconnected_at) and self._shared is not None:
                await self._shared.forget(worker_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("cleanup of disconnected worker %s failed", worker_id)
        finally:
            if self._pending.get(worker_id) is asyncio.current_task():
                del self._pending[worker_id]

    async def _connected_elsewhere(self, worker_id: UUID) -> bool:
        """Whether another replica has a socket of the worker (when Redis cannot say,
        assume so: the sweeper's heartbeat timeout still removes a worker that is gone)."""
        assert self._shared is not None
        try:
            return await self._shared.count(worker_id) > 0
        except Exception as exc:
            log.warning("could not ask where worker %s is connected (%s)", worker_id, exc)
            return True

    async def close(self) -> None:
        if self._shared is not None:
            try:
                await self._shared.remove_all(dict(self._sockets))
            except Exception as exc:
                log.warning("could not take this replica's sockets out of Redis (%s)", exc)
            await self._shared.close()
        for task in self._pending.values():
            task.cancel()
        await asyncio.gather(*self._pending.values(), return_exceptions=True)
        self._pending.clear()

    @property
    def connected_workers(self) -> int:
        return len(self._sockets)
