"""The host's rooms: created explicitly, and lockable for editing. A locked room takes
writes only from requests carrying its ``Lock-Token``. In memory for one process, in Redis
when the host runs as replicas (every replica must know every room and lock)."""

from __future__ import annotations

import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Protocol

from redis.asyncio import Redis

ROOM_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"  # (Taskhub takes more; the host chooses fewer)


def valid_room_id(room_id: object) -> bool:
    return isinstance(room_id, str) and re.fullmatch(ROOM_ID_PATTERN, room_id) is not None


@dataclass(frozen=True)
class Room:
    id: str
    lock_token: str | None = None

    @property
    def locked(self) -> bool:
        return self.lock_token is not None

    def unlocked_by(self, token: str | None) -> bool:
        """Whether a write carrying ``token`` (its ``Lock-Token`` header) may go ahead."""
        if self.lock_token is None:
            return True
        return token is not None and hmac.compare_digest(self.lock_token, token)


class RoomRegistry(Protocol):
    async def create(self, room_id: str) -> bool:
        """False when the room exists already."""

    async def get(self, room_id: str) -> Room | None: ...

    async def lock(self, room_id: str) -> str | None:
        """The new lock token; None when the room is locked already."""

    async def unlock(self, room_id: str, token: str) -> bool:
        """False unless ``token`` is the room's lock token."""

    async def close(self) -> None: ...


class MemoryRooms:
    def __init__(self) -> None:
        self._rooms: dict[str, Room] = {}

    async def create(self, room_id: str) -> bool:
        if room_id in self._rooms:
            return False
        self._rooms[room_id] = Room(room_id)
        return True

    async def get(self, room_id: str) -> Room | None:
        return self._rooms.get(room_id)

    async def lock(self, room_id: str) -> str | None:
        room = self._rooms.get(room_id)
        if room is None or room.locked:
            return None
        token = secrets.token_urlsafe(24)
        self._rooms[room_id] = Room(room_id, token)
        return token

    async def unlock(self, room_id: str, token: str) -> bool:
        room = self._rooms.get(room_id)
        if room is None or not room.locked or not room.unlocked_by(token):
            return False
        self._rooms[room_id] = Room(room_id)
        return True

    async def close(self) -> None:
        return None


# Compare-and-delete: only the holder of the lock token ends the lock.
UNLOCK = """
if redis.call('HGET', KEYS[1], 'lock') == ARGV[1] then
  return redis.call('HDEL', KEYS[1], 'lock')
end
return 0
"""


class RedisRooms:
    """A room is a hash ``{prefix}:room:{id}`` (field ``lock``: its lock token)."""

    def __init__(self, url: str, prefix: str) -> None:
        self.redis: Redis = Redis.from_url(url, decode_responses=True)
        self.prefix = prefix

    def _key(self, room_id: str) -> str:
        return f"{self.prefix}:room:{room_id}"

    async def create(self, room_id: str) -> bool:
        return bool(await self.redis.hsetnx(self._key(room_id), "id", room_id))

    async def get(self, room_id: str) -> Room | None:
        fields = await self.redis.hgetall(self._key(room_id))
        if not fields:
            return None
        lock = fields.get("lock")
        return Room(room_id, None if lock is None else str(lock))

    async def lock(self, room_id: str) -> str | None:
        if not await self.redis.exists(self._key(room_id)):
            return None
        token = secrets.token_urlsafe(24)
        return token if await self.redis.hsetnx(self._key(room_id), "lock", token) else None

    async def unlock(self, room_id: str, token: str) -> bool:
        script = self.redis.register_script(UNLOCK)
        return bool(await script(keys=[self._key(room_id)], args=[token]))

    async def close(self) -> None:
        await self.redis.aclose()
