"""An identity provider's signing keys: the JWKS that OpenID Connect discovery of its issuer
URL names (``{issuer}/.well-known/openid-configuration`` → ``jwks_uri``), read over HTTP
without blocking the event loop, cached, and read again when a token names a key it does
not hold (the provider rotated its keys), at most once per ``refresh_interval``."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx
from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from jwt import PyJWK, PyJWTError

from taskhub.rules.errors import IdentityUnavailable

log = logging.getLogger(__name__)
# An unknown ``kid`` reads the JWKS again at most this often (a stream of forged ``kid``s
# costs the provider one request per interval).
REFRESH_INTERVAL_SECONDS = 10.0
# Keys held longer than this are read again before use (a key the provider withdrew stops
# verifying); a failed read then keeps the keys held.
MAX_AGE_SECONDS = 3600.0
# The curve each ECDSA algorithm signs with (RFC 7518 3.4).
EC_CURVES = {"ES256": "secp256r1", "ES384": "secp384r1", "ES512": "secp521r1"}

PublicKey = RSAPublicKey | EllipticCurvePublicKey


class KeysUnreadable(Exception):
    """The discovery document or the JWKS could not be read or made no sense."""


@dataclass(frozen=True, slots=True)
class SigningKey:
    """One public key of the JWKS: its ``kid``, the algorithm it is limited to (its JWK's
    ``alg``, if any) and the key."""

    kid: str | None
    algorithm: str | None
    key: PublicKey

    def verifies(self, algorithm: str) -> bool:
        """Whether a signature of ``algorithm`` may be checked with this key: RSA keys for
        RS*/PS*, EC keys of the algorithm's own curve for ES*; never HMAC."""
        if self.algorithm is not None and self.algorithm != algorithm:
            return False
        if algorithm.startswith(("RS", "PS")):
            return isinstance(self.key, RSAPublicKey)
        curve = EC_CURVES.get(algorithm)
        return isinstance(self.key, EllipticCurvePublicKey) and self.key.curve.name == curve


def signing_key(jwk: Mapping[str, Any]) -> SigningKey | None:
    """The JWK as a key that verifies signatures, or None: not for signatures (``use``), not
    RSA or EC (an ``oct`` key would be an HMAC secret), or not a usable key."""
    if jwk.get("use", "sig") != "sig" or jwk.get("kty") not in ("RSA", "EC"):
        return None
    kid, algorithm = jwk.get("kid"), jwk.get("alg")
    if not isinstance(kid, str | None) or not isinstance(algorithm, str | None):
        return None
    try:
        key = PyJWK(dict(jwk)).key
    except (PyJWTError, ValueError, TypeError, KeyError) as exc:
        log.debug("JWKS key %r skipped: %s", kid, exc)
        return None
    if not isinstance(key, PublicKey):  # a private key published by mistake: its public half
        key = key.public_key()
    return SigningKey(kid, algorithm, key)


class ProviderKeys:
    """The signing keys of the provider at ``issuer``. ``matching`` raises
    ``IdentityUnavailable`` when they are needed and cannot be read."""

    def __init__(
        self,
        issuer: str,
        http: httpx.AsyncClient,
        *,
        refresh_interval: float = REFRESH_INTERVAL_SECONDS,
        max_age: float = MAX_AGE_SECONDS,
    ) -> None:
        self.issuer = issuer
        self._http = http
        self._refresh_interval = refresh_interval
        self._max_age = max_age
        self._keys: tuple[SigningKey, ...] = ()
        self._jwks_uri: str | None = None
        self._read_at: float | None = None  # (monotonic) when the keys held were read
        self._tried_at = -math.inf  # (monotonic) the last attempt to read them
        self._failure: str | None = None  # why that attempt failed
        self._lock = asyncio.Lock()

    async def matching(self, kid: str | None, algorithm: str) -> list[SigningKey]:
        """The keys that may verify a token of this ``kid`` (None: any) and algorithm; the
        JWKS is read first when none is held yet or the keys are old, and again (within the
        rate limit) when none matches."""
        if self._read_at is None or time.monotonic() - self._read_at >= self._max_age:
            await self._refresh(keep_held=self._read_at is not None)
        found = self._match(kid, algorithm)
        if not found:
            await self._refresh(keep_held=False)
            found = self._match(kid, algorithm)
        return found

    def _match(self, kid: str | None, algorithm: str) -> list[SigningKey]:
        return [
            key for key in self._keys if (kid is None or key.kid == kid) and key.verifies(algorithm)
        ]

    async def _refresh(self, *, keep_held: bool) -> None:
        """Read the keys again unless they were tried within the rate limit. A failure
        raises ``IdentityUnavailable`` unless ``keep_held`` (the keys held still serve)."""
        async with self._lock:
            if time.monotonic() - self._tried_at >= self._refresh_interval:
                self._tried_at = time.monotonic()
                try:
                    self._keys = await self._read()
                except KeysUnreadable as exc:
                    self._failure = str(exc)
                    log.warning("the signing keys of %s could not be read: %s", self.issuer, exc)
                else:
                    self._failure = None
                    self._read_at = time.monotonic()
        if self._failure is not None and not keep_held:
            raise IdentityUnavailable(
                f"Signing in is unavailable: the identity provider's keys could not be read "
                f"({self._failure})."
            )

    async def _read(self) -> tuple[SigningKey, ...]:
        if self._jwks_uri is None:
            discovery = await self._get_json(
                f"{self.issuer.rstrip('/')}/.well-known/openid-configuration"
            )
            if discovery.get("issuer") != self.issuer:
                raise KeysUnreadable(
                    f"its discovery document names the issuer {discovery.get('issuer')!r}"
                )
            jwks_uri = discovery.get("jwks_uri")
            if not isinstance(jwks_uri, str) or not jwks_uri.startswith(("https://", "http://")):
                raise KeysUnreadable("its discovery document names no jwks_uri")
            self._jwks_uri = jwks_uri
        try:
            jwks = await self._get_json(self._jwks_uri)
        except KeysUnreadable:
            self._jwks_uri = None  # discovered again next time (it may have moved)
            raise
        listed = jwks.get("keys")
        if not isinstance(listed, list):
            raise KeysUnreadable("its JWKS has no list of keys")
        keys = tuple(
            key for key in (signing_key(jwk) for jwk in listed if isinstance(jwk, dict)) if key
        )
        if not keys:
            log.warning("the JWKS of %s holds no RSA or EC signing key", self.issuer)
        return keys

    async def _get_json(self, url: str) -> dict[str, Any]:
        try:
            response = await self._http.get(url, headers={"Accept": "application/json"})
            response.raise_for_status()
            document = response.json()
        except httpx.HTTPStatusError as exc:
            raise KeysUnreadable(f"{url} answered {exc.response.status_code}") from None
        except httpx.HTTPError as exc:
            raise KeysUnreadable(f"{url}: {type(exc).__name__} {exc}".rstrip()) from None
        except ValueError:
            raise KeysUnreadable(f"{url} answered no JSON") from None
        if not isinstance(document, dict):
            raise KeysUnreadable(f"{url} answered no JSON object")
        return document
