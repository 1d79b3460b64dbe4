"""The connections store functions take."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.store.hot_statements import HotConnection

__all__ = ["AsyncConnection", "Connection", "HotConnection"]

Connection = AsyncConnection | HotConnection
