"""Bearer JWTs as a source of identity (``services/jwt_identities.py``), against a real
OpenID Connect provider on 127.0.0.1 (``tests/support/oidc_provider.py``): which tokens are
accepted, which are refused (None: 401 at the door) and when signing in is unavailable
(``IdentityUnavailable``: 503); how claims and userinfo map to a user; the user row made on
first sight, on both engines."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import jwt
import pytest
from pydantic import ValidationError
from starlette.requests import HTTPConnection

from taskhub.rules.errors import IdentityUnavailable
from taskhub.services.identities import Caller, Identities, Identity
from taskhub.services.jwt_identities import ClaimMapping, JwtIdentities, jwt_identities
from taskhub.services.users import Authenticator, list_users
from taskhub.settings import Settings, setting_errors
from taskhub.store import users as user_store
from taskhub.store.database import Database
from tests.support.oidc_provider import AUDIENCE, OidcProvider, SigningKey, running_oidc_provider
from tests.support.server import free_port

SECRET = "zndraw-shared-secret-0123456789abcdef"
ZNDRAW_AUDIENCE = "fastapi-users:auth"
ALICE = uuid.UUID("5f0c6f64-8a42-4a39-9d0e-3c1b2f1f6a01")

Source = Callable[..., JwtIdentities]


@pytest.fixture(scope="module")
def running_provider() -> Iterator[OidcProvider]:
    with running_oidc_provider() as provider:
        yield provider


@pytest.fixture
def provider(running_provider: OidcProvider) -> OidcProvider:
    running_provider.reset()
    return running_provider


@pytest.fixture
async def source(provider: OidcProvider) -> AsyncIterator[Source]:
    """Makes JWT sources from ``TASKHUB_JWT_*`` settings (as keyword arguments), by default
    the provider's issuer and audience; closes them after the test."""
    made: list[JwtIdentities] = []

    def make(**settings: Any) -> JwtIdentities:
        settings = {"jwt_issuer": provider.issuer, "jwt_audience": [AUDIENCE], **settings}
        built = jwt_identities(Settings(**settings))
        assert built is not None
        made.append(built)
        return built

    yield make
    for built in made:
        await built.aclose()


def caller(token: str | None) -> Caller:
    return Caller(HTTPConnection({"type": "http", "headers": []}), token)


async def identify(source: JwtIdentities, token: str) -> Identity | None:
    return await source.identify(caller(token))


def b64(data: dict[str, Any] | bytes) -> str:
    raw = data if isinstance(data, bytes) else json.dumps(data).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def hs256(claims: dict[str, Any], secret: bytes, **header: Any) -> str:
    """An HS256 token signed by hand (PyJWT itself refuses a PEM key as an HMAC secret)."""
    signing_input = f"{b64({'alg': 'HS256', 'typ': 'JWT', **header})}.{b64(claims)}"
    signature = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(signature)}"


# Accepted tokens


@pytest.mark.parametrize("algorithm", ["RS256", "ES256"])
async def test_a_token_of_the_provider_signs_in(
    provider: OidcProvider, source: Source, algorithm: str
) -> None:
    key = next(key for key in provider.published if key.algorithm == algorithm)
    exp = int(time.time()) + 120
    identity = await identify(source(), provider.sign(key, exp=exp, groups=["lab"]))
    assert identity is not None
    assert identity.principal.name == "alice"
    assert identity.principal.groups == frozenset({"lab"})
    assert not identity.principal.is_superuser
    assert identity.expires_at == exp
    assert identity.token_digest is None
    assert provider.discovery_reads == 1 and provider.jwks_reads == 1


async def test_the_keys_are_read_once_for_many_tokens(
    provider: OidcProvider, source: Source
) -> None:
    jwts = source()
    for n in range(5):
        assert await identify(jwts, provider.sign(sub=f"user-{n}")) is not None
    assert provider.jwks_reads == 1


