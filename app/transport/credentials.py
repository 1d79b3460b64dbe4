"""Reading the bearer token a client sends, for HTTP and Socket.IO alike."""

from __future__ import annotations

import re

_BEARER = re.compile(r"^\s*Bearer\s+(\S+)\s*$", re.IGNORECASE)


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header value, if it is one."""
    match = _BEARER.match(authorization or "")
    return match.group(1) if match else None
