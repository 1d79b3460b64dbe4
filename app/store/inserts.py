"""Inserts that differ per engine in their spelling: the task insert guarded by its job's
version (with, on PostgreSQL, the new task's queue position in the same statement), and
``INSERT … ON CONFLICT DO NOTHING``."""

from __future__ import annotations

import functools
from typing import Any

from sqlalchemy import Table, TextClause, bindparam, func, literal, or_, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine.interfaces import BindTyping
from sqlalchemy.sql import Executable
from sqlalchemy.sql.elements import DQLDMLClauseElement

from taskhub.rules.states import TaskStatus
from taskhub.store import user_usage
from taskhub.store.hot_statements import hot
from taskhub.store.tables import job_table, task_table


@functools.cache
def insert_task_of_live_job(
    dialect: str, position: Any = None, *, within_quota: bool = False
) -> Executable:
    """``INSERT INTO task … SELECT … FROM job WHERE id = :b_job_id AND updated_at =
    :b_job_version AND NOT deleted ON CONFLICT DO NOTHING RETURNING max_attempts``: no row
    when the job was soft-deleted or changed since the caller read it, or when an equal
    ``(submitter, job, idempotency key)`` already exists (the unique index decides between
    racing duplicates). ``:b_max_attempts`` NULL takes the job's. On PostgreSQL the job row
    is locked (``FOR KEY SHARE``, as the foreign key's check locks it anyway).

    ``within_quota``: no row either when the submitter is at one of the submit's per-user
    bounds (``store.user_usage.within_quota``, its parameters ``quota_params``).

    With ``position`` (PostgreSQL): the insert becomes a data-modifying CTE and the row
    also carries ``position`` as ``queue_position`` — one round trip instead of two. It is
    evaluated on the statement's snapshot, which does not hold the new task yet."""
    task = task_table
    columns = ["id", "job_id", "room_id", "status", "payload", "created_at", "submitted_by"]
    columns += ["attempt", "idempotency_key", "priority", "max_attempts", "run_at", "waiting"]
    columns += ["version", "request_digest", "rerun_of", "turn_at", "share_key"]
    columns += ["share_backlogged", "limited"]
    rows = select(
        bindparam("b_id", type_=task.c.id.type),
        job_table.c.id,
        bindparam("b_room_id", type_=task.c.room_id.type),
        literal(TaskStatus.PENDING.value, type_=task.c.status.type),
        bindparam("b_payload", type_=task.c.payload.type),
        bindparam("b_created_at", type_=task.c.created_at.type),
        bindparam("b_submitted_by", type_=task.c.submitted_by.type),
        bindparam("b_attempt", type_=task.c.attempt.type),
        bindparam("b_key", type_=task.c.idempotency_key.type),
        bindparam("b_priority", type_=task.c.priority.type),
        func.coalesce(
            bindparam("b_max_attempts", type_=task.c.max_attempts.type), job_table.c.max_attempts
        ),
        bindparam("b_run_at", type_=task.c.run_at.type),
        bindparam("b_waiting", type_=task.c.waiting.type),
        literal(1, type_=task.c.version.type),
        bindparam("b_digest", type_=task.c.request_digest.type),
        bindparam("b_rerun_of", type_=task.c.rerun_of.type),
        bindparam("b_turn_at", type_=task.c.turn_at.type),
        bindparam("b_share_key", type_=task.c.share_key.type),
        bindparam("b_share_backlogged", type_=task.c.share_backlogged.type),
        or_(
            job_table.c.max_running_per_submitter.is_not(None),
            job_table.c.max_running_per_room.is_not(None),
        ),
    ).where(
        job_table.c.id == bindparam("b_job_id"),
        job_table.c.updated_at == bindparam("b_job_version", type_=job_table.c.updated_at.type),
        job_table.c.deleted.is_(False),
    )
    if within_quota:
        rows = rows.where(user_usage.within_quota())
    if dialect == "postgresql":
        # Waits for a soft-delete under way (it locks the job row first) and then checks
        # the job as that left it, instead of the snapshot the statement began with.
        rows = rows.with_for_update(read=True, key_share=True, of=job_table)
    inserted = (
        _insert(dialect, task)
        .from_select(columns, rows)
        .on_conflict_do_nothing()
        .returning(task.c.max_attempts)
    )
    if position is None:
        return hot(_compiled_once(dialect, inserted))
    if dialect != "postgresql":
        raise ValueError("only PostgreSQL reads a position in the statement that inserts")
    new_row = inserted.cte("inserted")
    both = select(new_row.c.max_attempts, position.label("queue_position"))
    return hot(_compiled_once(dialect, both.select_from(new_row)))


def _compiled_once(dialect: str, statement: DQLDMLClauseElement) -> TextClause:
    """``statement`` as fixed SQL text with its typed parameters. SQLAlchemy (2.0.x) does
    not cache its dialects' ``ON CONFLICT`` clauses, so such a statement would be compiled
    again on every execution; as text with typed parameters it is compiled once."""
    module = postgresql if dialect == "postgresql" else sqlite
    plain = module.dialect(paramstyle="named")
    plain.bind_typing = BindTyping.NONE  # no inline casts: the executing dialect adds its own
    compiled = statement.compile(dialect=plain)
    params = [
        bindparam(name, value=bind.value, type_=bind.type)
        if bind.value is not None
        else bindparam(name, type_=bind.type)
        for bind, name in compiled.bind_names.items()
    ]
    return text(compiled.string).bindparams(*params)


def insert_ignoring_duplicates(dialect: str, table: Table, values: dict[str, Any]) -> Executable:
    """``INSERT … ON CONFLICT DO NOTHING`` (both engines spell it alike, via their dialects)."""
    return _insert(dialect, table).values(**values).on_conflict_do_nothing()


def _insert(dialect: str, table: Table) -> postgresql.Insert | sqlite.Insert:
    """The dialect's own ``INSERT`` construct (it has ``on_conflict_do_nothing``)."""
    if dialect == "postgresql":
        return postgresql.insert(table)
    return sqlite.insert(table)
