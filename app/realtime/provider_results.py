"""Where providers' results live between a provider's answer and its readers
(docs/protocol.md, "Providers"): the cache of results, the in-flight lock that lets one
``provider_request`` out per distinct read, and the wake-up of waiting readers.

Two places, as the deployment's state lives:

- ``LocalProviderResults``: in this process (one hub, no Redis);
- ``RedisProviderResults``: in Redis, shared by every replica. A result is stored, its
  in-flight lock released and its key published in one script (atomic); each replica's one
  subscription wakes its own readers of that key.

A reader watches its key (``watch``) before it looks for the result, and waits after: a
result stored in between wakes the watch, so no wake-up is lost between the look and the
wait. All readers of one key in a process share one watch, which holds the result as one
``bytes`` object: a result of several MB is fetched once per replica and each waiting reader
is answered from it, not from a copy of its own. The cache holds at most ``cap_bytes`` of
results: storing one past it evicts the oldest (in Redis: the first to expire) first.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import redis.asyncio as redis

from taskhub.duty import Reconnecting
from taskhub.realtime.redis_clients import (
    LISTEN_RETRY_SECONDS,
    LIVENESS,
    Liveness,
    bounded_client,
    redis_options,
    subscription_messages,
)

log = logging.getLogger(__name__)
# Redis connections of one replica's reads and writes of results (a reader that finds all
# busy waits for one).
REDIS_CONNECTIONS = 32


@dataclass(frozen=True, slots=True)
class StoredResult:
    """A provider's answer as stored: its body, and for a failed read the status of the
    problem the body then is (None: a result)."""

    data: bytes
    problem_status: int | None = None


@dataclass(eq=False)
class ResultWatch:
    """The readers of one key in this process: woken (``woken``) once its result is here
    (``result``), or when waiting is over for good (shutdown)."""

    woken: asyncio.Event = field(default_factory=asyncio.Event)
    result: StoredResult | None = None
    readers: int = 0

    def deliver(self, result: StoredResult) -> None:
        self.result = result
        self.woken.set()


class ProviderResults(Protocol):
    """What the providers' use cases need of the results' store (``key``: a provider's id
    and a read's request hash, ``result_key``)."""

    async def get(self, key: str) -> StoredResult | None: ...

    async def claim(self, key: str, ttl: float) -> bool:
        """Take the in-flight lock of ``key`` for ``ttl`` seconds (False: someone has it)."""
        ...

    async def release(self, key: str) -> None: ...

    async def put(self, key: str, result: StoredResult, ttl: float) -> None:
        """Store ``result`` for ``ttl`` seconds, release the key's in-flight lock, and wake
        every reader of the key on every replica."""
        ...

    def watch(self, key: str) -> contextlib.AbstractContextManager[ResultWatch]: ...

    def release_all(self) -> None:
        """Wake every waiting reader now, for good (graceful shutdown)."""
        ...

    @property
    def stored_bytes(self) -> int:
        """Bytes of results this process holds in its cache (0 where Redis holds them)."""
        ...


def result_key(provider_id: object, request_hash: str) -> str:
    """The key of a read's result: per provider id, so that a provider registered again
    after its removal (a new id) never answers from its predecessor's results."""
    return f"{provider_id}:{request_hash}"


class _Watches:
    """The watches of this process, one per key with readers."""

    def __init__(self) -> None:
        self._by_key: dict[str, ResultWatch] = {}
        self.closed = False

    @contextlib.contextmanager
    def watch(self, key: str) -> Iterator[ResultWatch]:
        entry = self._by_key.get(key)
        if entry is None:
            entry = self._by_key[key] = ResultWatch()
        if self.closed:
            entry.woken.set()
        entry.readers += 1
        try:
            yield entry
        finally:
            entry.readers -= 1
            if not entry.readers and self._by_key.get(key) is entry:
                del self._by_key[key]

    def deliver(self, key: str, result: StoredResult) -> None:
        entry = self._by_key.get(key)
        if entry is not None:
            entry.deliver(result)

    def get(self, key: str) -> ResultWatch | None:
        return self._by_key.get(key)

    def watched(self) -> list[str]:
        return list(self._by_key)

    def release_all(self) -> None:
        self.closed = True
        for entry in self._by_key.values():
            entry.woken.set()


class LocalProviderResults:
    """Results, locks and wake-ups in this process: for a hub without Redis."""

    def __init__(self, cap_bytes: int) -> None:
        self._cap = cap_bytes
        self._cache: OrderedDict[str, tuple[float, StoredResult]] = OrderedDict()
        self._bytes = 0
        self._inflight: dict[str, float] = {}
        self._watches = _Watches()

    @property
    def stored_bytes(self) -> int:
        return self._bytes

    async def get(self, key: str) -> StoredResult | None:
        found = self._cache.get(key)
        if found is None:
            return None
        expires, result = found
        if expires <= time.monotonic():
            self._forget(key)
            return None
        self._cache.move_to_end(key)  # least recently read goes first
        return result

    async def claim(self, key: str, ttl: float) -> bool:
        now = time.monotonic()
        if self._inflight.get(key, 0.0) > now:
            return False
        if len(self._inflight) > 1000:  # forget the expired ones now and then
            self._inflight = {k: until for k, until in self._inflight.items() if until > now}
        self._inflight[key] = now + ttl
        return True

    async def release(self, key: str) -> None:
        self._inflight.pop(key, None)

    async def put(self, key: str, result: StoredResult, ttl: float) -> None:
        self._forget(key)
        self._evict(len(result.data))
        self._cache[key] = (time.monotonic() + ttl, result)
        self._bytes += len(result.data)
        self._inflight.pop(key, None)
        self._watches.deliver(key, result)

    def _evict(self, room_for: int) -> None:
        """Make room for ``room_for`` bytes: the least recently read go first, and so do
        expired ones found at the front (an expired one further back goes when it is read
        or reaches the front: the cap bounds them all the same)."""
        now = time.monotonic()
        while self._cache:
            key, (expires, _result) = next(iter(self._cache.items()))
            if expires > now and self._bytes + room_for <= self._cap:
                break
            self._forget(key)

    def _forget(self, key: str) -> None:
        found = self._cache.pop(key, None)
        if found is not None:
            self._bytes -= len(found[1].data)

    def watch(self, key: str) -> contextlib.AbstractContextManager[ResultWatch]:
        return self._watches.watch(key)

    def release_all(self) -> None:
        self._watches.release_all()


# KEYS: the result, its failed mark, its in-flight lock, the index (sorted set: result key
# by expiry, in ms times 1000 plus a counter's last three digits: the order of puts within a
# millisecond), the sizes (hash: result key -> bytes), the total of bytes, that counter.
# ARGV: the body, a failed read's problem status ("" for a result), the TTL (ms), the cap
# (bytes), the channel, the message. Expired entries are forgotten first; then the oldest
# to expire are evicted until the total is within the cap (never the one just stored: the
# cap holds the largest result).
_PUT_SCRIPT = """
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local ttl = tonumber(ARGV[3])
local cap = tonumber(ARGV[4])
local function forget(key)
    local size = tonumber(redis.call('HGET', KEYS[5], key) or '0')
    redis.call('HDEL', KEYS[5], key)
    redis.call('ZREM', KEYS[4], key)
    return tonumber(redis.call('DECRBY', KEYS[6], size))
end
for _, key in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now_ms * 1000 + 999)) do
    forget(key)
end
forget(KEYS[1])
local size = string.len(ARGV[1])
local total = tonumber(redis.call('INCRBY', KEYS[6], size))
local order = tonumber(redis.call('INCR', KEYS[7])) % 1000
redis.call('ZADD', KEYS[4], (now_ms + ttl) * 1000 + order, KEYS[1])
redis.call('HSET', KEYS[5], KEYS[1], size)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
if ARGV[2] ~= '' then
    redis.call('SET', KEYS[2], ARGV[2], 'PX', ttl)
else
    redis.call('DEL', KEYS[2])
end
while total > cap do
    local oldest = redis.call('ZRANGE', KEYS[4], 0, 0)[1]
    if not oldest or oldest == KEYS[1] then
        break
    end
    total = forget(oldest)
    redis.call('DEL', oldest, oldest .. ':failed')
end
redis.call('DEL', KEYS[3])
redis.call('PUBLISH', ARGV[5], ARGV[6])
return total
"""


class RedisProviderResults:
    """Results, locks and wake-ups in Redis, shared by every replica of the deployment.

    Keys (under the deployment's namespace ``prefix``): ``provider-result:{key}`` (the body,
    expiring after the result TTL) and ``…:failed``, ``provider-inflight:{key}``, and the
    cap's bookkeeping ``provider-results:index``/``:sizes``/``:bytes``/``:puts``; the channel
    ``provider-results`` carries the keys of stored results."""

    def __init__(
        self, url: str, prefix: str, cap_bytes: int, *, liveness: Liveness = LIVENESS
    ) -> None:
        self._redis = bounded_client(url, REDIS_CONNECTIONS, name=f"{prefix}:provider-results")
        self._listen_client = redis.Redis.from_url(url, **redis_options())
        self._prefix = prefix
        self._cap = cap_bytes
        self._channel = f"{prefix}:provider-results"
        self._liveness = liveness
        self._watches = _Watches()
        self._listener: asyncio.Task[None] | None = None
        self._fetches: set[asyncio.Task[None]] = set()
        self._subscribed = asyncio.Event()
        self._reconnecting = Reconnecting("provider results", LISTEN_RETRY_SECONDS)
        self._put = self._redis.register_script(_PUT_SCRIPT)

    @property
    def stored_bytes(self) -> int:
        return 0

    def _key(self, key: str) -> str:
        return f"{self._prefix}:provider-result:{key}"

    async def start(self) -> None:
        self._listener = asyncio.create_task(self._listen(), name="taskhub-provider-results")
        await asyncio.wait_for(self._subscribed.wait(), 10)

    async def close(self) -> None:
        for fetch in list(self._fetches):
            fetch.cancel()
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
        await self._listen_client.aclose()
        await self._redis.aclose()

    async def get(self, key: str) -> StoredResult | None:
        stored = self._key(key)
        data, failed = await self._redis.mget(stored, f"{stored}:failed")
        if data is None:
            return None
        body = data.encode() if isinstance(data, str) else data
        return StoredResult(body, None if failed is None else int(failed))

    async def claim(self, key: str, ttl: float) -> bool:
        inflight = f"{self._prefix}:provider-inflight:{key}"
        return bool(await self._redis.set(inflight, b"1", nx=True, px=max(1, int(ttl * 1000))))

    async def release(self, key: str) -> None:
        await self._redis.delete(f"{self._prefix}:provider-inflight:{key}")

    async def put(self, key: str, result: StoredResult, ttl: float) -> None:
        stored = self._key(key)
        await self._put(
            keys=[
                stored,
                f"{stored}:failed",
                f"{self._prefix}:provider-inflight:{key}",
                f"{self._prefix}:provider-results:index",
                f"{self._prefix}:provider-results:sizes",
                f"{self._prefix}:provider-results:bytes",
                f"{self._prefix}:provider-results:puts",
            ],
            args=[
                result.data,
                "" if result.problem_status is None else str(result.problem_status),
                max(1, int(ttl * 1000)),
                self._cap,
                self._channel,
                key,
            ],
        )
        self._watches.deliver(key, result)  # this replica's readers: no round trip back

    def watch(self, key: str) -> contextlib.AbstractContextManager[ResultWatch]:
        return self._watches.watch(key)

    def release_all(self) -> None:
        self._watches.release_all()

    async def _listen(self) -> None:
        await self._reconnecting.run(self._listen_once)

    async def _listen_once(self) -> None:
        async with self._listen_client.pubsub() as pubsub:
            await pubsub.subscribe(self._channel)
            self._subscribed.set()
            if self._reconnecting.connected():
                # Results stored while the subscription was away woke nobody here.
                for key in self._watches.watched():
                    self._fetch_for_readers(key)
            async for message in subscription_messages(pubsub, self._liveness):
                if message.get("type") == "message":
                    self._fetch_for_readers(message["data"].decode())

    def _fetch_for_readers(self, key: str) -> None:
        """One read of a result for all of this replica's readers of it (if it has any), in
        the background: the subscription goes on reading meanwhile."""
        entry = self._watches.get(key)
        if entry is None or entry.result is not None:
            return
        fetch = asyncio.create_task(self._fetch(key, entry), name="taskhub-provider-result")
        self._fetches.add(fetch)
        fetch.add_done_callback(self._fetches.discard)

    async def _fetch(self, key: str, entry: ResultWatch) -> None:
        try:
            result = await self.get(key)
        except Exception as exc:  # its readers time out (or a later message wakes them)
            log.warning("provider results: could not read %s (%s)", key, exc)
            return
        if result is not None:
            entry.deliver(result)
