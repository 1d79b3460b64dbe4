"""The claim: ``claim_statement``, the entry point that builds each shape's statement with
its engine's builder (``claim_postgres.postgresql_claim``, ``claim_sqlite.sqlite_claim``);
``claim``, which runs them; and the tasks a keyed claim holds. docs/performance.md ("The
claim") says how the statements are built and why; tests/store/sql_snapshots/ shows them."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from sqlalchemy import bindparam, literal_column, select
from sqlalchemy.sql import Executable

from taskhub.rules.authorisation import is_unrestricted, may_claim
from taskhub.rules.records import Principal
from taskhub.rules.states import TaskStatus
from taskhub.store.claim_postgres import postgresql_claim, postgresql_taken
from taskhub.store.claim_shape import ClaimFrom, ClaimShape, Taken, claimable_left_statement
from taskhub.store.claim_sqlite import sqlite_claim, sqlite_taken
from taskhub.store.connections import Connection
from taskhub.store.hot_statements import hot
from taskhub.store.tables import task_table, worker_table

__all__ = [
    "LOCKED_CLAIM_ATTEMPTS",
    "ClaimFrom",
    "Claimed",
    "claim",
    "claim_statement",
    "claimable_left_statement",
    "held_under_key",
]

log = logging.getLogger(__name__)
# PostgreSQL: an empty claim while a task was claimable waits for locked tasks this many
# times at most (see ``claim``).
LOCKED_CLAIM_ATTEMPTS = 2


class _Engine(NamedTuple):
    """An engine's claim: its statement of a shape, and what one statement's answer took."""

    build: Callable[[ClaimShape], Executable]
    taken: Callable[[Sequence[Any]], Taken]


_ENGINES = {
    "postgresql": _Engine(postgresql_claim, postgresql_taken),
    "sqlite": _Engine(sqlite_claim, sqlite_taken),
}


@functools.cache
def claim_statement(
    dialect: str,
    *,
    check_owner: bool,
    limit: int,
    wait_for_locked: bool = False,
    source: ClaimFrom = ClaimFrom.QUEUE,
    start: bool = False,
    exclude_rooms: bool = False,
) -> Executable:
    """Claim up to ``limit`` of the first claimable tasks of ``source`` (due at ``:now``;
    in queue order: ``claim_shape.in_queue_order``) of ``:worker_id``'s jobs, atomically,
    as a new attempt with ``:claim_token`` (and ``:claim_key``, the claim's
    Idempotency-Key or NULL), leased until ``:lease_until``; with ``check_owner`` only if
    ``:owner_id`` holds one of ``rules.authorisation.claim_roles``; with ``start`` also
    started, in the same statement; with ``exclude_rooms`` none of ``:closed_rooms``. One
    statement per shape (``ClaimShape``), built by ``dialect``'s builder."""
    shape = ClaimShape(check_owner, limit, wait_for_locked, source, start, exclude_rooms)
    return _ENGINES[dialect].build(shape)


@dataclass(frozen=True, slots=True)
class Claimed:
    """The claimed task rows; when there are none, ``worker_owner`` (the claiming worker's
    owner, None if there is no such worker) says whether the caller could claim at all."""

    rows: list[Any]
    worker_owner: UUID | None = None


_WORKER_OWNER = hot(
    select(worker_table.c.user_id).where(
        worker_table.c.id == bindparam("worker_id", type_=worker_table.c.id.type)
    )
)