async def test_a_shared_secret_signs_in_without_an_issuer(source: Source) -> None:
    """ZnDraw's tokens: HS256, a UUID ``sub``, ``aud: fastapi-users:auth``, no ``iss``."""
    jwts = source(jwt_issuer=None, jwt_secret=SECRET, jwt_audience=[ZNDRAW_AUDIENCE])
    token = jwt.encode(
        {"sub": str(ALICE), "aud": [ZNDRAW_AUDIENCE], "exp": int(time.time()) + 60},
        SECRET,
        algorithm="HS256",
    )
    identity = await identify(jwts, token)
    assert identity is not None
    assert identity.principal.id == ALICE
    assert identity.principal.name == str(ALICE)  # no name claim: the user id


# Refused tokens: None, the door answers 401


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param({"exp": int(time.time()) - 3600}, id="expired"),
        pytest.param({"nbf": int(time.time()) + 3600}, id="not-yet-valid"),
        pytest.param({"aud": "another-client"}, id="wrong-aud"),
        pytest.param({"aud": None}, id="no-aud"),
        pytest.param({"exp": None}, id="no-exp"),
        pytest.param({"exp": 10**400}, id="exp-past-any-time"),
        pytest.param({"exp": "soon"}, id="exp-not-a-time"),
        pytest.param({"sub": None}, id="no-sub"),
        pytest.param({"sub": ""}, id="empty-sub"),
    ],
)
async def test_a_token_that_does_not_hold_is_refused(
    provider: OidcProvider, source: Source, claims: dict[str, Any]
) -> None:
    assert await identify(source(), provider.sign(**claims)) is None


async def test_the_leeway_forgives_a_little_clock_skew(
    provider: OidcProvider, source: Source
) -> None:
    token = provider.sign(exp=int(time.time()) - 10)
    assert await identify(source(jwt_leeway_seconds=30), token) is not None
    assert await identify(source(jwt_leeway_seconds=0), token) is None


async def test_a_refusal_is_logged_at_debug_with_its_reason_never_the_token(
    provider: OidcProvider, source: Source, caplog: pytest.LogCaptureFixture
) -> None:
    token = provider.sign(aud="another-client")
    with caplog.at_level(logging.DEBUG, logger="taskhub.services.jwt_identities"):
        assert await identify(source(), token) is None
    assert "JWT refused: Audience doesn't match" in caplog.text
    assert token not in caplog.text


async def test_another_issuers_token_is_left_to_other_sources_unread(
    provider: OidcProvider, source: Source
) -> None:
    token = provider.sign(iss="https://elsewhere.example")
    assert await identify(source(), token) is None
    assert provider.discovery_reads == provider.jwks_reads == 0


@pytest.mark.parametrize(
    "token", ["th_not-a-jwt", "plain", "a.b.c", "e30.e30.", "", "\ud800.e30.e30", "a.b.c.d"]
)
async def test_what_is_not_a_jwt_is_left_to_other_sources(source: Source, token: str) -> None:
    assert await identify(source(), token) is None


async def test_no_token_is_no_one(source: Source) -> None:
    assert await source().identify(caller(None)) is None


@pytest.mark.parametrize("alg", ["none", "None", "NONE"])
async def test_an_unsigned_token_is_refused(
    provider: OidcProvider, source: Source, alg: str
) -> None:
    token = f"{b64({'alg': alg, 'typ': 'JWT'})}.{b64(provider.claims())}."
    jwts = source(jwt_secret=SECRET, jwt_algorithms="HS256,RS256,ES256")
    assert await identify(jwts, token) is None


def test_the_none_algorithm_cannot_be_configured() -> None:
    with pytest.raises(ValidationError, match="'none' is not one of"):
        Settings(jwt_secret=SECRET, jwt_algorithms=["HS256", "none"])
    with pytest.raises(ValueError, match="'none' is never accepted"):
        JwtIdentities(algorithms=["none"])


async def test_hmac_keyed_with_the_providers_public_key_is_refused(
    provider: OidcProvider, source: Source
) -> None:
    """The algorithm confusion attack: an HS256 token whose HMAC secret is the provider's
    public RSA key, named by its ``kid``."""
    key = provider.key
    token = hs256(provider.claims(), key.public_pem(), kid=key.kid)
    assert await identify(source(), token) is None  # HS256 not configured
    both = source(jwt_secret=SECRET, jwt_algorithms=["HS256", "RS256"])
    assert await identify(both, token) is None  # HS256 only ever with the secret
    assert await identify(both, hs256(provider.claims(), SECRET.encode())) is not None


