"""Which workers have a live socket, and the grace period after a drop.

When a worker's last socket here disconnects, it is removed after ``grace`` seconds unless
it was heard of meanwhile: a re-join (on any replica) or a heartbeat touches
``last_heartbeat``, and the removal is guarded by ``last_heartbeat < disconnected_at``.

With several replicas a worker's socket may move to another one before this one notices
the old socket's end (a reconnect through a load balancer; a dead connection found only by
its ping timeout): so the replicas also share, in Redis, which of them hold a socket of each
worker, and a worker with a socket on another live replica is not removed. This replica's
own sockets are the truth; Redis holds a copy that each replica keeps writing
(``WorkerPresence.start``): every ``refresh`` seconds it marks itself alive and adds itself
again to the sets of the workers it holds (a Redis that restarted empty, or was away when a
worker joined, has them back within one ``refresh``, which is shorter than the grace), and
takes itself out of those a failed write left it in. The entries of a replica that stopped
(died) no longer count once its mark expires.

Redis calls of many workers at once (a burst of disconnects, their grace periods ending
together) go out together: the changes in one pipeline, in the order they were made, one
pipeline at a time, and so do the "is it connected elsewhere?" questions; and the client
holds at most ``MAX_CONNECTIONS`` connections (a call waits for a free one).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections import defaultdict
from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar
from uuid import UUID

from taskhub.clock import utcnow
from taskhub.duty import Duty
from taskhub.realtime.redis_clients import bounded_client

log = logging.getLogger(__name__)
# Removes the worker unless it was heard of since; whether it did.
Cleanup = Callable[[UUID, datetime], Awaitable[bool]]

# How long a replica's mark (and a worker's set) lasts without a refresh: a replica that
# died counts as holding its workers' sockets for up to this long.
ENTRY_SECONDS = 30.0
# The most Redis connections a replica's presence holds (calls beyond wait for one).
MAX_CONNECTIONS = 10
CLIENT_NAME = "taskhub-presence"
# The most calls sent in one pipeline.
BATCH_LIMIT = 1000

Item = TypeVar("Item")
Result = TypeVar("Result")


def refresh_interval(grace: float) -> float:
    """How often a replica writes its share again: within half a grace period (so what a
    Redis lost is back before another replica's grace check), between 0.5 s and a third
    of ``ENTRY_SECONDS``."""
    return min(max(grace / 2, 0.5), ENTRY_SECONDS / 3)


class Batches(Generic[Item, Result]):
    """Calls made while the previous batch is on its way (or in the same moment) go out
    together in the next one, in call order, one batch at a time: a burst of calls costs a
    few round trips on one connection instead of a connection each. A batch that fails
    fails each of its calls."""

    def __init__(self, send: Callable[[list[Item]], Awaitable[list[Result]]]) -> None:
        self._send = send
        self._waiting: list[tuple[Item, asyncio.Future[Result]]] = []
        self._sending: asyncio.Task[None] | None = None

    async def call(self, item: Item) -> Result:
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._sending is None:
            self._sending = asyncio.create_task(self._send_all(), name="worker-presence-batch")
        return await future

    async def _send_all(self) -> None:
        batch: list[tuple[Item, asyncio.Future[Result]]] = []
        try:
            await asyncio.sleep(0)  # the calls of this same moment join the first batch
            while self._waiting:
                batch = self._waiting[:BATCH_LIMIT]
                del self._waiting[:BATCH_LIMIT]
                try:
                    results = await self._send([item for item, _ in batch])
                except Exception as exc:
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                else:
                    for (_, future), result in zip(batch, results, strict=True):
                        if not future.done():
                            future.set_result(result)
                batch = []
        finally:
            for _, future in batch + self._waiting:  # cancelled (closing): nothing is sent
                future.cancel()
            self._waiting.clear()
            self._sending = None

    async def close(self) -> None:
        if self._sending is not None:
            self._sending.cancel()
            await asyncio.gather(self._sending, return_exceptions=True)


Change = tuple[Literal["add", "remove", "forget"], UUID]


class SharedSockets:
    """Which replicas hold a socket of each worker, in Redis: a set of replica ids per
    worker, and a mark per live replica that expires unless refreshed."""

    def __init__(
        self,
        url: str,
        prefix: str,
        *,
        replica: str | None = None,
        entry_seconds: float = ENTRY_SECONDS,
    ) -> None:
        self._redis = bounded_client(url, MAX_CONNECTIONS, name=CLIENT_NAME)
        self._prefix = prefix
        self.replica = replica or uuid.uuid4().hex
        self._entry_ms = int(entry_seconds * 1000)
        # Workers whose set this replica failed to leave: left again at the next refresh.
        self._to_leave: set[UUID] = set()
        self._changes: Batches[Change, None] = Batches(self._change)
        self._questions: Batches[UUID, bool] = Batches(self._elsewhere)

    def _key(self, worker_id: UUID) -> str:
        return f"{self._prefix}:{worker_id}"

    def _mark(self, replica: str) -> str:
        return f"{self._prefix}:replica:{replica}"

    async def add(self, worker_id: UUID) -> None:
        """This replica holds a socket of the worker."""
        self._to_leave.discard(worker_id)
        await self._changes.call(("add", worker_id))

    async def remove(self, worker_id: UUID) -> None:
        """This replica holds no socket of the worker any more (retried by ``refresh``
        when Redis cannot be told now)."""
        self._to_leave.add(worker_id)
        await self._changes.call(("remove", worker_id))
        self._to_leave.discard(worker_id)

    async def forget(self, worker_id: UUID) -> None:
        """The worker is gone: so is its set."""
        await self._changes.call(("forget", worker_id))

    async def _change(self, changes: list[Change]) -> list[None]:
        """Send ``changes`` in one pipeline, in order (marking this replica alive when it
        adds itself anywhere)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            if any(kind == "add" for kind, _ in changes):
                pipe.set(self._mark(self.replica), 1, px=self._entry_ms)
            for kind, worker_id in changes:
                if kind == "add":
                    pipe.sadd(self._key(worker_id), self.replica)
                    pipe.pexpire(self._key(worker_id), self._entry_ms)
                elif kind == "remove":
                    pipe.srem(self._key(worker_id), self.replica)
                else:
                    pipe.delete(self._key(worker_id))
            await pipe.execute()
        return [None] * len(changes)

    async def refresh(self, workers: Collection[UUID]) -> None:
        """Mark this replica alive, add it to the sets of ``workers`` (the ones it holds
        sockets of) and take it out of those it failed to leave (one round trip)."""
        leaving = self._to_leave - set(workers)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.set(self._mark(self.replica), 1, px=self._entry_ms)
            for worker_id in workers:
                pipe.sadd(self._key(worker_id), self.replica)
                pipe.pexpire(self._key(worker_id), self._entry_ms)
            for worker_id in leaving:
                pipe.srem(self._key(worker_id), self.replica)
            await pipe.execute()
        self._to_leave -= leaving

    async def elsewhere(self, worker_id: UUID) -> bool:
        """Whether another live replica holds a socket of the worker."""
        return await self._questions.call(worker_id)

    async def _elsewhere(self, workers: list[UUID]) -> list[bool]:
        """``elsewhere`` for each of ``workers``: two round trips for them all."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for worker_id in workers:
                pipe.smembers(self._key(worker_id))
            sets: list[Any] = await pipe.execute()
        others = [{m.decode() for m in members} - {self.replica} for members in sets]
        replicas = sorted(set().union(*others))
        if not replicas:
            return [False] * len(workers)
        async with self._redis.pipeline(transaction=False) as pipe:
            for replica in replicas:
                pipe.exists(self._mark(replica))
            marks = await pipe.execute()
        alive = {replica for replica, found in zip(replicas, marks, strict=True) if found}
        return [bool(held & alive) for held in others]

    async def leave_all(self, workers: Collection[UUID]) -> None:
        """This replica is stopping: out of every set, and its mark gone (sockets it does
        not close itself, HTTP long-polling ones, would not be taken out by a disconnect)."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for worker_id in workers:
                pipe.srem(self._key(worker_id), self.replica)
            pipe.delete(self._mark(self.replica))
            await pipe.execute()

    async def close(self) -> None:
        await self._changes.close()
        await self._questions.close()
        await self._redis.aclose()


class SocketSharing(Duty):
    """Every ``refresh`` seconds, this replica's worker sockets written to Redis again
    (their entries expire: a replica that dies stops vouching for its sockets)."""

    name = "worker-presence"

    def __init__(self, shared: SharedSockets, sockets: Mapping[UUID, object], refresh: float):
        self._shared = shared
        self._sockets = sockets
        self._refresh = refresh
        self._first = True

    async def wait(self) -> None:
        if not self._first:
            await asyncio.sleep(self._refresh)
        self._first = False

    async def cycle(self) -> None:
        await self._shared.refresh(list(self._sockets))

    def failed(self, error: Exception) -> None:
        if not self._failing:  # once per outage
            log.warning("could not share this replica's worker sockets (%s)", error)

    def recovered(self) -> None:
        log.info("this replica's worker sockets are shared again")


class WorkerPresence:
    def __init__(
        self,
        grace: float,
        cleanup: Cleanup,
        shared: SharedSockets | None = None,
        *,
        refresh: float | None = None,
    ):
        self._grace = grace
        self._cleanup = cleanup
        self._shared = shared
        self._refresh = refresh_interval(grace) if refresh is None else refresh
        self._sockets: defaultdict[UUID, set[str]] = defaultdict(set)
        self._pending: dict[UUID, asyncio.Task[None]] = {}
        self._sharing = (
            None if shared is None else SocketSharing(shared, self._sockets, self._refresh)
        )
        self._stopping = False

    def start(self) -> None:
        """Keep this replica's sockets shared (with Redis)."""
        if self._sharing is not None:
            self._sharing.start()

    async def attach(self, worker_id: UUID, sid: str) -> None:
        self._sockets[worker_id].add(sid)
        pending = self._pending.pop(worker_id, None)
        if pending is not None:
            pending.cancel()
        if self._shared is not None:
            try:
                await self._shared.add(worker_id)
            except Exception as exc:
                log.warning("could not share worker %s's socket yet (%s)", worker_id, exc)

    async def forget_socket(self, worker_id: UUID, sid: str) -> None:
        """The hub removed the worker while the socket ``sid`` lives on (its SDK registered
        again under a new id): the socket no longer holds it. No grace period: there is
        nothing left to remove."""
        sockets = self._sockets.get(worker_id)
        if sockets is None:
            return
        sockets.discard(sid)
        if sockets:
            return
        del self._sockets[worker_id]
        if self._shared is not None:
            try:
                await self._shared.remove(worker_id)
            except Exception as exc:
                log.warning("could not unshare worker %s's socket yet (%s)", worker_id, exc)

    def stop_grace_periods(self) -> None:
        """A graceful shutdown has begun: the server now closes its sockets itself, so a
        socket that ends from here on starts no grace period (its worker reconnects to
        another replica, or here once restarted; the sweeper's heartbeat timeout still
        removes one that never does). Grace periods already running go on."""
        self._stopping = True

    async def detach(self, sid: str, workers: set[UUID]) -> None:
        """The socket ``sid`` is gone; start the grace period of workers it was the last
        socket of (unless the server is stopping: ``stop_grace_periods``)."""
        disconnected_at = utcnow()
        for worker_id in workers:
            sockets = self._sockets.get(worker_id)
            if sockets is not None:
                sockets.discard(sid)
                if sockets:
                    continue
                del self._sockets[worker_id]
            if worker_id not in self._pending and not self._stopping:
                self._pending[worker_id] = asyncio.create_task(
                    self._expire(worker_id, disconnected_at), name=f"grace-{worker_id}"
                )
            if self._shared is not None:
                try:
                    await self._shared.remove(worker_id)
                except Exception as exc:
                    log.warning("could not unshare worker %s's socket yet (%s)", worker_id, exc)

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
            return await self._shared.elsewhere(worker_id)
        except Exception as exc:
            log.warning("could not ask where worker %s is connected (%s)", worker_id, exc)
            return True

    async def close(self) -> None:
        if self._sharing is not None:
            await self._sharing.stop()
        if self._shared is not None:
            try:
                await self._shared.leave_all(list(self._sockets))
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
