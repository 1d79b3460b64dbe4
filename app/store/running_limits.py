"""The SQL of running limits (``rules.running_limits``): what a claim's candidate task still
has room for, per submitter and per room, and how many of a share's tasks run now.

A task of a limited job carries ``limited``; its job's claimed and running ones are in
``ix_task_limited_active`` (by submitter) and ``ix_task_limited_active_room``. A candidate's
room is its job's limit less its share's tasks
running (NULL: no limit, or a task of an unlimited job, which costs one flag test)."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from sqlalchemy import (
    and_,
    bindparam,
    case,
    func,
    literal_column,
    null,
    or_,
    select,
    true,
    tuple_,
)
from sqlalchemy.sql import ColumnElement

from taskhub.store.connections import Connection
from taskhub.store.tables import ACTIVE_VALUES, job_table, task_table

_running = task_table.alias("running")


def _running_limited(table: Any) -> list[Any]:
    """Claimed or running, of a limited job: as the partial indexes' predicate spells it."""
    return [
        table.c.status.in_([literal_column(repr(value)) for value in ACTIVE_VALUES]),
        literal_column(f"{table.name}.limited"),
    ]


def _count_running(table: Any, *where: Any) -> Any:
    """How many of ``table``'s rows matching ``where`` are claimed or running, limited."""
    rows = select(func.count()).select_from(table)
    return rows.where(*where, *_running_limited(table)).scalar_subquery()


def _running_with(candidate: Any, column: str) -> Any:
    """Tasks of ``candidate``'s job running with its ``column`` (submitter or room)."""
    return _count_running(
        _running, _running.c.job_id == candidate.c.job_id, _running.c[column] == candidate.c[column]
    )


def _limit_of(candidate: Any, column: str) -> Any:
    return select(job_table.c[column]).where(job_table.c.id == candidate.c.job_id).scalar_subquery()


def _left(candidate: Any) -> tuple[Any, Any]:
    """``(per submitter, per room)``: how many more of the job's tasks ``candidate``'s
    submitter and room may have running (NULL: no limit)."""
    return (
        _limit_of(candidate, "max_running_per_submitter")
        - _running_with(candidate, "submitted_by"),
        _limit_of(candidate, "max_running_per_room") - _running_with(candidate, "room_id"),
    )


def room_left(candidate: Any) -> tuple[Any, Any]:
    """``_left`` of a limited task; NULLs for a task of an unlimited job (nothing counted)."""
    by_submitter, by_room = _left(candidate)
    return (
        case((candidate.c.limited, by_submitter), else_=null()),
        case((candidate.c.limited, by_room), else_=null()),
    )


def within_limits(candidate: Any, dialect: str) -> ColumnElement[bool]:
    """Whether ``candidate``'s submitter and room may have one more task running: one test
    of its flag for a task of an unlimited job (read off the claim queue's index entry).
    PostgreSQL counts in ``taskhub_within_limits`` (``store.queue_counts``), SQLite in
    correlated subqueries."""
    if dialect == "postgresql":
        c = candidate.c
        fits: Any = func.taskhub_within_limits(c.job_id, c.submitted_by, c.room_id)
    else:
        fits = and_(*(func.coalesce(left, 1) > 0 for left in _left(candidate)))
    return case((candidate.c.limited, fits), else_=true())


SHARES = (("submitted_by", "left_submitter"), ("room_id", "left_room"))
"""Each kind of share: the candidate's column that names it, and its room's column."""


def within_rank(rows: Any, order: list[Any], share: str, left: str) -> ColumnElement[bool]:
    """For candidate ``rows`` carrying ``share`` and ``left``: the ones a claim of several
    tasks may take together, in ``order`` — a share's first ``left`` only. Applied for the
    submitters, then for the rooms over what is left, it takes what one task at a time
    would (a task the room cannot take comes after the room filled up, so leaving it out
    changes nothing for the submitters before it)."""
    rank = func.row_number().over(partition_by=[rows.c.job_id, rows.c[share]], order_by=order)
    return or_(rows.c[left].is_(None), rank <= rows.c[left])


def _running_of_job(*where: Any) -> Any:
    job_id = bindparam("job_id", type_=task_table.c.job_id.type)
    return _count_running(task_table, task_table.c.job_id == job_id, *where)


_RUNNING_IN_SHARES = select(
    _running_of_job(
        task_table.c.submitted_by == bindparam("submitted_by", type_=task_table.c.submitted_by.type)
    ).label("by_submitter"),
    _running_of_job(
        task_table.c.room_id == bindparam("room_id", type_=task_table.c.room_id.type)
    ).label("by_room"),
)


async def running_in_shares(
    conn: Connection, job_id: UUID, submitted_by: UUID | None, room_id: str
) -> tuple[int, int]:
    """How many of the job's limited tasks run now for ``submitted_by`` and in ``room_id``."""
    params = {"job_id": job_id, "submitted_by": submitted_by, "room_id": room_id}
    row = (await conn.execute(_RUNNING_IN_SHARES, params)).first()
    assert row is not None
    return int(row.by_submitter), int(row.by_room)


def _full_shares(column: str, limit: str) -> Any:
    """``(job_id, column)`` of each share whose running tasks reached its job's ``limit``."""
    running = task_table.alias("at_limit")
    return (
        select(running.c.job_id, running.c[column])
        .join(job_table, job_table.c.id == running.c.job_id)
        .where(*_running_limited(running), job_table.c[limit].is_not(None))
        .group_by(running.c.job_id, running.c[column], job_table.c[limit])
        .having(func.count() >= job_table.c[limit])
    )


async def held_back_by_job(conn: Connection, limit: int) -> dict[str, int]:
    """Per job full name, its pending tasks whose submitter or room is at a running limit
    now (the ``limit`` jobs with most; jobs with none are left out)."""
    pending = task_table
    by_submitter = tuple_(pending.c.job_id, pending.c.submitted_by).in_(
        _full_shares("submitted_by", "max_running_per_submitter")
    )
    by_room = tuple_(pending.c.job_id, pending.c.room_id).in_(
        _full_shares("room_id", "max_running_per_room")
    )
    held = func.count().label("held")
    statement = (
        select(job_table.c.room_id, job_table.c.category, job_table.c.name, held)
        .select_from(pending.join(job_table, job_table.c.id == pending.c.job_id))
        .where(
            pending.c.status == literal_column("'pending'"),
            literal_column(f"{pending.name}.limited"),
            or_(by_submitter, by_room),
        )
        .group_by(job_table.c.room_id, job_table.c.category, job_table.c.name)
        .order_by(held.desc())
        .limit(limit)
    )
    rows = (await conn.execute(statement)).all()
    return {f"{row.room_id}:{row.category}:{row.name}": int(row.held) for row in rows}
