"""The claim: one atomic, fenced statement per shape, SQLite's and PostgreSQL's side by
side, the question whether a claimable task was left behind a locked one, and ``claim``,
which runs them."""

from __future__ import annotations

import enum
import functools
import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast
from uuid import UUID

from sqlalchemy import (
    CTE,
    ColumnClause,
    Label,
    and_,
    bindparam,
    exists,
    literal,
    literal_column,
    or_,
    select,
    true,
    union_all,
    update,
)
from sqlalchemy.sql import Executable

from taskhub.rules.authorisation import Role, claim_roles, is_unrestricted, may_claim
from taskhub.rules.naming import INTERNAL_ROOM
from taskhub.rules.records import Principal
from taskhub.rules.states import TaskStatus
from taskhub.store.connections import Connection
from taskhub.store.hot_statements import hot
from taskhub.store.running_limits import SHARES, room_left, within_limits, within_rank
from taskhub.store.tables import (
    answered_task_columns,
    is_pending,
    is_queued,
    is_waiting,
    job_table,
    link_table,
    next_version,
    task_table,
    worker_table,
)

log = logging.getLogger(__name__)
# PostgreSQL: an empty claim while a task was claimable waits for locked tasks this many
# times at most (see ``claim``).
LOCKED_CLAIM_ATTEMPTS = 2


def _served_jobs() -> Any:
    """Job ids linked to ``:worker_id`` (never ``@internal`` ones: those belong to the
    taskiq executor, not to remote workers)."""
    return (
        select(link_table.c.job_id)
        .join(job_table, job_table.c.id == link_table.c.job_id)
        .where(
            link_table.c.worker_id == bindparam("worker_id"),
            job_table.c.room_id != INTERNAL_ROOM,
        )
    )


_ROW_ADDRESS: Label[Any] = literal_column(f"{task_table.name}.ctid").label("row_address")
_ROW_ADDRESS_OF_TASK: ColumnClause[Any] = literal_column(f"{task_table.name}.ctid")


def _due() -> Any:
    return task_table.c.run_at <= bindparam("now", type_=task_table.c.run_at.type)


class ClaimFrom(enum.Enum):
    """Where a claim takes tasks from: the claim queue (pending, not waiting; ``run_at``
    checked all the same, for a delayed task an older replica queued), the waiting tasks
    already due that the announcer has not queued yet (few, on ``ix_task_delayed``), or
    both at once."""

    QUEUE = "queue"
    DUE_WAITING = "due-waiting"
    BOTH = "both"

    def conditions(self) -> list[list[Any]]:
        queued = [is_queued(), or_(task_table.c.run_at.is_(None), _due())]
        due_waiting = [is_waiting(), _due()]
        return {
            ClaimFrom.QUEUE: [queued],
            ClaimFrom.DUE_WAITING: [due_waiting],
            ClaimFrom.BOTH: [queued, due_waiting],
        }[self]


