"""Users and bearer tokens. Tokens are 256-bit random secrets stored as SHA-256 hashes."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Collection
from typing import Any
from uuid import UUID

from sqlalchemy import Select, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.clock import new_id, utcnow
from taskhub.rules.errors import NotFound, ValidationFailed
from taskhub.rules.records import Principal, UserSummary
from taskhub.store.database import Database
from taskhub.store.tables import token_table, user_table

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
    try:
        async with db.write() as conn:
            await conn.execute(
                insert(user_table).values(
                    id=user_id, name=name, is_superuser=superuser, created_at=utcnow()
                )
            )
            await _insert_token(conn, user_id, token)
    except IntegrityError:
        raise ValidationFailed(f"A user named {name!r} already exists.") from None
    return user_id, token


async def create_token(db: Database, name: str) -> str:
    """Issue another token for the user called ``name``."""
    token = generate_token()
    async with db.write() as conn:
        user_id = await conn.scalar(select(user_table.c.id).where(user_table.c.name == name))
        if user_id is None:
            raise NotFound(f"No user named {name!r}.")
        await _insert_token(conn, user_id, token)
    return token


async def ensure_admin_token(db: Database, token: str) -> None:
    """Make sure ``token`` authenticates a superuser (creating user ``admin`` if needed)."""
    digest = hash_token(token)
    async with db.write() as conn:
        user_id = await conn.scalar(
            select(token_table.c.user_id).where(token_table.c.token_hash == digest)
        )
        if user_id is not None:
            await conn.execute(
                update(user_table).where(user_table.c.id == user_id).values(is_superuser=True)
            )
            return
        name = "admin"
        taken = await conn.scalar(select(func.count()).where(user_table.c.name == name))
        if taken:
            name = f"admin-{secrets.token_hex(3)}"
        user_id = new_id()
        await conn.execute(
            insert(user_table).values(id=user_id, name=name, is_superuser=True, created_at=utcnow())
        )
        await _insert_token(conn, user_id, token)


async def count_users(db: Database) -> int:
    async with db.read() as conn:
        return int(await conn.scalar(select(func.count()).select_from(user_table)) or 0)


async def list_users(db: Database) -> list[UserSummary]:
    """Every user, by name, with how many tokens it has."""
    tokens = (
        select(func.count())
        .where(token_table.c.user_id == user_table.c.id)
        .scalar_subquery()
        .label("tokens")
    )
    statement = select(
        user_table.c.name, user_table.c.is_superuser, tokens, user_table.c.created_at
    ).order_by(user_table.c.name)
    async with db.read() as conn:
        rows = (await conn.execute(statement)).all()
    return [UserSummary(row.name, row.is_superuser, row.tokens, row.created_at) for row in rows]


async def set_superuser(db: Database, name: str, superuser: bool) -> int:
    """Make the user called ``name`` a superuser or take that away; how many superusers
    there are then. Its tokens carry the change within ``TASKHUB_AUTH_CACHE_SECONDS``."""
    async with db.write() as conn:
        changed = await conn.execute(
            update(user_table).where(user_table.c.name == name).values(is_superuser=superuser)
        )
        if not changed.rowcount:
            raise NotFound(f"No user named {name!r}.")
        count = select(func.count()).where(user_table.c.is_superuser.is_(True))
        return int(await conn.scalar(count) or 0)


async def _insert_token(conn: AsyncConnection, user_id: UUID, token: str) -> None:
    await conn.execute(
        insert(token_table).values(
            id=new_id(), user_id=user_id, token_hash=hash_token(token), created_at=utcnow()
        )
    )


async def revoke_token(db: Database, token: str) -> bool:
    """Delete the token; False if no such token exists."""
    async with db.write() as conn:
        deleted = await conn.execute(
            delete(token_table).where(token_table.c.token_hash == hash_token(token))
        )
    return bool(deleted.rowcount)


async def revoke_tokens_of(db: Database, name: str) -> int:
    """Delete every token of the user called ``name``; how many there were."""
    async with db.write() as conn:
        user_id = await conn.scalar(select(user_table.c.id).where(user_table.c.name == name))
        if user_id is None:
            raise NotFound(f"No user named {name!r}.")
        deleted = await conn.execute(delete(token_table).where(token_table.c.user_id == user_id))
    return int(deleted.rowcount)


def _principals_of(digests: Collection[str]) -> Select[Any]:
    return (
        select(
            token_table.c.token_hash,
            user_table.c.id,
            user_table.c.name,
            user_table.c.is_superuser,
        )
        .join(token_table, token_table.c.user_id == user_table.c.id)
        .where(token_table.c.token_hash.in_(digests))
    )


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
            rows = (await conn.execute(_principals_of(digests))).all()
        found = {
            row.token_hash: Principal(id=row.id, name=row.name, is_superuser=row.is_superuser)
            for row in rows
        }
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
