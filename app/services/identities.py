"""Who a caller is: Taskhub's own ``th_`` tokens, then the other sources of identity a hub
is given (a host application's ``authenticate`` hook, an identity provider's JWTs), in
that order; the first that knows the caller answers.

Every door (REST, long-polls, Socket.IO) asks ``Identities.identify`` with a ``Caller``:
the request (or the socket's handshake request), the bearer token it carries, and for a
socket its sid and the ``auth`` of its CONNECT. A principal a source other than the
tokens vouches for gets a user row on first sight (``ensure_user``): tasks, workers and
the ownership rules name users by id, whoever signed them in.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from starlette.requests import HTTPConnection

from taskhub.rules.errors import IdentityUnavailable
from taskhub.rules.records import Principal
from taskhub.services.users import TOKEN_PREFIX, Authenticator, hash_token
from taskhub.store import users as store
from taskhub.store.database import Database

log = logging.getLogger(__name__)
# The most principals whose user rows are known to be current (past it the memory of them
# starts empty again, and each is written once more on its next request).
KNOWN_USERS = 10_000


@dataclass(frozen=True, slots=True)
class Caller:
    """What a request shows of its caller. ``connection``: the HTTP request, or for a
    socket the request that opened it (its headers, cookies and query)."""

    connection: HTTPConnection
    token: str | None  # the bearer token (``Authorization``, or a socket's ``auth["token"]``)
    sid: str | None = None  # the socket, for a Socket.IO event
    auth: Any = None  # the socket's CONNECT payload


@dataclass(frozen=True, slots=True)
class Identity:
    """A signed-in caller and how long that holds: a ``th_`` token until it is revoked
    (``token_digest``, re-checked), a JWT until ``expires_at`` (epoch seconds)."""

    principal: Principal
    token_digest: str | None = None
    expires_at: float | None = None


class IdentitySource(Protocol):
    """One way of knowing callers: the identity, or None when this source does not know
    this caller (the next one is asked). Raises ``IdentityUnavailable`` when it cannot
    tell now (503)."""

    async def identify(self, caller: Caller) -> Identity | None: ...


HostAuthenticate = Callable[[Caller], Awaitable[Principal | None]]


@dataclass
class HostIdentities:
    """A host application's ``authenticate`` hook as a source. Its principals are the
    host's to revoke: a socket it vouched for stays signed in until it disconnects."""

    hook: HostAuthenticate

    async def identify(self, caller: Caller) -> Identity | None:
        try:
            principal = await self.hook(caller)
        except Exception as exc:
            log.exception("the host's authenticate hook failed")
            raise IdentityUnavailable(
                f"Signing in is unavailable: the host's authenticate hook raised "
                f"{type(exc).__name__}."
            ) from None
        if principal is None:
            return None
        if not isinstance(principal, Principal):
            log.error("the host's authenticate hook returned %r, not a Principal", principal)
            raise IdentityUnavailable("Signing in is unavailable: the host's hook misbehaved.")
        return Identity(principal)


@dataclass
class Identities:
    """The hub's sources of identity: its tokens first, then ``sources`` in order."""

    db: Database
    tokens: Authenticator
    sources: Sequence[IdentitySource] = ()
    _known: dict[Principal, None] = field(default_factory=dict)
    _writing: dict[Principal, asyncio.Future[None]] = field(default_factory=dict)

    async def identify(self, caller: Caller) -> Identity | None:
        token = caller.token
        if token is not None and token.startswith(TOKEN_PREFIX):
            principal = await self.tokens.authenticate(token)
            return None if principal is None else Identity(principal, hash_token(token))
        for source in self.sources:
            identity = await source.identify(caller)
            if identity is not None:
                if identity.expires_at is not None and identity.expires_at <= time.time():
                    return None
                await self.ensure_user(identity.principal)
                return identity
        if token is not None:
            # Known to no other source: it may still be one of ours (an admin token set by
            # the operator may be any string).
            principal = await self.tokens.authenticate(token)
            return None if principal is None else Identity(principal, hash_token(token))
        return None

    async def ensure_user(self, principal: Principal) -> None:
        """The principal's user row exists and carries its name and superuser flag (written
        once per change; concurrent first requests of one principal write once)."""
        if principal in self._known:
            return
        pending = self._writing.get(principal)
        if pending is not None:
            await asyncio.shield(pending)
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._writing[principal] = done
        try:
            async with self.db.write() as conn:
                await store.upsert_user(
                    conn, principal.id, principal.name, superuser=principal.is_superuser
                )
            if len(self._known) >= KNOWN_USERS:
                self._known.clear()
            self._known[principal] = None
            done.set_result(None)
        except BaseException as exc:
            done.set_exception(exc)
            done.exception()  # retrieved: a caller waiting on it re-raises it
            raise
        finally:
            del self._writing[principal]

    async def close(self) -> None:
        """Stop re-checking tokens; let go of the sources' connections (a JWKS client)."""
        await self.tokens.close()
        for source in self.sources:
            closing = getattr(source, "aclose", None)
            if closing is not None:
                await closing()

    @contextlib.contextmanager
    def watch(self, identity: Identity) -> Iterator[asyncio.Event]:
        """An event set once the identity no longer holds: its token revoked (found within
        the tokens' re-check interval) or its expiry passed."""
        if identity.token_digest is not None:
            with self.tokens.watch(identity.token_digest) as revoked:
                yield revoked
            return
        ended = asyncio.Event()
        timer = None
        if identity.expires_at is not None:
            delay = max(identity.expires_at - time.time(), 0.0)
            timer = asyncio.get_running_loop().call_later(delay, ended.set)
        try:
            yield ended
        finally:
            if timer is not None:
                timer.cancel()