@functools.cache
def claim_statement(
    dialect: str,
    *,
    check_owner: bool,
    limit: int,
    wait_for_locked: bool = False,
    source: ClaimFrom = ClaimFrom.QUEUE,
    start: bool = False,
) -> Executable:
    """Claim up to ``limit`` of the first claimable tasks of ``source`` (due at ``:now``;
    highest priority, then lowest turn: ``rules.fair_share``) of ``:worker_id``'s jobs,
    atomically, as a new attempt with ``:claim_token`` (and ``:claim_key``, the claim's
    Idempotency-Key or NULL); with ``check_owner`` only if ``:owner_id`` holds one of
    ``rules.authorisation.claim_roles``. Built once per shape (``limit`` is part of the
    shape: a bound LIMIT would be re-rendered on every execution). With ``start`` the
    claimed tasks are also started (``running``, ``started_at = :now``) in the same
    statement: a claim-and-start.

    A claim reads the claim queue; the due waiting tasks only when the queue had fewer
    than it asked for (``DUE_WAITING``, a second statement): reading them in every claim
    cost PostgreSQL 8 % more instructions per task. Until the announcer queues a
    due task (at its ``run_at``, give or take its timer), claims take the queued ones
    first, whatever their priorities.

    PostgreSQL: ``WITH picked AS (SELECT … FROM served jobs, LATERAL (SELECT … ORDER BY …
    LIMIT n FOR UPDATE SKIP LOCKED) … LIMIT n) UPDATE task … FROM picked RETURNING``, the
    update finding each picked row by its id and address (``ctid``, stable while locked).
    Concurrent claimers skip each other's rows instead of waiting or retrying. The locking
    select must sit in a CTE: as ``WHERE id IN (subquery)`` the planner may re-scan it and
    lock (and claim) more than ``n`` rows.

    PostgreSQL answers with at least one row: the claimed ones, or one row of NULLs, each
    with ``worker_owner`` (the worker's user, NULL if there is no such worker).

    The head scan locks the first ``n`` rows of each served job, and claims ``n`` in all:
    while it runs, a claimer of one of those jobs skips a task this claim will not take.
    A claim that got nothing asks ``claimable_left_statement`` whether a claimable task
    was there all the same (skipped as locked), and if so claims once more
    ``wait_for_locked``: the same statement with ``FOR UPDATE`` (no ``SKIP LOCKED``), which
    waits for the other claim to commit and then takes the first row still claimable.
    (The question is a column of the ``DUE_WAITING`` claim alone, which runs only after
    a short claim of the queue: as a column of every claim, even unasked, its plan cost 6 %
    more of PostgreSQL's instructions.) ``BOTH`` serves these waiting claims.

    SQLite: the same single ``UPDATE … RETURNING`` with ``id IN (subquery)``; it runs on the
    one writer connection (alone or in a commit group, see ``Database.autocommit``), which
    serialises writers, so ``SKIP LOCKED`` is neither needed nor available.
    """
    task = task_table
    served_jobs = _served_jobs()
    if check_owner:  # only who holds a claim role (or a superuser) may claim for it
        roles = [_claim_role_guard(role) for role in claim_roles()]
        served_jobs = served_jobs.where(or_(*roles) if len(roles) > 1 else roles[0])
    queue_order = (task.c.priority.desc(), task.c.turn_at, task.c.id)
    # Only tasks whose submitter and room are within their job's running limits
    # (``rules.running_limits``; a task of an unlimited job is told by its index entry).
    with_room = [within_limits(task, dialect)]
    if dialect == "postgresql":
        # Per served job and kind of claimable task, the head of its queue straight off its
        # index (a LATERAL scan in index order that stops after ``limit`` rows, however
        # deep the queue), then the best heads over all jobs.
        served = served_jobs.subquery("served")

        def heads_of(claimable: list[Any], name: str) -> Any:
            head = (
                select(task.c.id, task.c.priority, task.c.turn_at, _ROW_ADDRESS)
                .where(*claimable, *with_room, task.c.job_id == served.c.job_id)
                .order_by(*queue_order)
                .limit(limit)
                .with_for_update(skip_locked=not wait_for_locked)
                .lateral(name)
            )
            return select(*head.c).select_from(served).join(head, true())

        kinds = [heads_of(kind, f"head{n}") for n, kind in enumerate(source.conditions())]
        heads = _within_limits(_best_of(kinds), limit)
        picked = (
            select(heads.c.id, heads.c.row_address)
            .order_by(*_in_order(heads))
            .limit(limit)
            .cte("picked")
        )
        # The picked rows stay locked until the update, so their addresses (ctid) hold: the
        # update reaches them directly, whatever the planner believes about the table (with
        # the statistics of a young table it would rather scan every pending task).
        chosen = and_(task.c.id == picked.c.id, picked.c.row_address == _ROW_ADDRESS_OF_TASK)
    else:
        kinds = [
            select(task.c.id, task.c.priority, task.c.turn_at)
            .where(*claimable, *with_room, task.c.job_id.in_(served_jobs))
            .order_by(*queue_order)
            .limit(limit)
            for claimable in source.conditions()
        ]
        if len(kinds) == 1 and limit == 1:
            candidates = kinds[0].with_only_columns(task.c.id)
        else:
            heads = _within_limits(_best_of([select(*kind.subquery().c) for kind in kinds]), limit)
            candidates = select(heads.c.id).order_by(*_in_order(heads)).limit(limit)
        chosen = task.c.id.in_(candidates.scalar_subquery())
    claimed = (
        update(task)
        .where(chosen, is_pending())
        .values(
            status=(TaskStatus.RUNNING if start else TaskStatus.CLAIMED).value,
            worker_id=bindparam("worker_id"),
            claim_token=bindparam("claim_token"),
            claim_key=bindparam("claim_key", type_=task.c.claim_key.type),
            attempt=task.c.attempt + 1,
            lease_expires_at=bindparam("lease_until"),
            # A fresh attempt: nothing of the previous one (a retry) carries over.
            started_at=bindparam("now", type_=task.c.started_at.type) if start else None,
            error=None,
            result=None,
            progress=None,
            progress_message=None,
            **next_version(),
        )
        .returning(*answered_task_columns())
    )
    if dialect != "postgresql":
        return hot(claimed)
    # One round trip also for an empty claim: the claimed rows (or one row of NULLs) with
    # the worker's owner, which says why nothing was claimed.
    rows = claimed.cte("claimed")
    one = select(literal(1).label("one")).subquery("one")
    owner = select(worker_table.c.user_id).where(worker_table.c.id == bindparam("worker_id"))
    columns: list[CTE | Label[Any]] = [rows, owner.scalar_subquery().label("worker_owner")]
    if source == ClaimFrom.DUE_WAITING:
        columns.append(_claimable_left(dialect).label("claimable_left"))
    return hot(select(*columns).select_from(one.outerjoin(rows, true())))


