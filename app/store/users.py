"""The statements of users and their tokens (stored as hashes: ``token_hash``)."""

from __future__ import annotations

from collections.abc import Collection
from uuid import UUID

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.clock import new_id, utcnow
from taskhub.rules.records import Principal, UserSummary
from taskhub.store.connections import Connection
from taskhub.store.inserts import insert_ignoring_duplicates
from taskhub.store.tables import revoked_token_table, token_table, user_table

# The most token hashes one statement names (each is a bound parameter; SQLite takes at
# most 32,766 of them, asyncpg 32,767).
HASHES_PER_STATEMENT = 1000


async def insert_user(conn: AsyncConnection, user_id: UUID, name: str, *, superuser: bool) -> bool:
    """Insert a user; False if one of that name exists already (the transaction can then
    only be rolled back)."""
    try:
        await conn.execute(
            insert(user_table).values(
                id=user_id, name=name, is_superuser=superuser, created_at=utcnow()
            )
        )
    except IntegrityError:
        return False
    return True


async def upsert_user(conn: AsyncConnection, user_id: UUID, name: str, *, superuser: bool) -> None:
    """The user of ``user_id`` (signed in elsewhere: a host application, an identity
    provider) exists with this name and superuser flag. Names are unique: a name held by
    another user gets ``~`` and the start of the id after it."""
    row = (
        await conn.execute(
            select(user_table.c.name, user_table.c.is_superuser).where(user_table.c.id == user_id)
        )
    ).first()
    if row is not None and row.is_superuser == superuser and _same_name(row.name, name, user_id):
        return
    taken = await conn.scalar(
        select(user_table.c.id).where(user_table.c.name == name[:128], user_table.c.id != user_id)
    )
    stored = name[:128] if taken is None else f"{name[:119]}~{user_id.hex[:8]}"
    if row is None:
        await conn.execute(
            insert(user_table).values(
                id=user_id, name=stored, is_superuser=superuser, created_at=utcnow()
            )
        )
    else:
        await conn.execute(
            update(user_table)
            .where(user_table.c.id == user_id)
            .values(name=stored, is_superuser=superuser)
        )


def _same_name(stored: str, name: str, user_id: UUID) -> bool:
    return stored in (name[:128], f"{name[:119]}~{user_id.hex[:8]}")


async def insert_token(conn: AsyncConnection, user_id: UUID, token_hash: str) -> None:
    await conn.execute(
        insert(token_table).values(
            id=new_id(), user_id=user_id, token_hash=token_hash, created_at=utcnow()
        )
    )


async def user_named(conn: Connection, name: str) -> UUID | None:
    """The id of the user called ``name``, None if there is none."""
    user_id: UUID | None = await conn.scalar(
        select(user_table.c.id).where(user_table.c.name == name)
    )
    return user_id


async def find_token(conn: Connection, token_hash: str) -> UUID | None:
    """The user the token of hash ``token_hash`` authenticates, None if none."""
    user_id: UUID | None = await conn.scalar(
        select(token_table.c.user_id).where(token_table.c.token_hash == token_hash)
    )
    return user_id


async def make_superuser(conn: AsyncConnection, user_id: UUID) -> None:
    await conn.execute(
        update(user_table).where(user_table.c.id == user_id).values(is_superuser=True)
    )


async def name_taken(conn: Connection, name: str) -> bool:
    return bool(await conn.scalar(select(func.count()).where(user_table.c.name == name)))


async def count_users(conn: Connection) -> int:
    return int(await conn.scalar(select(func.count()).select_from(user_table)) or 0)


async def user_summaries(conn: Connection) -> list[UserSummary]:
    """Every user, by name, with how many tokens it has."""
    tokens = (
        select(func.count())
        .where(token_table.c.user_id == user_table.c.id)
        .scalar_subquery()
        .label("tokens")
    )
    statement = select(
        user_table.c.name, user_table.c.is_superuser, tokens, user_table.c.created_at
    ).order_by(user_table.c.name)
    rows = (await conn.execute(statement)).all()
    return [UserSummary(row.name, row.is_superuser, row.tokens, row.created_at) for row in rows]


async def set_superuser_named(conn: AsyncConnection, name: str, superuser: bool) -> bool:
    """Set ``is_superuser`` of the user called ``name``; False if there is none."""
    changed = await conn.execute(
        update(user_table).where(user_table.c.name == name).values(is_superuser=superuser)
    )
    return bool(changed.rowcount)


async def count_superusers(conn: Connection) -> int:
    count = select(func.count()).where(user_table.c.is_superuser.is_(True))
    return int(await conn.scalar(count) or 0)


async def delete_token(conn: AsyncConnection, token_hash: str) -> bool:
    """Delete the token of hash ``token_hash``; False if there is none."""
    deleted = await conn.execute(delete(token_table).where(token_table.c.token_hash == token_hash))
    return bool(deleted.rowcount)


async def delete_tokens_of(conn: AsyncConnection, user_id: UUID) -> list[str]:
    """Delete every token of the user; the hashes of those there were."""
    hashes = list(
        await conn.scalars(select(token_table.c.token_hash).where(token_table.c.user_id == user_id))
    )
    if hashes:
        await conn.execute(delete(token_table).where(token_table.c.user_id == user_id))
    return hashes


async def record_revoked(conn: AsyncConnection, token_hashes: Collection[str]) -> None:
    """Remember these tokens' hashes as revoked (one already remembered stays as it was)."""
    now = utcnow()
    for token_hash in token_hashes:
        await conn.execute(
            insert_ignoring_duplicates(
                conn.dialect.name,
                revoked_token_table,
                {"token_hash": token_hash, "revoked_at": now},
            )
        )


async def was_revoked(conn: Connection, token_hash: str) -> bool:
    """Whether the token of hash ``token_hash`` was revoked once."""
    found = await conn.scalar(
        select(revoked_token_table.c.token_hash).where(
            revoked_token_table.c.token_hash == token_hash
        )
    )
    return found is not None


async def principals_of(conn: Connection, token_hashes: Collection[str]) -> dict[str, Principal]:
    """Whom each of the tokens of these hashes authenticates (an unknown one is left out);
    read ``HASHES_PER_STATEMENT`` hashes a statement."""
    hashes = list(token_hashes)
    found: dict[str, Principal] = {}
    for start in range(0, len(hashes), HASHES_PER_STATEMENT):
        rows = await conn.execute(
            select(
                token_table.c.token_hash,
                user_table.c.id,
                user_table.c.name,
                user_table.c.is_superuser,
            )
            .join(token_table, token_table.c.user_id == user_table.c.id)
            .where(token_table.c.token_hash.in_(hashes[start : start + HASHES_PER_STATEMENT]))
        )
        for row in rows:
            found[row.token_hash] = Principal(
                id=row.id, name=row.name, is_superuser=row.is_superuser
            )
    return found
