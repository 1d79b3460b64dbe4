"""What every claim statement is made of, whichever engine runs it: its shape, the jobs it
serves, the queue order, the candidates a claim of several tasks may take together, the
update that claims the picked tasks, and what one statement took (``Taken``).
``claim_sqlite`` and ``claim_postgres`` build each engine's statement from these;
docs/performance.md ("The claim") says why they are built as they are."""

from __future__ import annotations

import enum
import functools
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from sqlalchemy import Update, bindparam, exists, or_, select, union_all, update
from sqlalchemy.sql import Executable

from taskhub.rules.authorisation import Role, claim_roles
from taskhub.rules.naming import INTERNAL_ROOM
from taskhub.rules.states import TaskStatus
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

S = TypeVar("S", bound=Executable)


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
        """Per kind of claimable task, its conditions."""
        queued = [is_queued(), or_(task_table.c.run_at.is_(None), _due())]
        due_waiting = [is_waiting(), _due()]
        return {
            ClaimFrom.QUEUE: [queued],
            ClaimFrom.DUE_WAITING: [due_waiting],
            ClaimFrom.BOTH: [queued, due_waiting],
        }[self]


@dataclass(frozen=True, slots=True)
class ClaimShape:
    """What a claim statement is built for (once per shape): up to ``limit`` tasks of
    ``source``; with ``check_owner`` only for a caller holding a claim role; with ``start``
    started as well as claimed; with ``wait_for_locked`` (PostgreSQL) waiting for rows
    another claim holds instead of skipping them; with ``exclude_rooms`` never a task of
    the rooms ``:closed_rooms`` (private rooms where the worker's owner may not work).
    ``limit`` is part of the shape: it sets the statement's form (one task or several) and
    its LIMITs' values."""

    check_owner: bool
    limit: int
    wait_for_locked: bool = False
    source: ClaimFrom = ClaimFrom.QUEUE
    start: bool = False
    exclude_rooms: bool = False

    def room_conditions(self, task: Any) -> list[Any]:
        """Beside the running limits: the closed rooms left alone (``exclude_rooms``)."""
        if not self.exclude_rooms:
            return []
        return [task.c.room_id.not_in(bindparam("closed_rooms", expanding=True))]

    def hot(self, statement: S) -> S:
        """``statement`` run straight on the driver (``hot_statements``), but for a claim
        that leaves rooms alone: its list of rooms expands at execution time, which a hot
        statement cannot (such a claim is rare: a non-member's worker while rooms are
        private; the open rooms' claims stay hot)."""
        return statement if self.exclude_rooms else hot(statement)


def served_jobs(check_owner: bool) -> Any:
    """Job ids linked to ``:worker_id`` (never ``@internal`` ones: those belong to the
    taskiq executor, not to remote workers); with ``check_owner`` none unless ``:owner_id``
    holds one of ``rules.authorisation.claim_roles``."""
    served = _served_jobs()
    if check_owner:  # only who holds a claim role (or a superuser) may claim for it
        roles = [_claim_role_guard(role) for role in claim_roles()]
        served = served.where(or_(*roles) if len(roles) > 1 else roles[0])
    return served


def _served_jobs() -> Any:
    return (
        select(link_table.c.job_id)
        .join(job_table, job_table.c.id == link_table.c.job_id)
        .where(
            link_table.c.worker_id == bindparam("worker_id"),
            job_table.c.room_id != INTERNAL_ROOM,
        )
    )


def _claim_role_guard(role: Role) -> Any:
    """SQL for "``:owner_id`` holds ``role`` towards ``:worker_id``"."""
    if role is not Role.WORKER_OWNER:
        raise ValueError(f"a claim has no task yet: no {role} to check")
    return exists().where(
        worker_table.c.id == bindparam("worker_id"),
        worker_table.c.user_id == bindparam("owner_id"),
    )


def in_queue_order(rows: Any) -> list[Any]:
    """The claim order of ``rows`` (the task table or candidates from it): highest
    priority, then lowest turn (``rules.fair_share``), then id."""
    return [rows.c.priority.desc(), rows.c.turn_at, rows.c.id]


def best_of(kinds: list[Any]) -> Any:
    """The heads of each kind of claimable task together (one kind: as it is)."""
    return union_all(*kinds) if len(kinds) > 1 else kinds[0]


def within_limits_together(heads: Any, limit: int) -> Any:
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
        fits = within_rank(shares, in_queue_order(shares), share, left).label("fits")
        ranked = select(*shares.c, fits).subquery()
        fitting = select(*(column for column in ranked.c if column.name != "fits"))
        shares = fitting.where(ranked.c.fits).subquery()
    return select(*(shares.c[column.name] for column in rows.c)).subquery()


def claimed_update(shape: ClaimShape, chosen: Any) -> Update:
    """``UPDATE task … WHERE <chosen> AND pending RETURNING <the answered columns>``: the
    chosen tasks as a new attempt of ``:worker_id`` with ``:claim_token`` and ``:claim_key``
    (the claim's Idempotency-Key or NULL), leased until ``:lease_until``; with
    ``shape.start`` also started (``running``, ``started_at = :now``)."""
    task = task_table
    return (
        update(task)
        .where(chosen, is_pending())
        .values(
            status=(TaskStatus.RUNNING if shape.start else TaskStatus.CLAIMED).value,
            worker_id=bindparam("worker_id"),
            claim_token=bindparam("claim_token"),
            claim_key=bindparam("claim_key", type_=task.c.claim_key.type),
            attempt=task.c.attempt + 1,
            lease_expires_at=bindparam("lease_until"),
            # A fresh attempt: nothing of the previous one (a retry) carries over.
            started_at=bindparam("now", type_=task.c.started_at.type) if shape.start else None,
            error=None,
            result=None,
            progress=None,
            progress_message=None,
            **next_version(),
        )
        .returning(*answered_task_columns())
    )


def claimable_left(dialect: str, exclude_rooms: bool = False) -> Any:
    """Whether a task of ``:worker_id``'s jobs is claimable at ``:now``, queued or due and
    waiting (its submitter and room within their running limits; with ``exclude_rooms``
    not in ``:closed_rooms``)."""
    served = task_table.c.job_id.in_(_served_jobs())
    with_room = [within_limits(task_table, dialect)]
    if exclude_rooms:
        with_room.append(task_table.c.room_id.not_in(bindparam("closed_rooms", expanding=True)))
    return or_(*(exists().where(*kind, served, *with_room) for kind in ClaimFrom.BOTH.conditions()))


@functools.cache
def claimable_left_statement(dialect: str, exclude_rooms: bool = False) -> Executable:
    """``SELECT <claimable_left>``: asked after a claim that waited for a locked task and
    got nothing (PostgreSQL, ``claims.claim``)."""
    statement = select(claimable_left(dialect, exclude_rooms).label("claimable_left"))
    return statement if exclude_rooms else hot(statement)


@dataclass(slots=True)
class Taken:
    """What one claim statement took: its task rows; ``worker_owner`` if the statement read
    it (``owner_read``: the claiming worker's owner, None if there is no such worker); and
    whether a claimable task was left behind a locked one (``claimable_left``)."""

    rows: list[Any]
    owner_read: bool = False
    worker_owner: UUID | None = None
    claimable_left: bool = False
