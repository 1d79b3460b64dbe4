"""The statements of providers: registration (the row locked by name, inserted or
updated), lookups, listings, deletion, and the rows a worker's removal takes with it."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import ColumnElement, and_, delete, func, select, update

from taskhub.rules.naming import INTERNAL_ROOM
from taskhub.store.connections import AsyncConnection, Connection
from taskhub.store.inserts import insert_ignoring_duplicates
from taskhub.store.tables import provider_table

provider = provider_table


def _named(room_id: str, category: str, name: str) -> ColumnElement[bool]:
    return and_(
        provider.c.room_id == room_id, provider.c.category == category, provider.c.name == name
    )


async def find_named(conn: Connection, room_id: str, category: str, name: str) -> Any:
    """The provider row called ``room_id:category:name`` (None if there is none)."""
    return (await conn.execute(select(provider).where(_named(room_id, category, name)))).first()


async def lock_named(conn: AsyncConnection, room_id: str, category: str, name: str) -> Any:
    """``find_named``, row-locked until the transaction ends (PostgreSQL; SQLite has one
    writer): two registrations of one name take turns."""
    statement = select(provider).where(_named(room_id, category, name)).with_for_update()
    return (await conn.execute(statement)).first()


async def find(conn: Connection, provider_id: UUID) -> Any:
    return (await conn.execute(select(provider).where(provider.c.id == provider_id))).first()


async def insert_provider(conn: AsyncConnection, values: dict[str, Any]) -> bool:
    """Insert a provider unless one of its name exists already; whether it was inserted."""
    inserted = await conn.execute(insert_ignoring_duplicates(conn.dialect.name, provider, values))
    return bool(inserted.rowcount)


async def update_provider(conn: AsyncConnection, provider_id: UUID, **values: Any) -> None:
    await conn.execute(update(provider).where(provider.c.id == provider_id).values(**values))


async def delete_provider(conn: AsyncConnection, provider_id: UUID) -> bool:
    deleted = await conn.execute(delete(provider).where(provider.c.id == provider_id))
    return bool(deleted.rowcount)


def _listed(rooms: Sequence[str], hidden: Collection[str]) -> ColumnElement[bool]:
    where: ColumnElement[bool] = provider.c.room_id.in_(rooms)
    if hidden:
        where = and_(where, provider.c.category.not_in(list(hidden)))
    return where


async def count_providers(conn: Connection, rooms: Sequence[str], hidden: Collection[str]) -> int:
    """How many providers ``rooms`` hold, those of the ``hidden`` categories aside."""
    counted = select(func.count()).select_from(provider).where(_listed(rooms, hidden))
    return int(await conn.scalar(counted) or 0)


async def provider_page(
    conn: Connection, rooms: Sequence[str], hidden: Collection[str], limit: int, offset: int
) -> list[Any]:
    """A page of the providers of ``rooms`` (not of the ``hidden`` categories), newest first."""
    rows = await conn.execute(
        select(provider)
        .where(_listed(rooms, hidden))
        .order_by(provider.c.created_at.desc(), provider.c.id.desc())
        .limit(limit)
        .offset(offset)
    )
    return list(rows.all())


async def provider_rooms_of(conn: Connection, worker_ids: Sequence[UUID]) -> list[Any]:
    """``(worker_id, room_id, category, name)`` of the providers of ``worker_ids``: read
    before those workers are deleted (their providers go with them, ON DELETE CASCADE)."""
    rows = await conn.execute(
        select(
            provider.c.worker_id, provider.c.room_id, provider.c.category, provider.c.name
        ).where(provider.c.worker_id.in_(list(worker_ids)))
    )
    return list(rows.all())


async def ensure_internal(
    conn: AsyncConnection,
    category: str,
    name: str,
    schema: dict[str, Any],
    content_type: str,
    provider_id: UUID,
    now: datetime,
) -> bool:
    """Create the ``@internal`` provider ``category:name``, or bring its schema and content
    type up to date; whether anything changed."""
    row = await lock_named(conn, INTERNAL_ROOM, category, name)
    if row is None:
        values = {
            "id": provider_id,
            "room_id": INTERNAL_ROOM,
            "category": category,
            "name": name,
            "schema": schema,
            "content_type": content_type,
            "user_id": None,
            "worker_id": None,
            "created_at": now,
        }
        return await insert_provider(conn, values)
    if row.schema == schema and row.content_type == content_type:
        return False
    await update_provider(conn, row.id, schema=schema, content_type=content_type)
    return True