def _claim_role_guard(role: Role) -> Any:
    """SQL for "``:owner_id`` holds ``role`` towards ``:worker_id``"."""
    if role is not Role.WORKER_OWNER:
        raise ValueError(f"a claim has no task yet: no {role} to check")
    return exists().where(
        worker_table.c.id == bindparam("worker_id"),
        worker_table.c.user_id == bindparam("owner_id"),
    )


def _best_of(kinds: list[Any]) -> Any:
    """The heads of each kind of claimable task together (one kind: as it is)."""
    return union_all(*kinds) if len(kinds) > 1 else kinds[0]


def _within_limits(heads: Any, limit: int) -> Any:
    """The candidate ``heads`` a claim of ``limit`` tasks may take together: each submitter
    and room only as many as it has room for (``running_limits.within_rank``; the first
    always fits, as the heads are within their limits one by one)."""
    rows = heads.subquery()
    if limit == 1:
        return rows
    candidate = task_table.alias("candidate")
    left_submitter, left_room = room_left(candidate)
    shares = (
        select(
            *rows.c,
            candidate.c.job_id,
            candidate.c.submitted_by,
            candidate.c.room_id,
            left_submitter.label("left_submitter"),
            left_room.label("left_room"),
        )
        .join(candidate, candidate.c.id == rows.c.id)
        .subquery()
    )
    for share, left in SHARES:  # the submitters' room first, then the rooms'
        fits = within_rank(shares, _in_order(shares), share, left).label("fits")
        ranked = select(*shares.c, fits).subquery()
        fitting = select(*(column for column in ranked.c if column.name != "fits"))
        shares = fitting.where(ranked.c.fits).subquery()
    return select(*(shares.c[column.name] for column in rows.c)).subquery()


def _in_order(heads: Any) -> list[Any]:
    return [heads.c.priority.desc(), heads.c.turn_at, heads.c.id]


