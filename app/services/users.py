"""Users and bearer tokens. Tokens are 256-bit random secrets stored as SHA-256 hashes;
a revoked token's hash is remembered (``revoked_token``) so that ``TASKHUB_ADMIN_TOKEN``
is not granted again after it was revoked."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import time
import weakref
from collections.abc import Callable, Collection, Iterator
from uuid import UUID

from taskhub.clock import new_id
from taskhub.rules.errors import NotFound, ValidationFailed
from taskhub.rules.records import Principal, UserSummary
from taskhub.store import users as store
from taskhub.store.database import Database

log = logging.getLogger(__name__)
TOKEN_PREFIX = "th_"
# The most tokens each cache of an ``Authenticator`` holds; past it, it starts empty again
# (a flood of distinct wrong tokens costs a read each, as it would without the cache).
CACHE_SIZE = 10_000


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
    _issued(hash_token(token))
    return user_id, token


async def create_token(db: Database, name: str) -> str:
    """Issue another token for the user called ``name``."""
    token = generate_token()
    async with db.write() as conn:
        user_id = await store.user_named(conn, name)
        if user_id is None:
            raise NotFound(f"No user named {name!r}.")
        await store.insert_token(conn, user_id, hash_token(token))
    _issued(hash_token(token))
    return token


async def ensure_admin_token(db: Database, token: str) -> bool:
    """Make sure ``token`` authenticates a superuser (creating user ``admin`` if needed);
    False, with an error logged, when it was revoked once: a revocation is not undone by
    the next start (the operator sets a new ``TASKHUB_ADMIN_TOKEN``)."""
    digest = hash_token(token)
    async with db.write() as conn:
        if await store.was_revoked(conn, digest):
            log.error(
                "TASKHUB_ADMIN_TOKEN was revoked (taskhub tokens revoke) and is not granted "
                "again; set a new one to have an admin token"
            )
            return False
        user_id = await store.find_token(conn, digest)
        if user_id is not None:
            await store.make_superuser(conn, user_id)
            return True
        name = "admin"
        if await store.name_taken(conn, name):
            name = f"admin-{secrets.token_hex(3)}"
        user_id = new_id()
        if not await store.insert_user(conn, user_id, name, superuser=True):
            raise ValidationFailed(f"A user named {name!r} already exists.")
        await store.insert_token(conn, user_id, digest)
    _issued(digest)
    return True


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
    """Delete the token and remember it as revoked; False if no such token exists."""
    digest = hash_token(token)
    async with db.write() as conn:
        if not await store.delete_token(conn, digest):
            return False
        await store.record_revoked(conn, [digest])
        return True


async def revoke_tokens_of(db: Database, name: str) -> int:
    """Delete every token of the user called ``name`` and remember them as revoked; how
    many there were."""
    async with db.write() as conn:
        user_id = await store.user_named(conn, name)
        if user_id is None:
            raise NotFound(f"No user named {name!r}.")
        digests = await store.delete_tokens_of(conn, user_id)
        await store.record_revoked(conn, digests)
        return len(digests)


# Every Authenticator of this process, so that a token issued here is taken off their
# caches of wrong tokens at once (``_issued``).
_authenticators: weakref.WeakSet[Authenticator] = weakref.WeakSet()


def _issued(digest: str) -> None:
    """A token of hash ``digest`` was just issued: no cache here may call it wrong."""
    for authenticator in list(_authenticators):
        authenticator.forget_miss(digest)


class Authenticator:
    """Resolves bearer tokens to principals, with short in-process caches so that the hot
    path does not pay a query per request: whom a token authenticates (for ``ttl``
    seconds: a revoked token stops working within them), and which tokens authenticate
    nobody (for ``miss_ttl`` seconds: a client repeating a wrong token costs no read).

    ``watch`` lets a request that waits (a long-poll) learn that its token was revoked:
    the tokens of every waiting request are re-read together, in one query, every
    ``max(ttl, 1)`` seconds."""

    def __init__(
        self,
        db: Database,
        ttl: float,
        miss_ttl: float = 0.0,
        on_miss: Callable[[str], None] | None = None,
    ) -> None:
        self._db = db
        self._on_miss = on_miss  # told "cache" or "database" for each wrong token
        self._ttl = ttl
        self._miss_ttl = miss_ttl
        self.recheck_seconds = max(ttl, 1.0)
        self._cache: dict[str, tuple[Principal, float]] = {}
        self._misses: dict[str, float] = {}  # digest -> until when it is known wrong
        self._watched: dict[str, set[asyncio.Event]] = {}
        self._rechecking: asyncio.Task[None] | None = None
        _authenticators.add(self)

    async def authenticate(self, token: str) -> Principal | None:
        digest = hash_token(token)
        now = time.monotonic()
        hit = self._cache.get(digest)
        if hit is not None and hit[1] > now:
            return hit[0]
        missed = self._misses.get(digest)
        if missed is not None and missed > now:
            if self._on_miss is not None:
                self._on_miss("cache")
            return None
        principal = (await self.current([digest])).get(digest)
        if principal is None and self._on_miss is not None:
            self._on_miss("database")
        return principal

    async def current(self, digests: Collection[str]) -> dict[str, Principal]:
        """Whom each of these token digests authenticates now, read in one query (a digest
        missing from the answer is a revoked or unknown token); refreshes the caches."""
        if not digests:
            return {}
        async with self._db.read() as conn:
            found = await store.principals_of(conn, digests)
        now = time.monotonic()
        for digest in digests:
            principal = found.get(digest)
            if principal is None:
                self._cache.pop(digest, None)
                if self._miss_ttl > 0:
                    if len(self._misses) >= CACHE_SIZE:
                        self._misses.clear()
                    self._misses[digest] = now + self._miss_ttl
            else:
                self._misses.pop(digest, None)
                if self._ttl > 0:
                    if len(self._cache) >= CACHE_SIZE:
                        self._cache.clear()
                    self._cache[digest] = (principal, now + self._ttl)
        return found

    def forget_miss(self, digest: str) -> None:
        """Stop calling the token of hash ``digest`` wrong (it was just issued)."""
        self._misses.pop(digest, None)

    @contextlib.contextmanager
    def watch(self, digest: str) -> Iterator[asyncio.Event]:
        """An event set once the token of hash ``digest`` authenticates nobody any more
        (revoked), found within ``recheck_seconds`` (and a query). A re-check that fails
        (the database unavailable) tells nothing: the next one tries again."""
        revoked = asyncio.Event()
        self._watched.setdefault(digest, set()).add(revoked)
        if self._rechecking is None:
            self._rechecking = asyncio.create_task(
                self._recheck_watched(), name="taskhub-token-recheck"
            )
        try:
            yield revoked
        finally:
            watchers = self._watched.get(digest)
            if watchers is not None:
                watchers.discard(revoked)
                if not watchers:
                    del self._watched[digest]

    async def _recheck_watched(self) -> None:
        """Every ``recheck_seconds`` while anything is watched: read every watched token
        in one query and tell the watchers of those that authenticate nobody now."""
        try:
            while self._watched:
                await asyncio.sleep(self.recheck_seconds)
                digests = list(self._watched)
                if not digests:
                    break
                try:
                    found = await self.current(digests)
                except Exception as exc:
                    log.warning("re-checking the tokens of waiting requests failed: %s", exc)
                    continue
                for digest in digests:
                    if digest not in found:
                        for revoked in self._watched.get(digest, ()):
                            revoked.set()
        finally:
            self._rechecking = None

    async def close(self) -> None:
        """Stop re-checking (the hub is closing; every waiting request was answered)."""
        task = self._rechecking
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
