"""Names for tests that share a server: rooms and users no other test uses."""

from __future__ import annotations

import uuid


def unique(prefix: str) -> str:
    """``prefix`` with a random suffix: a room or user name no other test uses."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"
