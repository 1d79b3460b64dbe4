"""Runtime configuration, read from ``TASKHUB_*`` environment variables."""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticUseDefault
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from taskhub.rules.naming import MAX_CATEGORY_LENGTH
from taskhub.rules.retries import RetryPolicy

DEFAULT_SQLITE_URL = "sqlite+aiosqlite:///taskhub.db"
DATABASE_DRIVERS = ("sqlite+aiosqlite", "postgresql+asyncpg")
DATABASE_URL_FORMS = "sqlite+aiosqlite:///path/to/file.db or postgresql+asyncpg://user@host/db"
REDIS_SCHEMES = ("redis", "rediss", "unix")
DAY_SECONDS = 24 * 3600
# A bound on every duration setting, far past any sensible value and well inside what
# datetime arithmetic, asyncio and Redis take (a lease or timeout is added to "now").
MAX_DURATION_SECONDS = 366 * DAY_SECONDS
MAX_RETENTION_SECONDS = 100 * 366 * DAY_SECONDS
MAX_SQLITE_BUSY_TIMEOUT_MS = DAY_SECONDS * 1000  # SQLite takes 0 for more than 2**31 - 1
# TASKHUB_ADMIN_TOKEN is a superuser's secret: it must be at least this long, made of at
# least this many different characters, all of them visible ASCII (a bearer token has no
# spaces). What ``taskhub users create`` issues (``th_`` + 43 random URL-safe characters)
# passes; so does ``openssl rand -base64 32``.
ADMIN_TOKEN_MIN_LENGTH = 32
ADMIN_TOKEN_MIN_DISTINCT = 16
ADMIN_TOKEN_RULE = (
    f"use at least {ADMIN_TOKEN_MIN_LENGTH} visible ASCII characters without spaces, at least "
    f"{ADMIN_TOKEN_MIN_DISTINCT} of them different"
)
MAKE_ADMIN_TOKEN_COMMAND = (
    """python3 -c 'import secrets; print("th_" + secrets.token_urlsafe(32))'"""
)
# The signature algorithms a JWT may use: HMAC keyed with ``TASKHUB_JWT_SECRET`` (each needs
# a secret at least as long as its hash, RFC 7518 3.2), or a public key of the issuer's JWKS.
JWT_SECRET_ALGORITHMS = {"HS256": 32, "HS384": 48, "HS512": 64}
JWT_KEY_ALGORITHMS = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "ES512",
)

# What a scope may be made of (RFC 6749 3.3: %x21 / %x23-5B / %x5D-7E).
_SCOPE_CHARACTERS = frozenset(chr(c) for c in (0x21, *range(0x23, 0x5C), *range(0x5D, 0x7F)))


def admin_token_is_strong(token: str) -> bool:
    """Whether ``token`` keeps ``ADMIN_TOKEN_RULE``."""
    return (
        len(token) >= ADMIN_TOKEN_MIN_LENGTH
        and all(33 <= ord(char) <= 126 for char in token)
        and len(set(token)) >= ADMIN_TOKEN_MIN_DISTINCT
    )


def duration(
    default: float, *, allow_zero: bool = False, most: float = MAX_DURATION_SECONDS
) -> Any:
    """A setting in seconds: finite, above zero (or at least zero), at most ``most``."""
    if allow_zero:
        return Field(default=default, allow_inf_nan=False, le=most, ge=0)
    return Field(default=default, allow_inf_nan=False, le=most, gt=0)


class DatabaseSettings(BaseSettings):
    """The database alone: what plain ``alembic`` commands read, so that another invalid
    ``TASKHUB_*`` setting does not stand in the way of a migration."""

    model_config = SettingsConfigDict(env_prefix="TASKHUB_", extra="ignore")

    database_url: str = DEFAULT_SQLITE_URL
    # ``transaction``: PostgreSQL is reached through a pooler in transaction mode (PgBouncer's
    # ``pool_mode = transaction``), so the hub keeps no session state across transactions:
    # no named prepared statements, no startup settings, the sweeper lease as a row.
    database_pooler: Literal["none", "transaction"] = "none"

    @field_validator("database_url")
    @classmethod
    def _check_database_url(cls, value: str) -> str:
        """Only the async drivers the hub runs on; the message never repeats a password."""
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            driver = make_url(value).drivername
        except ArgumentError:
            raise ValueError(f"not a database URL; use {DATABASE_URL_FORMS}") from None
        if driver not in DATABASE_DRIVERS:
            raise ValueError(f"unsupported driver {driver!r}; use {DATABASE_URL_FORMS}")
        return value


