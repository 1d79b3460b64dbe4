"""Callers signed in by an identity provider: bearer JWTs verified with PyJWT, HMAC-signed
ones with a shared secret, RSA and EC ones with the provider's published keys
(``jwt_keys.ProviderKeys``), their claims (and optionally the provider's userinfo) mapped to
a ``Principal`` as the settings say.

A token this source does not cover (not a JWT, another issuer, an algorithm not
configured) is not its to judge: ``identify`` answers None and the next source is asked.
A JWT it covers but cannot accept (bad signature, expired, wrong audience, no user id) is
None as well, with a debug line saying why; keys or userinfo that cannot be read now raise
``IdentityUnavailable`` (503).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import NAMESPACE_URL, UUID, uuid5

import httpx
import jwt

from taskhub.rules.errors import IdentityUnavailable
from taskhub.rules.records import Principal
from taskhub.services.identities import Caller, Identity
from taskhub.services.jwt_keys import REFRESH_INTERVAL_SECONDS, ProviderKeys, PublicKey
from taskhub.settings import JWT_SECRET_ALGORITHMS, Settings

log = logging.getLogger(__name__)
# How long a request waits for the provider (discovery, JWKS, userinfo).
HTTP_TIMEOUT_SECONDS = 3.0
# The most tokens whose userinfo is cached; past it the cache starts empty again.
USERINFO_CACHE_SIZE = 10_000
MAX_NAME_LENGTH = 128


class Refused(Exception):
    """This source covers the token and does not accept it (the message says why)."""


@dataclass(frozen=True, slots=True)
class ClaimMapping:
    """Which claims say who a caller is. A name may be a dotted path into nested claims
    (``realm_access.roles``)."""

    id_claim: str = "sub"
    name_claims: Sequence[str] = ("preferred_username", "email")
    groups_claim: str = "groups"
    superuser_claim: str | None = None  # a boolean claim
    superuser_group: str | None = None  # or membership of this group

    def principal(self, claims: Mapping[str, Any], issuer: str) -> Principal:
        """The principal the claims describe; ``Refused`` without a user id."""
        subject = claim(claims, self.id_claim)
        if not isinstance(subject, str) or not subject:
            raise Refused(f"no {self.id_claim!r} claim")
        names = (claim(claims, name) for name in self.name_claims)
        name = next((n.strip() for n in names if isinstance(n, str) and n.strip()), subject)
        groups = claim(claims, self.groups_claim)
        if isinstance(groups, str):
            groups = [groups]
        group_set = frozenset(
            g for g in (groups if isinstance(groups, list) else ()) if isinstance(g, str)
        )
        flag = claim(claims, self.superuser_claim) if self.superuser_claim else None
        superuser = flag is True or (isinstance(flag, str) and flag.lower() == "true")
        if self.superuser_group is not None and self.superuser_group in group_set:
            superuser = True
        return Principal(stable_id(issuer, subject), name[:MAX_NAME_LENGTH], superuser, group_set)


def claim(claims: Mapping[str, Any], name: str) -> Any:
    """The claim ``name``, else the value at its dotted path, else None."""
    if name in claims:
        return claims[name]
    value: Any = claims
    for part in name.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def stable_id(issuer: str, subject: str) -> UUID:
    """The user id of ``subject``: itself when it is a UUID (a host application's own user
    ids), else the same UUID at every sign-in, derived from the issuer and the subject."""
    try:
        return UUID(subject)
    except ValueError:
        return uuid5(NAMESPACE_URL, f"{issuer}#{subject}")


class Userinfo:
    """The provider's userinfo endpoint, read with the caller's own token; its answer (or
    its refusal of the token) is cached per token for ``ttl`` seconds, and concurrent
    reads for one token are one request."""

    def __init__(self, url: str, http: httpx.AsyncClient, ttl: float) -> None:
        self.url = url
        self._http = http
        self._ttl = ttl
        self._cache: dict[str, tuple[float, dict[str, Any] | None]] = {}
        self._reading: dict[str, asyncio.Future[dict[str, Any] | None]] = {}

    async def read(self, token: str) -> dict[str, Any] | None:
        """The claims the endpoint answers for ``token``; None when it refuses the token
        (401/403)."""
        digest = hashlib.sha256(token.encode(errors="surrogatepass")).hexdigest()
        cached = self._cache.get(digest)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        pending = self._reading.get(digest)
        if pending is not None:
            return await asyncio.shield(pending)
        done: asyncio.Future[dict[str, Any] | None] = asyncio.get_running_loop().create_future()
        self._reading[digest] = done
        try:
            answer = await self._fetch(token)
            if self._ttl > 0:
                if len(self._cache) >= USERINFO_CACHE_SIZE:
                    self._cache.clear()
                self._cache[digest] = (time.monotonic() + self._ttl, answer)
            done.set_result(answer)
            return answer
        except BaseException as exc:
            done.set_exception(exc)
            done.exception()  # retrieved: a caller waiting on it re-raises it
            raise
        finally:
            del self._reading[digest]

    async def _fetch(self, token: str) -> dict[str, Any] | None:
        try:
            response = await self._http.get(
                self.url, headers={"Authorization": f"Bearer {token}", "Accept": "application/json"}
            )
            if response.status_code in (401, 403):
                return None
            response.raise_for_status()
            answer = response.json()
        except httpx.HTTPStatusError as exc:
            failure = f"it answered {exc.response.status_code}"
        except httpx.HTTPError as exc:
            failure = f"{type(exc).__name__} {exc}".rstrip()
        except ValueError:
            failure = "it answered no JSON"
        else:
            if isinstance(answer, dict):
                return answer
            failure = "it answered no JSON object"
        log.warning("the userinfo endpoint %s could not be read: %s", self.url, failure)
        raise IdentityUnavailable(
            f"Signing in is unavailable: the identity provider's userinfo could not be read "
            f"({failure})."
        )


class JwtIdentities:
    """Bearer JWTs as a source of identity (``identities.IdentitySource``)."""

    def __init__(
        self,
        *,
        algorithms: Sequence[str],
        secret: bytes | None = None,
        issuer: str | None = None,
        audience: Sequence[str] = (),
        leeway: float = 0.0,
        mapping: ClaimMapping = ClaimMapping(),
        userinfo_url: str | None = None,
        userinfo_ttl: float = 0.0,
        keys_refresh_interval: float = REFRESH_INTERVAL_SECONDS,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        if "none" in algorithms or any(
            a in JWT_SECRET_ALGORITHMS and secret is None for a in algorithms
        ):
            raise ValueError("HMAC algorithms need a secret, and 'none' is never accepted")
        self.algorithms = tuple(algorithms)
        self.issuer = issuer
        self.audience = tuple(audience)
        self.leeway = leeway
        self.mapping = mapping
        self._secret = secret
        self._http = http or httpx.AsyncClient(timeout=HTTP_TIMEOUT_SECONDS, follow_redirects=False)
        self._keys = (
            ProviderKeys(issuer, self._http, refresh_interval=keys_refresh_interval)
            if issuer is not None and any(a not in JWT_SECRET_ALGORITHMS for a in algorithms)
            else None
        )
        self._userinfo = Userinfo(userinfo_url, self._http, userinfo_ttl) if userinfo_url else None

    async def aclose(self) -> None:
        """Close the HTTP connections to the provider."""
        await self._http.aclose()

    async def identify(self, caller: Caller) -> Identity | None:
        token = caller.token
        if not token or token.count(".") != 2:
            return None  # not a JWT: another source's token
        try:
            unverified = jwt.decode_complete(token, options={"verify_signature": False})
        except (jwt.PyJWTError, ValueError):  # (ValueError: a lone surrogate, not text)
            return None
        header, payload = unverified["header"], unverified["payload"]
        algorithm = header.get("alg")
        if algorithm not in self.algorithms:
            log.debug("JWT not covered: algorithm %r is not configured", algorithm)
            return None
        if self.issuer is not None and payload.get("iss") != self.issuer:
            log.debug("JWT not covered: issuer %r is not %r", payload.get("iss"), self.issuer)
            return None
        try:
            verified = await self._verified(token, algorithm, header.get("kid"))
            try:
                expires_at = float(verified["exp"])
            except OverflowError:
                raise Refused("its exp is past any time") from None
            claims = verified
            if self._userinfo is not None:
                claims = await self._with_userinfo(token, verified)
            issuer = verified.get("iss")
            issuer = self.issuer or (issuer if isinstance(issuer, str) else "")
            principal = self.mapping.principal(claims, issuer)
        except Refused as exc:
            log.debug("JWT refused: %s", exc)
            return None
        return Identity(principal, expires_at=expires_at)

    async def _verified(self, token: str, algorithm: str, kid: Any) -> dict[str, Any]:
        """The token's claims once its signature, ``exp``, ``nbf``, ``iss`` and ``aud`` hold;
        ``Refused`` otherwise."""
        keys: Sequence[bytes | PublicKey]
        if algorithm in JWT_SECRET_ALGORITHMS:
            assert self._secret is not None  # (the constructor holds it)
            keys = [self._secret]
        else:
            if self._keys is None or not isinstance(kid, str | None):
                raise Refused("no keys for it")
            keys = [key.key for key in await self._keys.matching(kid, algorithm)]
            if not keys:
                raise Refused(f"no signing key {kid!r} for {algorithm}")
        failure: jwt.PyJWTError | None = None
        for key in keys:
            try:
                return jwt.decode(
                    token,
                    key,
                    algorithms=[algorithm],
                    audience=self.audience or None,
                    issuer=self.issuer,
                    leeway=self.leeway,
                    options={"require": ["exp"], "enforce_minimum_key_length": True},
                )
            except jwt.InvalidSignatureError as exc:
                failure = exc  # another key may match (keys without a kid)
            except jwt.PyJWTError as exc:
                raise Refused(str(exc) or type(exc).__name__) from None
        raise Refused(str(failure))

    async def _with_userinfo(self, token: str, claims: dict[str, Any]) -> dict[str, Any]:
        """The token's claims with the userinfo's over them; the user id stays the token's."""
        assert self._userinfo is not None
        info = await self._userinfo.read(token)
        if info is None:
            raise Refused("the userinfo endpoint refused it")
        for name in {"sub", self.mapping.id_claim}:
            if name in info and name in claims and info[name] != claims[name]:
                raise Refused(f"the userinfo names another {name!r}")
        return {**claims, **info, self.mapping.id_claim: claim(claims, self.mapping.id_claim)}


def jwt_identities(settings: Settings) -> JwtIdentities | None:
    """The JWT source the settings describe; None without ``TASKHUB_JWT_SECRET`` or
    ``TASKHUB_JWT_ISSUER``."""
    if settings.jwt_secret is None and settings.jwt_issuer is None:
        return None
    return JwtIdentities(
        algorithms=settings.jwt_algorithms,
        secret=settings.jwt_secret.get_secret_value().encode() if settings.jwt_secret else None,
        issuer=settings.jwt_issuer,
        audience=settings.jwt_audience,
        leeway=settings.jwt_leeway_seconds,
        mapping=ClaimMapping(
            id_claim=settings.jwt_id_claim,
            name_claims=tuple(settings.jwt_name_claims),
            groups_claim=settings.jwt_groups_claim,
            superuser_claim=settings.jwt_superuser_claim,
            superuser_group=settings.jwt_superuser_group,
        ),
        userinfo_url=settings.jwt_userinfo_url,
        userinfo_ttl=settings.jwt_userinfo_cache_seconds,
    )
