"""Users and bearer tokens. Tokens are 256-bit random secrets stored as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Collection
from uuid import UUID

from taskhub.clock import new_id
from taskhub.rules.errors import NotFound, ValidationFailed
from taskhub.rules.records import Principal, UserSummary
from taskhub.store import users as store
from taskhub.store.database import Database

TOKEN_PREFIX = "th_"


def hash_token(token: str) -> str:
    """The stored form of ``token``. A lone surrogate (``"\\ud800"`` in a Socket.IO auth,
    not text) is hashed as is: no issued token has that hash, so it is refused like any
    wrong token instead of raising."""
    return hashlib.sha256(token.encode(errors="surrogatepass")).hexdigest()


def generate_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


async def create_user(db: Database, name: str, *, superuser: bool = False) -> tuple[UUID, str]:
    """Create a user and a first token; returns ``(user_id, token)``."""
    if not name or len(name) > 128:
        raise ValidationFailed("User name must be 1..128 characters.")
    user_id, token = new_id(), generate_token()
    async with db.write() as conn:
        if not await store.insert_user(conn, user_id, name, superuser=superuser):
            raise ValidationFailed(f"A user named {name!r} already exists.")
        await store.insert_token(conn, user_id, hash_token(token))
    return user_id, token


async def create_token(db: Database, name: str) -> str:
    """Issue another token for the user called ``name``."""
    token = generate_token()
    async with db.write() as conn:
        user_id = await store.user_named(conn, name)
        if user_id is None:
            raise NotFound(f"No user named {name!r}.")
        await store.insert_token(conn, user_id, hash_token(token))
    return token


async def ensure_admin_token(db: Database, token: str) -> None:
    """Make sure ``token`` authenticates a superuser (creating user ``admin`` if needed)."""
    digest = hash_token(token)
    async with db.write() as conn:
        user_id = await store.find_token(conn, digest)
        if user_id is not None:
            await store.make_superuser(conn, user_id)
            return
        name = "admin"
        if await store.name_taken(conn, name):
            name = f"admin-{secrets.token_hex(3)}"
        user_id = new_id()
        if not await store.insert_user(conn, user_id, name, superuser=True):
            raise ValidationFailed(f"A user named {name!r} already exists.")
        await store.insert_token(conn, user_id, digest)


async def count_users(db: Database) -> int:
    async with db.read() as conn:
        return await store.count_users(conn)


async def list_users(db: Database) -> list[UserSummary]:
    """Every user, by name, with how many tokens it has."""
    async with db.read() as conn:
        return await store.user_summaries(conn)


async def set_superuser(db: Database, name: str, superuser: bool) -> int:
    """Make the user called ``name`` a superuser or take that away; how many superusers
    there are then. Its tokens carry the change within ``TASKHUB_AUTH_CACHE_SECONDS``."""
    async with db.write() as conn:
        if not await store.set_superuser_named(conn, name, superuser):
            raise NotFound(f"No user named {name!r}.")
        return await store.count_superusers(conn)


async def revoke_token(db: Database, token: str) -> bool:
    """Delete the token; False if no such token exists."""
    async with db.write() as conn:
        return await store.delete_token(conn, hash_token(token))


async def revoke_tokens_of(db: Database, name: str) -> int:
    """Delete every token of the user called ``name``; how many there were."""
    async with db.write() as conn:
        user_id = await store.user_named(conn, name)
        if user_id is None:
            raise NotFound(f"No user named {name!r}.")
        return await store.delete_tokens_of(conn, user_id)


class Authenticator:
    """Resolves bearer tokens to principals, with a short in-process cache so that the hot
    path does not pay a query per request (a revoked token stops working within
    ``ttl`` seconds)."""

    def __init__(self, db: Database, ttl: float) -> None:
        self._db = db
        self._ttl = ttl
        self._cache: dict[str, tuple[Principal, float]] = {}

    async def authenticate(self, token: str) -> Principal | None:
        digest = hash_token(token)
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and hit[1] > now:
            return hit[0]
        return (await self.current([digest])).get(digest)

    async def current(self, digests: Collection[str]) -> dict[str, Principal]:
        """Whom each of these token digests authenticates now, read in one query (a digest
        missing from the answer is a revoked or unknown token); refreshes the cache."""
        if not digests:
            return {}
        async with self._db.read() as conn:
            found = await store.principals_of(conn, digests)
        expires = time.monotonic() + self._ttl
        for digest in digests:
            principal = found.get(digest)
            if principal is None:
                self._cache.pop(digest, None)
            elif self._ttl > 0:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[digest] = (principal, expires)
        return found
