"""The clock and the ids of every layer: aware UTC datetimes, time-ordered UUIDv7 ids."""

from __future__ import annotations

import datetime as dt
from uuid import UUID

import uuid_utils.compat as uuid_compat


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_id() -> UUID:
    """A time-ordered UUIDv7."""
    return uuid_compat.uuid7()