async def claim(
    conn: Connection,
    principal: Principal,
    worker_id: UUID,
    limit: int,
    *,
    claim_token: UUID,
    lease_until: datetime,
    now: datetime,
    request_key: str | None = None,
    start: bool = False,
    closed_rooms: frozenset[str] = frozenset(),
) -> Claimed:
    """Claim up to ``limit`` tasks for the worker (``claim_statement``): the claim queue
    first, then, if that was short, the due waiting tasks. When the claim's own answer
    carries the worker's owner (PostgreSQL), an empty first claim the caller may not make
    (``rules.authorisation.may_claim``) stops there; otherwise the owner is read only when
    nothing was claimed. After an empty claim although a task was claimable (skipped as
    locked: PostgreSQL), it waits for the locked ones. Tasks claimed by the first statement
    (committed on their own outside a transaction) are answered even if the second fails.
    With ``start`` every statement also starts the tasks it claims. ``closed_rooms``: the
    rooms whose tasks it leaves alone (private rooms where the caller may not work)."""
    params: dict[str, Any] = {
        "worker_id": worker_id,
        "claim_token": claim_token,
        "claim_key": request_key,
        "owner_id": principal.id,
        "lease_until": lease_until,
        "now": now,
    }
    dialect = conn.dialect.name
    engine = _ENGINES[dialect]
    common = {
        "check_owner": not is_unrestricted(principal),
        "start": start,
        "exclude_rooms": bool(closed_rooms),
    }
    if closed_rooms:
        params["closed_rooms"] = sorted(closed_rooms)
    statement = claim_statement(dialect, **common, limit=limit)
    first = engine.taken((await conn.execute(statement, params)).all())
    rows, owner = first.rows, first.worker_owner
    if not rows and first.owner_read and not may_claim(principal, owner):
        return Claimed([], owner)
    if len(rows) < limit:  # the queue was short: due tasks the announcer has not queued
        due = claim_statement(
            dialect, **common, limit=limit - len(rows), source=ClaimFrom.DUE_WAITING
        )
        try:
            more = engine.taken((await conn.execute(due, params)).all())
        except Exception:
            # Tasks already claimed (committed on their own, outside a keyed claim's
            # transaction) are answered: run again, the claim would take others instead.
            if not rows or request_key is not None:
                raise
            log.warning("claim for worker %s: the due tasks not read", worker_id, exc_info=True)
            more = Taken([])
        rows += more.rows
        if not rows and more.claimable_left:
            waiting = claim_statement(
                dialect, **common, limit=limit, wait_for_locked=True, source=ClaimFrom.BOTH
            )
            rows = await _claim_waiting_for_locked(
                conn, engine, waiting, params, exclude_rooms=bool(closed_rooms)
            )
    if not rows and not first.owner_read:  # is the worker unknown, or not the caller's?
        owner = await conn.scalar(_WORKER_OWNER, {"worker_id": worker_id})
    return Claimed(rows, owner)


async def _claim_waiting_for_locked(
    conn: Connection,
    engine: _Engine,
    statement: Executable,
    params: dict[str, Any],
    *,
    exclude_rooms: bool,
) -> list[Any]:
    """After a claim that got nothing although a task was claimable: it skipped what
    another claim held but did not take, so wait for it this time (``statement``). Again
    when the task it waited for moved meanwhile to where it did not look (the announcer
    queued a due task it had locked)."""
    left = True
    for _ in range(LOCKED_CLAIM_ATTEMPTS):
        if not left:
            break
        rows = engine.taken((await conn.execute(statement, params)).all()).rows
        if rows:
            return rows
        left = await conn.scalar(claimable_left_statement(conn.dialect.name, exclude_rooms), params)
    return []


def _held_under_key(status: TaskStatus) -> Any:
    return select(task_table).where(
        task_table.c.worker_id == bindparam("worker_id", type_=task_table.c.worker_id.type),
        task_table.c.status == literal_column(f"'{status.value}'"),
        task_table.c.claim_key == bindparam("claim_key", type_=task_table.c.claim_key.type),
    )


_HELD_UNDER_KEY = {
    False: _held_under_key(TaskStatus.CLAIMED),
    True: _held_under_key(TaskStatus.RUNNING),
}


async def held_under_key(
    conn: Connection, worker_id: UUID, request_key: str, *, started: bool = False
) -> list[Any]:
    """The task rows the worker still holds under the claim's ``request_key``: claimed, or
    (``started``: the claim also started them) running."""
    params = {"worker_id": worker_id, "claim_key": request_key}
    return list((await conn.execute(_HELD_UNDER_KEY[started], params)).all())
