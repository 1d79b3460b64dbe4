"""The statements of per-user usage (``user_usage``, kept by the triggers of
``store.usage_counts``): the bound a submit's insert checks (``within_quota``: one row by
its key, in the insert itself, instead of counting the user's tasks), and the figures read
to tell which bound refused it."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import ColumnElement, bindparam, exists, or_, select

from taskhub.rules.user_limits import SubmitQuota, Usage
from taskhub.store.connections import Connection
from taskhub.store.hot_statements import hot
from taskhub.store.tables import user_usage_table

usage = user_usage_table
# The bound the statement holds a submit to when it is not held to that one (of a count,
# an INTEGER column; of bytes, a BIGINT one).
UNBOUNDED_COUNT = 2**31 - 1
UNBOUNDED_BYTES = 2**62


def within_quota() -> ColumnElement[bool]:
    """SQL for "the submitter's figures are within the submit's bounds": no ``user_usage``
    row of ``:b_quota_user`` at ``:b_most_unfinished`` unfinished tasks, ``:b_most_bytes``
    stored bytes, or ``:b_most_costly`` unfinished costly tasks (``quota_params``). Read on
    the statement's snapshot: submits of one user racing on PostgreSQL may each pass."""
    over = select(usage.c.user_id).where(
        usage.c.user_id == bindparam("b_quota_user", type_=usage.c.user_id.type),
        or_(
            usage.c.unfinished_tasks
            >= bindparam("b_most_unfinished", type_=usage.c.unfinished_tasks.type),
            usage.c.stored_bytes >= bindparam("b_most_bytes", type_=usage.c.stored_bytes.type),
            usage.c.unfinished_costly_tasks
            >= bindparam("b_most_costly", type_=usage.c.unfinished_costly_tasks.type),
        ),
    )
    return ~exists(over)


def quota_params(user_id: UUID | None, quota: SubmitQuota) -> dict[str, Any]:
    """The parameters of ``within_quota`` for a submit by ``user_id`` held to ``quota``."""
    return {
        "b_quota_user": user_id,
        "b_most_unfinished": _bound(quota.unfinished_tasks, UNBOUNDED_COUNT),
        "b_most_bytes": _bound(quota.stored_bytes, UNBOUNDED_BYTES),
        "b_most_costly": _bound(quota.costly_tasks, UNBOUNDED_COUNT),
    }


def _bound(value: int | None, unbounded: int) -> int:
    return unbounded if value is None else min(value, unbounded)


_USAGE = hot(
    select(usage.c.unfinished_tasks, usage.c.unfinished_costly_tasks, usage.c.stored_bytes).where(
        usage.c.user_id == bindparam("b_user_id", type_=usage.c.user_id.type)
    )
)


async def usage_of(conn: Connection, user_id: UUID) -> Usage:
    """What ``user_id``'s tasks hold (all zero for a user who never submitted)."""
    row = (await conn.execute(_USAGE, {"b_user_id": user_id})).first()
    if row is None:
        return Usage()
    return Usage(int(row.unfinished_tasks), int(row.unfinished_costly_tasks), int(row.stored_bytes))