async def test_a_key_is_used_only_for_its_own_algorithm(
    provider: OidcProvider, source: Source
) -> None:
    """A JWKS key that names ``alg: ES256`` does not verify an RS256 token claiming its
    ``kid``, nor an RSA key an ES256 one."""
    ec_key = next(key for key in provider.published if key.algorithm == "ES256")
    rsa_key = next(key for key in provider.published if key.algorithm == "RS256")
    forged = provider.sign(rsa_key, headers={"kid": ec_key.kid})
    assert await identify(source(), forged) is None


# Keys that rotate, and a provider that is down


async def test_a_rotated_key_is_read_on_its_first_token(provider: OidcProvider) -> None:
    jwts = JwtIdentities(
        algorithms=["RS256"], issuer=provider.issuer, audience=[AUDIENCE], keys_refresh_interval=0
    )
    try:
        old = provider.sign()
        assert await identify(jwts, old) is not None
        provider.rotate()
        assert await identify(jwts, provider.sign()) is not None  # unknown kid: JWKS re-read
        assert provider.jwks_reads == 2
        assert await identify(jwts, old) is None  # its key withdrawn
    finally:
        await jwts.aclose()


async def test_unknown_kids_read_the_keys_at_most_once_per_interval(
    provider: OidcProvider, source: Source
) -> None:
    jwts = source()
    assert await identify(jwts, provider.sign()) is not None
    stranger = SigningKey.generate("RS256")
    for n in range(5):
        forged = provider.sign(stranger, headers={"kid": f"forged-{n}"})
        assert await identify(jwts, forged) is None
    assert provider.jwks_reads == 1  # the interval (10 s) has not passed


async def test_a_provider_whose_keys_cannot_be_read_makes_signing_in_unavailable(
    provider: OidcProvider,
) -> None:
    jwts = JwtIdentities(
        algorithms=["RS256"],
        issuer=provider.issuer,
        audience=[AUDIENCE],
        keys_refresh_interval=0.2,
    )
    try:
        provider.jwks_down = True
        with pytest.raises(IdentityUnavailable, match="answered 503") as caught:
            await identify(jwts, provider.sign())
        assert caught.value.status == 503
        with pytest.raises(IdentityUnavailable):  # within the interval: not read again
            await identify(jwts, provider.sign())
        assert provider.jwks_reads == 1
        provider.jwks_down = False
        await asyncio.sleep(0.25)
        assert await identify(jwts, provider.sign()) is not None
    finally:
        await jwts.aclose()


async def test_keys_held_serve_while_the_provider_is_down(provider: OidcProvider) -> None:
    """A known key still verifies; only a token naming a key not held needs the provider."""
    jwts = JwtIdentities(
        algorithms=["RS256"], issuer=provider.issuer, audience=[AUDIENCE], keys_refresh_interval=0
    )
    try:
        assert await identify(jwts, provider.sign()) is not None
        provider.jwks_down = True
        assert await identify(jwts, provider.sign()) is not None
        with pytest.raises(IdentityUnavailable):
            await identify(jwts, provider.sign(SigningKey.generate("RS256")))
    finally:
        await jwts.aclose()


async def test_an_unreachable_provider_makes_signing_in_unavailable(
    provider: OidcProvider, source: Source
) -> None:
    """Nobody listens at the issuer: 503, not a crash (and the token is not the issuer's
    to refuse: its ``iss`` names the unreachable one)."""
    issuer = f"http://127.0.0.1:{free_port()}"
    jwts = source(jwt_issuer=issuer)
    with pytest.raises(IdentityUnavailable, match="ConnectError"):
        await identify(jwts, provider.sign(iss=issuer))


# Claims and userinfo


def test_a_subject_that_is_a_uuid_is_the_user_id() -> None:
    principal = ClaimMapping().principal({"sub": str(ALICE)}, "https://id.example")
    assert principal.id == ALICE