@functools.cache
def claimable_left_statement(dialect: str) -> Executable:
    """Whether ``:worker_id``'s jobs have a task claimable at ``:now``, queued or due and
    waiting (PostgreSQL: asked after a claim that waited for a locked task and got nothing;
    see ``claim_statement``)."""
    return hot(select(_claimable_left(dialect).label("claimable_left")))


def _claimable_left(dialect: str) -> Any:
    """Whether a task of ``:worker_id``'s jobs is claimable at ``:now`` (its submitter and
    room within their running limits)."""
    served = task_table.c.job_id.in_(_served_jobs())
    with_room = [within_limits(task_table, dialect)]
    return or_(*(exists().where(*kind, served, *with_room) for kind in ClaimFrom.BOTH.conditions()))


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
) -> Claimed:
    """Claim up to ``limit`` tasks for the worker (``claim_statement``): the claim queue
    first, then, if that was short, the due waiting tasks. PostgreSQL reads the worker's
    owner in the claim itself and stops after an empty first claim the caller may not make
    (``rules.authorisation.may_claim``); after an empty claim although a task was
    claimable, it waits for the locked ones. SQLite reads the owner only when nothing was
    claimed. Tasks claimed by the first statement (committed on their own outside a
    transaction) are answered even if the second fails. With ``start`` every statement
    also starts the tasks it claims (``claim_statement``)."""
    params = {
        "worker_id": worker_id,
        "claim_token": claim_token,
        "claim_key": request_key,
        "owner_id": principal.id,
        "lease_until": lease_until,
        "now": now,
    }
    dialect = conn.dialect.name
    postgres = dialect == "postgresql"
    shape = {"check_owner": not is_unrestricted(principal), "start": start}
    statement = claim_statement(dialect, **shape, limit=limit)
    # ``all()`` is typed as a ``Sequence`` but gives a list (SQLAlchemy's and ``HotResult``'s
    # alike), which the claims of due tasks extend.
    rows = cast("list[Any]", (await conn.execute(statement, params)).all())
    owner = None
    if postgres:  # the claim's rows carry the worker's owner (one row of NULLs if none)
        owner = rows[0].worker_owner
        rows = [row for row in rows if row.id is not None]
        if not rows and not may_claim(principal, owner):
            return Claimed([], owner)
    if len(rows) < limit:  # the queue was short: due tasks the announcer has not queued
        due = claim_statement(
            dialect, **shape, limit=limit - len(rows), source=ClaimFrom.DUE_WAITING
        )
        try:
            more = (await conn.execute(due, params)).all()
        except Exception:
            # Tasks already claimed (committed on their own, outside a keyed claim's
            # transaction) are answered: run again, the claim would take others instead.
            if not rows or request_key is not None:
                raise
            log.warning("claim for worker %s: the due tasks not read", worker_id, exc_info=True)
            more = []
        if not postgres:
            rows += more
        else:
            rows += [row for row in more if row.id is not None]
            if not rows:
                left = more[0].claimable_left
                rows = await _claim_waiting_for_locked(conn, shape, limit, params, left)
    if not postgres and not rows:  # nothing claimed: is the worker unknown, or not the caller's?
        owner = await conn.scalar(_WORKER_OWNER, {"worker_id": worker_id})
    return Claimed(rows, owner)


async def _claim_waiting_for_locked(
    conn: Connection, shape: dict[str, Any], limit: int, params: dict[str, Any], left: bool
) -> list[Any]:
    """PostgreSQL, after a claim that got nothing although a task was claimable (``left``):
    it skipped what another claim held but did not take, so wait for it this time. Again
    when the task it waited for moved meanwhile to where it did not look (the announcer
    queued a due task it had locked)."""
    statement = claim_statement(
        conn.dialect.name, **shape, limit=limit, wait_for_locked=True, source=ClaimFrom.BOTH
    )
    for _ in range(LOCKED_CLAIM_ATTEMPTS):
        if not left:
            break
        rows = [row for row in (await conn.execute(statement, params)) if row.id is not None]
        if rows:
            return rows
        left = await conn.scalar(claimable_left_statement(conn.dialect.name), params)
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
