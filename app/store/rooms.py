"""The statements of private rooms: their visibility and members (``room_setting``,
``room_member``), and the facts about a task the room rule asks for."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from sqlalchemy import ColumnElement, and_, delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.rules.authorisation import MemberKind, PrivateRoom, RoomRole
from taskhub.store.connections import Connection
from taskhub.store.tables import room_member_table, room_setting_table, task_table, user_table

PRIVATE = "private"
OPEN = "open"


@dataclass(frozen=True, slots=True)
class MemberRow:
    """A member as listed: ``name`` is the user's (None for a group, or a user not seen
    yet: members may be named before they first sign in)."""

    kind: MemberKind
    subject: str
    role: RoomRole
    name: str | None
    created_at: datetime


async def private_rooms(conn: Connection) -> dict[str, PrivateRoom]:
    """Every private room with its members (the rule's cache reads this)."""
    setting, member = room_setting_table, room_member_table
    names = (
        await conn.execute(select(setting.c.room_id).where(setting.c.visibility == PRIVATE))
    ).scalars()
    members: dict[str, dict[tuple[MemberKind, str], RoomRole]] = {name: {} for name in names}
    if not members:
        return {}
    rows = await conn.execute(
        select(member.c.room_id, member.c.kind, member.c.subject, member.c.role)
        .join(setting, setting.c.room_id == member.c.room_id)
        .where(setting.c.visibility == PRIVATE)
    )
    for row in rows.all():
        members[row.room_id][(MemberKind(row.kind), row.subject)] = RoomRole(row.role)
    return {room_id: PrivateRoom(room_id, found) for room_id, found in members.items()}


async def set_visibility(
    conn: AsyncConnection, room_id: str, visibility: str, now: datetime
) -> None:
    """The room's visibility, written (a row is kept for an open room made so again)."""
    setting = room_setting_table
    changed = await conn.execute(
        update(setting)
        .where(setting.c.room_id == room_id)
        .values(visibility=visibility, updated_at=now)
    )
    if changed.rowcount == 0:
        await conn.execute(
            insert(setting).values(room_id=room_id, visibility=visibility, updated_at=now)
        )


async def visibility(conn: Connection, room_id: str) -> str:
    setting = room_setting_table
    found = await conn.scalar(select(setting.c.visibility).where(setting.c.room_id == room_id))
    return str(found) if found is not None else OPEN


async def put_member(
    conn: AsyncConnection,
    room_id: str,
    kind: MemberKind,
    subject: str,
    role: RoomRole,
    now: datetime,
) -> bool:
    """Add the member or change its role; True if it is new."""
    member = room_member_table
    changed = await conn.execute(
        update(member).where(_member(room_id, kind, subject)).values(role=role.value)
    )
    if changed.rowcount:
        return False
    await conn.execute(
        insert(member).values(
            room_id=room_id, kind=kind.value, subject=subject, role=role.value, created_at=now
        )
    )
    return True


async def remove_member(
    conn: AsyncConnection, room_id: str, kind: MemberKind, subject: str
) -> bool:
    """Remove the member; False if there was none."""
    removed = await conn.execute(delete(room_member_table).where(_member(room_id, kind, subject)))
    return bool(removed.rowcount)


async def members(conn: Connection, room_id: str) -> list[MemberRow]:
    """The room's members, users and groups, in the order they were added."""
    member = room_member_table
    rows = (
        await conn.execute(
            select(member)
            .where(member.c.room_id == room_id)
            .order_by(member.c.created_at, member.c.kind, member.c.subject)
        )
    ).all()
    user_ids = {_user_id(row.subject) for row in rows if row.kind == MemberKind.USER.value} - {None}
    names: dict[str, str] = {}
    if user_ids:
        found = await conn.execute(
            select(user_table.c.id, user_table.c.name).where(user_table.c.id.in_(user_ids))
        )
        names = {str(row.id): row.name for row in found.all()}
    return [
        MemberRow(
            MemberKind(row.kind),
            row.subject,
            RoomRole(row.role),
            names.get(row.subject) if row.kind == MemberKind.USER.value else None,
            row.created_at,
        )
        for row in rows
    ]


def _user_id(subject: str) -> UUID | None:
    try:
        return UUID(subject)
    except ValueError:
        return None


def _member(room_id: str, kind: MemberKind, subject: str) -> ColumnElement[bool]:
    member = room_member_table
    return and_(
        member.c.room_id == room_id, member.c.kind == kind.value, member.c.subject == subject
    )


async def task_room_and_submitter(
    conn: Connection, task_id: UUID
) -> tuple[str, UUID | None] | None:
    """A task's room and submitter (None: no such task)."""
    row = (
        await conn.execute(
            select(task_table.c.room_id, task_table.c.submitted_by).where(
                task_table.c.id == task_id
            )
        )
    ).first()
    return None if row is None else (row.room_id, row.submitted_by)


async def rooms_of_tasks(conn: Connection, task_ids: Collection[UUID]) -> dict[UUID, str]:
    """The room of each of these tasks (those that exist)."""
    if not task_ids:
        return {}
    rows = await conn.execute(
        select(task_table.c.id, task_table.c.room_id).where(task_table.c.id.in_(list(task_ids)))
    )
    return {row.id: row.room_id for row in rows.all()}
