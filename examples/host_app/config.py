"""The host's own settings, from ``HOST_APP_*`` environment variables. Taskhub's come from
its ``TASKHUB_*`` ones (``taskhub.settings.Settings``); the host shares its Redis
(``TASKHUB_REDIS_URL``) and its Socket.IO channel (``TASKHUB_SOCKETIO_CHANNEL``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class HostConfig:
    secret: str  # HS256 key of the host's JWTs
    audience: str = "host-app"
    admin_name: str = "admin"
    admin_password: str | None = None  # unset: nobody signs in as the superuser
    token_lifetime_seconds: int = 12 * 3600
    redis_prefix: str = "host-app"  # the host's keys in Taskhub's Redis (its rooms)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HostConfig:
        """``HOST_APP_SECRET`` (required), ``HOST_APP_AUDIENCE``, ``HOST_APP_ADMIN_PASSWORD``,
        ``HOST_APP_TOKEN_LIFETIME_SECONDS``, ``HOST_APP_REDIS_PREFIX``."""
        env = os.environ if env is None else env
        secret = env.get("HOST_APP_SECRET", "")
        if len(secret) < 32:
            raise ValueError("HOST_APP_SECRET must be set, at least 32 characters")
        return cls(
            secret=secret,
            audience=env.get("HOST_APP_AUDIENCE", cls.audience),
            admin_password=env.get("HOST_APP_ADMIN_PASSWORD") or None,
            token_lifetime_seconds=int(
                env.get("HOST_APP_TOKEN_LIFETIME_SECONDS", cls.token_lifetime_seconds)
            ),
            redis_prefix=env.get("HOST_APP_REDIS_PREFIX", cls.redis_prefix),
        )