async def test_another_subject_gets_a_stable_id_of_issuer_and_subject(
    provider: OidcProvider, source: Source
) -> None:
    jwts = source()
    first = await identify(jwts, provider.sign(sub="248289761001"))
    again = await identify(jwts, provider.sign(sub="248289761001", preferred_username="al"))
    other = await identify(jwts, provider.sign(sub="248289761002"))
    assert first is not None and again is not None and other is not None
    expected = uuid.uuid5(uuid.NAMESPACE_URL, f"{provider.issuer}#248289761001")
    assert first.principal.id == again.principal.id == expected
    assert other.principal.id != expected
    # the same subject at another issuer is another user
    assert ClaimMapping().principal({"sub": "248289761001"}, "https://b.example").id != expected


@pytest.mark.parametrize(
    ("claims", "name"),
    [
        ({"preferred_username": "alice", "email": "a@lab.example"}, "alice"),
        ({"preferred_username": " ", "email": "a@lab.example"}, "a@lab.example"),
        ({"preferred_username": 7}, "the-sub"),
        ({}, "the-sub"),
        ({"preferred_username": "x" * 300}, "x" * 128),
    ],
)
def test_the_name_is_the_first_name_claim_present(claims: dict[str, Any], name: str) -> None:
    assert ClaimMapping().principal({"sub": "the-sub", **claims}, "").name == name


@pytest.mark.parametrize(
    ("mapping", "claims", "superuser"),
    [
        (ClaimMapping(superuser_claim="is_superuser"), {"is_superuser": True}, True),
        (ClaimMapping(superuser_claim="is_superuser"), {"is_superuser": "true"}, True),
        (ClaimMapping(superuser_claim="is_superuser"), {"is_superuser": 1}, False),
        (ClaimMapping(superuser_claim="is_superuser"), {}, False),
        (ClaimMapping(), {"is_superuser": True}, False),  # no claim configured
        (ClaimMapping(superuser_group="admins"), {"groups": ["lab", "admins"]}, True),
        (ClaimMapping(superuser_group="admins"), {"groups": ["lab"]}, False),
        (
            ClaimMapping(groups_claim="realm_access.roles", superuser_group="admins"),
            {"realm_access": {"roles": ["admins"]}},
            True,
        ),
    ],
)
def test_a_superuser_by_claim_or_group(
    mapping: ClaimMapping, claims: dict[str, Any], superuser: bool
) -> None:
    assert mapping.principal({"sub": "s", **claims}, "").is_superuser is superuser


def test_groups_are_the_strings_of_the_groups_claim() -> None:
    mapping = ClaimMapping()
    assert mapping.principal({"sub": "s", "groups": ["a", 3, "b"]}, "").groups == {"a", "b"}
    assert mapping.principal({"sub": "s", "groups": "a"}, "").groups == {"a"}
    assert mapping.principal({"sub": "s", "groups": {"a": 1}}, "").groups == frozenset()


async def test_the_userinfo_says_who_is_a_superuser(provider: OidcProvider, source: Source) -> None:
    """ZnDraw's case: the token carries no roles; ``GET /v1/auth/users/me`` with it does."""
    jwts = source(
        jwt_issuer=None,
        jwt_secret=SECRET,
        jwt_audience=[ZNDRAW_AUDIENCE],
        jwt_userinfo_url=f"{provider.issuer}/v1/auth/users/me",
        jwt_superuser_claim="is_superuser",
        jwt_name_claims="email",
    )
    claims = {"sub": str(ALICE), "aud": [ZNDRAW_AUDIENCE], "exp": int(time.time()) + 60}
    token = jwt.encode(claims, SECRET, algorithm="HS256")
    provider.userinfo[token] = {
        "id": str(ALICE),
        "email": "alice@lab.example",
        "is_active": True,
        "is_superuser": True,
    }
    for _ in range(3):
        identity = await identify(jwts, token)
        assert identity is not None
        assert identity.principal.id == ALICE
        assert identity.principal.name == "alice@lab.example"
        assert identity.principal.is_superuser
    assert provider.userinfo_reads == 1  # cached per token
    other = jwt.encode({**claims, "exp": claims["exp"] + 1}, SECRET, algorithm="HS256")
    assert await identify(jwts, other) is None  # the userinfo refuses it (401)


async def test_a_userinfo_naming_another_subject_is_refused(
    provider: OidcProvider, source: Source
) -> None:
    jwts = source(jwt_userinfo_url=f"{provider.issuer}/userinfo")
    token = provider.sign()
    provider.userinfo[token] = {"sub": "mallory-sub", "preferred_username": "mallory"}
    assert await identify(jwts, token) is None


