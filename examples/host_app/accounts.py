"""The host's sign-in: a name (and, for the superuser, a password) buys an HS256 JWT whose
``sub`` is the user's stable id (a UUID derived from the name)."""

from __future__ import annotations

import hmac
import time
import uuid
from dataclasses import dataclass

import jwt

from examples.host_app.config import HostConfig

# Ids of the host's users: the same name is the same user on every replica and restart.
USER_NAMESPACE = uuid.UUID("6f1b8a52-3c1e-4d5e-9a57-0b7c2f6d9e10")


@dataclass(frozen=True)
class HostUser:
    id: uuid.UUID
    name: str
    is_admin: bool


class Accounts:
    def __init__(self, config: HostConfig) -> None:
        self.config = config

    def sign_in(self, name: str, password: str | None) -> HostUser | None:
        """The user, or None when the superuser's password is wrong (or not set)."""
        is_admin = name == self.config.admin_name
        if is_admin:
            expected = self.config.admin_password
            if expected is None or password is None:
                return None
            if not hmac.compare_digest(expected.encode(), password.encode()):
                return None
        return HostUser(uuid.uuid5(USER_NAMESPACE, name), name, is_admin)

    def issue(self, user: HostUser) -> str:
        now = int(time.time())
        claims = {
            "sub": str(user.id),
            "name": user.name,
            "admin": user.is_admin,
            "aud": self.config.audience,
            "iat": now,
            "exp": now + self.config.token_lifetime_seconds,
        }
        return jwt.encode(claims, self.config.secret, algorithm="HS256")

    def verify(self, token: str | None) -> HostUser | None:
        """The user a valid, unexpired token of this host names; None for anything else
        (another issuer's token, a Taskhub ``th_`` token, garbage)."""
        if not token:
            return None
        try:
            claims = jwt.decode(
                token,
                self.config.secret,
                algorithms=["HS256"],
                audience=self.config.audience,
                options={"require": ["sub", "exp", "aud"]},
            )
            return HostUser(uuid.UUID(claims["sub"]), str(claims["name"]), claims["admin"] is True)
        except (jwt.InvalidTokenError, KeyError, ValueError):
            return None