class Settings(DatabaseSettings):
    """Every knob of the hub; see the configuration table in the README."""

    redis_url: str | None = None
    redis_namespace: str = Field(default="taskhub", pattern=r"^[A-Za-z0-9_.-]{1,64}$")
    # The Socket.IO manager's Redis channel (default ``{redis_namespace}:socketio``): an
    # embedding host sets its own server's, so that what other processes publish (the
    # taskiq worker's events) reaches the host's sockets.
    socketio_channel: str | None = Field(default=None, min_length=1, max_length=256)
    admin_token: str | None = Field(default=None, repr=False)
    allowed_categories: Annotated[list[str], NoDecode] = ["modifiers", "selections", "analysis"]

    worker_timeout_seconds: float = duration(60)
    task_lease_seconds: float = duration(120)
    sweeper_interval_seconds: float = duration(30)
    sweeper_enabled: bool = True
    internal_task_timeout_seconds: float = duration(3600)
    long_poll_max_wait_seconds: int = Field(default=60, ge=0, le=MAX_DURATION_SECONDS)
    socket_disconnect_grace_seconds: float = duration(5, allow_zero=True)
    internal_job_modules: Annotated[list[str], NoDecode] = []
    internal_redelivery_seconds: float = duration(600)
    retry_backoff_seconds: float = duration(1.0, allow_zero=True)
    retry_backoff_max_seconds: float = duration(300.0, allow_zero=True)
    task_retention_seconds: float = duration(
        30 * DAY_SECONDS, allow_zero=True, most=MAX_RETENTION_SECONDS
    )
    retention_batch_size: int = Field(default=1000, gt=0)
    # The optional worker shortcuts (claim with start, PATCH with claim_next, task push);
    # off, the hub ignores them as an older hub does.
    worker_shortcuts: bool = True

    max_body_bytes: int = Field(default=1_048_576, gt=0)
    # CPU seconds one payload's validation may take (and 500,000 keyword applications a
    # second of it); raise it with ``max_body_bytes`` for payloads far past 1 MiB.
    payload_validation_seconds: float = duration(2.0, most=60)
    db_pool_size: int = Field(default=10, gt=0)
    db_pool_timeout_seconds: float = duration(10)
    db_statement_timeout_seconds: float = duration(30)
    sqlite_synchronous: str = "FULL"
    sqlite_busy_timeout_ms: int = Field(default=5000, ge=0, le=MAX_SQLITE_BUSY_TIMEOUT_MS)
    sqlite_cache_size_mb: int = Field(default=64, ge=1)
    sqlite_mmap_size_mb: int = Field(default=256, ge=0)
    auth_cache_seconds: float = duration(5.0, allow_zero=True)
    # How long a wrong token is remembered as wrong (no database read per attempt).
    auth_miss_cache_seconds: float = duration(5.0, allow_zero=True, most=3600)

    # Bearer JWTs of an identity provider (docs/operations.md, "Signing in with an identity
    # provider"): HMAC-signed ones checked with ``jwt_secret``, RSA and EC ones with the keys
    # of the JWKS that OpenID Connect discovery of ``jwt_issuer`` names. Neither set: none.
    jwt_secret: SecretStr | None = None
    jwt_issuer: str | None = None
    jwt_audience: Annotated[list[str], NoDecode] = []
    # Empty: HS256 with a secret, RS256 and ES256 with an issuer.
    jwt_algorithms: Annotated[list[str], NoDecode] = Field(default=[], validate_default=True)
    jwt_leeway_seconds: float = duration(30, allow_zero=True, most=300)
    jwt_id_claim: str = Field(default="sub", min_length=1)
    jwt_name_claims: Annotated[list[str], NoDecode] = ["preferred_username", "email"]
    jwt_groups_claim: str = Field(default="groups", min_length=1)
    jwt_superuser_claim: str | None = None
    jwt_superuser_group: str | None = None
    # Read with the caller's token when its claims alone do not say who it is (ZnDraw's
    # ``/v1/auth/users/me``); its answers are cached per token.
    jwt_userinfo_url: str | None = None
    jwt_userinfo_cache_seconds: float = duration(30, allow_zero=True, most=3600)

    @field_validator("jwt_audience", "jwt_algorithms", "jwt_name_claims", mode="before")
    @classmethod
    def _split_jwt_lists(cls, value: object) -> object:
        """A comma or JSON list."""
        if isinstance(value, str):
            stripped = value.strip()
            if stripped.startswith("["):
                import json

                return json.loads(stripped)
            return [part.strip() for part in stripped.split(",") if part.strip()]
        return value

    @field_validator(
        "jwt_secret",
        "jwt_issuer",
        "jwt_superuser_claim",
        "jwt_superuser_group",
        "jwt_userinfo_url",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("jwt_secret")
    @classmethod
    def _check_jwt_secret(cls, value: SecretStr | None) -> SecretStr | None:
        """At least HS256's 32 bytes; the message never repeats the value."""
        if value is not None and len(value.get_secret_value().encode()) < 32:
            raise ValueError("too short: an HMAC secret needs at least 32 bytes (RFC 7518)")
        return value

    @field_validator("jwt_issuer", "jwt_userinfo_url")
    @classmethod
    def _check_jwt_url(cls, value: str | None) -> str | None:
        from urllib.parse import urlsplit

        if value is None:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise ValueError("not an http:// or https:// URL")
        return value

    @field_validator("jwt_algorithms")
    @classmethod
    def _check_jwt_algorithms(cls, value: list[str], info: ValidationInfo) -> list[str]:
        """Only signature algorithms, each with what verifies it: HMAC with the secret, RSA
        and EC with the issuer's keys (never ``none``, never HMAC with a public key)."""
        secret: SecretStr | None = info.data.get("jwt_secret")
        issuer: str | None = info.data.get("jwt_issuer")
        if not value:
            return (["HS256"] if secret else []) + (["RS256", "ES256"] if issuer else [])
        for algorithm in value:
            if algorithm in JWT_SECRET_ALGORITHMS:
                if secret is None:
                    raise ValueError(f"{algorithm} needs TASKHUB_JWT_SECRET")
                if len(secret.get_secret_value().encode()) < JWT_SECRET_ALGORITHMS[algorithm]:
                    raise ValueError(
                        f"{algorithm} needs a TASKHUB_JWT_SECRET of at least "
                        f"{JWT_SECRET_ALGORITHMS[algorithm]} bytes"
                    )
            elif algorithm in JWT_KEY_ALGORITHMS:
                if issuer is None:
                    raise ValueError(f"{algorithm} needs TASKHUB_JWT_ISSUER (its keys)")
            else:
                raise ValueError(
                    f"{algorithm!r} is not one of "
                    f"{', '.join([*JWT_SECRET_ALGORITHMS, *JWT_KEY_ALGORITHMS])}"
                )
        return list(dict.fromkeys(value))

    # The room page's "Sign in with …" button (docs/operations.md, "Sign-in on the page"):
    # the page is a public OpenID Connect client of ``jwt_issuer`` (authorization code with
    # PKCE, no secret). Unset ``oidc_client_id``: no button, the page as without a provider.
    oidc_client_id: str | None = None
    oidc_scopes: str = "openid profile email"
    oidc_provider_name: str | None = None  # the button's label; unset: the issuer's host

    @field_validator("oidc_client_id", "oidc_provider_name", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("oidc_client_id")
    @classmethod
    def _check_oidc_client_id(cls, value: str | None, info: ValidationInfo) -> str | None:
        """The page signs in with the issuer whose tokens the hub accepts."""
        if value is not None and "jwt_issuer" in info.data and info.data["jwt_issuer"] is None:
            raise ValueError("needs TASKHUB_JWT_ISSUER (the provider the page signs in with)")
        return value

    @field_validator("oidc_scopes")
    @classmethod
    def _check_oidc_scopes(cls, value: str) -> str:
        """Space-separated scopes (RFC 6749 3.3), ``openid`` among them."""
        scopes = value.split()
        if "openid" not in scopes:
            raise ValueError("must include openid (an OpenID Connect sign-in)")
        if any(not all(c in _SCOPE_CHARACTERS for c in scope) for scope in scopes):
            raise ValueError("scopes are printable ASCII without quotes or backslashes")
        return " ".join(dict.fromkeys(scopes))

    # Sockets before they are someone's (docs/operations.md, "Connections before sign-in"):
    # an Engine.IO session that has not completed an authenticated Socket.IO CONNECT within
    # ``socket_connect_timeout_seconds`` is closed; at most ``max_unauthenticated_per_address``
    # such sessions per client address at once.
    socket_connect_timeout_seconds: float = duration(5.0, most=300)
    max_unauthenticated_per_address: int = Field(default=32, gt=0)
    # The largest Socket.IO message the hub reads (Engine.IO closes the connection past it).
    max_socket_message_bytes: int = Field(default=512 * 1024, ge=1024, le=64 * 1024 * 1024)
    # The packets one socket may have waiting for its reader: past it the oldest room events
    # are dropped for a ``resync`` event; past 4 times it (none left to drop) the session is
    # ended (docs/operations.md, "Limits").
    socket_queue_limit: int = Field(default=1000, ge=16, le=1_000_000)

    # Per-user limits (docs/operations.md, "Per-user limits"); 0 turns one off. Users named
    # in ``limits_exempt_users`` (and superusers, unless ``limits_exempt_superusers`` is
    # false) are not held to them.
    user_max_sockets: int = Field(default=200, ge=0)
    user_submit_rate: float = Field(default=100.0, ge=0, allow_inf_nan=False)
    user_submit_burst: int = Field(default=1000, ge=0)
    user_max_pending_tasks: int = Field(default=10_000, ge=0)
    user_max_stored_bytes: int = Field(default=2 * 1024**3, ge=0)
    user_max_costly_validations: int = Field(default=2, gt=0)
    limits_exempt_users: Annotated[list[str], NoDecode] = []
    limits_exempt_superusers: bool = True

    # Providers (docs/protocol.md, "Providers"): zndraw-joblib's provider settings under
    # Taskhub's names, and the hub's bounds on what it caches. ``allowed_provider_categories``
    # None: any category; ``provider_superuser_categories``: only superusers register, see
    # and read providers of these.
    allowed_provider_categories: Annotated[list[str] | None, NoDecode] = None
    provider_superuser_categories: Annotated[list[str], NoDecode] = []
    provider_result_ttl_seconds: float = duration(300)
    provider_inflight_ttl_seconds: float = duration(30)
    provider_long_poll_default_seconds: int = Field(default=5, ge=0, le=MAX_DURATION_SECONDS)
    provider_long_poll_max_seconds: int = Field(default=30, ge=0, le=MAX_DURATION_SECONDS)
    provider_max_result_bytes: int = Field(default=8 * 1024**2, gt=0)
    provider_cache_max_bytes: int = Field(default=128 * 1024**2, gt=0)
    # A submit to a (non-``@internal``) job no live worker serves is refused with 409
    # ``no-workers-available`` instead of waiting for one.
    submit_requires_live_worker: bool = False

    @field_validator("allowed_provider_categories", "provider_superuser_categories", mode="before")
    @classmethod
    def _split_provider_categories(cls, value: object, info: ValidationInfo) -> object:
        """A comma or JSON list; an empty ``TASKHUB_ALLOWED_PROVIDER_CATEGORIES`` is None
        (any category)."""
        if isinstance(value, str):
            stripped = value.strip()
            if not stripped:
                return None if info.field_name == "allowed_provider_categories" else []
            if stripped.startswith("["):
                import json

                return json.loads(stripped)
            return [part.strip() for part in stripped.split(",") if part.strip()]
        return value

    @field_validator("allowed_provider_categories", "provider_superuser_categories")
    @classmethod
    def _check_provider_categories(cls, value: list[str] | None) -> list[str] | None:
        for category in value or ():
            if not 0 < len(category) <= MAX_CATEGORY_LENGTH or ":" in category:
                raise ValueError(
                    f"{category!r}: a category is 1 to {MAX_CATEGORY_LENGTH} characters "
                    "without ':' (it is part of a provider's full name)"
                )
        return value

    @field_validator("provider_cache_max_bytes")
    @classmethod
    def _cache_holds_a_result(cls, value: int, info: ValidationInfo) -> int:
        largest = info.data.get("provider_max_result_bytes")
        if largest is not None and value < largest:
            raise ValueError(
                "must be at least TASKHUB_PROVIDER_MAX_RESULT_BYTES (the cache holds results)"
            )
        return value

    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=1, le=65535)
    log_level: Literal["critical", "error", "warning", "info", "debug", "trace"] = "info"
    log_format: Literal["text", "json"] = "text"
    access_log: bool = False
    workers: int = Field(default=1, ge=1)
    graceful_shutdown_seconds: float = duration(10, allow_zero=True)

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower_case_level(cls, value: object) -> object:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator(
        "allowed_categories", "internal_job_modules", "limits_exempt_users", mode="before"
    )
    @classmethod
    def _split_categories(cls, value: object, info: ValidationInfo) -> object:
        """A comma or JSON list; an empty ``TASKHUB_ALLOWED_CATEGORIES`` (an unset compose
        variable) is the default, as an empty ``TASKHUB_REDIS_URL`` is unset."""
        if isinstance(value, str):
            stripped = value.strip()
            if not stripped and info.field_name == "allowed_categories":
                raise PydanticUseDefault()
            if stripped.startswith("["):
                import json

                return json.loads(stripped)
            return [part.strip() for part in stripped.split(",") if part.strip()]
        return value

    @field_validator("allowed_categories")
    @classmethod
    def _check_categories(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("no category at all; leave it empty for the default ones")
        for category in value:
            if not 0 < len(category) <= MAX_CATEGORY_LENGTH or ":" in category:
                raise ValueError(
                    f"{category!r}: a category is 1 to {MAX_CATEGORY_LENGTH} characters "
                    "without ':' (it is part of a job's full name)"
                )
        return value

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str | None) -> str | None:
        """``redis://``, ``rediss://`` or ``unix://`` with somewhere to connect; empty = unset."""
        from urllib.parse import urlsplit

        if value is None or not value.strip():
            return None
        forms = "use redis://host:port/db, rediss://… or unix:///path/to/socket"
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 (raises on a port that is not a number)
        except ValueError:
            raise ValueError(f"not a Redis URL; {forms}") from None
        if parts.scheme not in REDIS_SCHEMES:
            raise ValueError(f"not a Redis URL; {forms}")
        if not (parts.hostname if parts.scheme != "unix" else parts.path):
            raise ValueError(f"no {'host' if parts.scheme != 'unix' else 'path'}; {forms}")
        database = parts.path.strip("/")
        if parts.scheme != "unix" and database and not database.isdigit():
            # (redis-py would ignore it and use database 0)
            raise ValueError(f"the database must be a number; {forms}")
        try:  # what redis-py makes of the rest (its query options) when it connects
            from redis.asyncio import ConnectionPool

            ConnectionPool.from_url(value).make_connection()
        except (TypeError, ValueError) as exc:
            raise ValueError(f"redis-py cannot use it ({exc}); {forms}") from None
        return value

    @field_validator("admin_token")
    @classmethod
    def _check_admin_token(cls, value: str | None) -> str | None:
        """A superuser's secret, so a strong one (``ADMIN_TOKEN_RULE``); empty = unset. The
        message never repeats the value."""
        if value is None or not value.strip():
            return None
        if not admin_token_is_strong(value):
            raise ValueError(
                f"too weak: {ADMIN_TOKEN_RULE}; make one with {MAKE_ADMIN_TOKEN_COMMAND}"
            )
        return value

    @field_validator("sqlite_synchronous")
    @classmethod
    def _check_synchronous(cls, value: str) -> str:
        value = value.upper()
        if value not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ValueError("must be one of OFF, NORMAL, FULL, EXTRA")
        return value

    @property
    def socket_channel(self) -> str:
        """The Redis channel Socket.IO's managers share."""
        return self.socketio_channel or self.redis_key("socketio")

    def redis_key(self, name: str) -> str:
        """A Redis channel or key of this deployment (deployments may share one Redis)."""
        return f"{self.redis_namespace}:{name}"

    @cached_property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.retry_backoff_seconds, self.retry_backoff_max_seconds)


def setting_errors(exc: ValidationError) -> str:
    """One line naming each invalid ``TASKHUB_*`` variable and what is wrong with it (never
    the value itself: it may hold a password)."""
    return "; ".join(
        f"TASKHUB_{'_'.join(str(part) for part in error['loc']).upper()}: "
        f"{error['msg'].removeprefix('Value error, ')}"
        for error in exc.errors(include_url=False)
    )