async def test_an_unreachable_userinfo_makes_signing_in_unavailable(
    provider: OidcProvider, source: Source
) -> None:
    jwts = source(jwt_userinfo_url=f"http://127.0.0.1:{free_port()}/userinfo")
    with pytest.raises(IdentityUnavailable, match="userinfo"):
        await identify(jwts, provider.sign())


# The user row, both engines


async def test_first_sight_creates_the_user_row(
    db: Database, provider: OidcProvider, source: Source
) -> None:
    jwts = source(jwt_superuser_group="admins")
    identities = Identities(db, Authenticator(db, ttl=5.0), sources=[jwts])
    token = provider.sign(sub="248289761001", preferred_username="carol", groups=["admins"])
    identity = await identities.identify(caller(token))
    assert identity is not None
    async with db.read() as conn:
        assert await user_store.user_named(conn, "carol") == identity.principal.id
    assert [(u.name, u.is_superuser, u.tokens) for u in await list_users(db)] == [
        ("carol", True, 0)
    ]
    renamed = provider.sign(sub="248289761001", preferred_username="carol-b", groups=[])
    again = await identities.identify(caller(renamed))
    assert again is not None and again.principal.id == identity.principal.id
    assert [(u.name, u.is_superuser) for u in await list_users(db)] == [("carol-b", False)]


async def test_an_expired_token_signs_no_one_in_and_writes_nothing(
    db: Database, provider: OidcProvider, source: Source
) -> None:
    identities = Identities(db, Authenticator(db, ttl=5.0), sources=[source()])
    assert await identities.identify(caller(provider.sign(exp=int(time.time()) - 3600))) is None
    assert await list_users(db) == []


# Settings


def test_without_a_secret_or_an_issuer_there_is_no_jwt_source() -> None:
    assert jwt_identities(Settings()) is None


@pytest.mark.parametrize(
    ("settings", "algorithms"),
    [
        ({"jwt_secret": SECRET}, ["HS256"]),
        ({"jwt_issuer": "https://id.example"}, ["RS256", "ES256"]),
        ({"jwt_secret": SECRET, "jwt_issuer": "https://id.example"}, ["HS256", "RS256", "ES256"]),
    ],
)
def test_the_algorithms_follow_what_is_configured(
    settings: dict[str, Any], algorithms: list[str]
) -> None:
    assert Settings(**settings).jwt_algorithms == algorithms


@pytest.mark.parametrize(
    ("variables", "refusal"),
    [
        ({"TASKHUB_JWT_SECRET": "short"}, "TASKHUB_JWT_SECRET: too short"),
        ({"TASKHUB_JWT_ALGORITHMS": "HS256"}, "TASKHUB_JWT_ALGORITHMS: HS256 needs"),
        ({"TASKHUB_JWT_ALGORITHMS": "RS256"}, "TASKHUB_JWT_ALGORITHMS: RS256 needs"),
        (
            {"TASKHUB_JWT_SECRET": SECRET, "TASKHUB_JWT_ALGORITHMS": "HS512"},
            "TASKHUB_JWT_ALGORITHMS: HS512 needs a TASKHUB_JWT_SECRET of at least 64",
        ),
        ({"TASKHUB_JWT_ISSUER": "id.example"}, "TASKHUB_JWT_ISSUER: not an http"),
        ({"TASKHUB_JWT_USERINFO_URL": "ftp://x/me"}, "TASKHUB_JWT_USERINFO_URL: not an http"),
    ],
)
def test_unusable_jwt_settings_are_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, variables: dict[str, str], refusal: str
) -> None:
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError) as caught:
        Settings()
    described = setting_errors(caught.value)
    assert described.startswith(refusal), described
    assert "short" not in described.replace("too short", "") and SECRET not in described


def test_the_secret_is_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TASKHUB_JWT_SECRET", SECRET)
    monkeypatch.setenv("TASKHUB_JWT_AUDIENCE", "a, b")
    settings = Settings()
    assert SECRET not in repr(settings) and SECRET not in str(settings.model_dump())
    assert settings.jwt_audience == ["a", "b"]
