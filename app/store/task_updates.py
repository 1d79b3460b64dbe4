"""The statements of a PATCH: one guarded ``UPDATE … RETURNING`` per shape, the attempt a
retry decision reads, and the row that explains a refusal."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import (
    ColumnClause,
    ColumnElement,
    bindparam,
    exists,
    false,
    literal_column,
    null,
    or_,
    select,
    update,
)

from taskhub.rules.authorisation import Role, update_roles, update_unrestricted
from taskhub.rules.records import Principal
from taskhub.rules.states import TaskStatus, is_terminal, patch_predecessors
from taskhub.store.connections import Connection
from taskhub.store.hot_statements import hot
from taskhub.store.queue_positions import due_at
from taskhub.store.tables import (
    answered_task_columns,
    link_table,
    next_version,
    task_table,
    worker_table,
)
from taskhub.store.turns import requeued_turn

task = task_table


@dataclass(frozen=True, slots=True)
class Retry:
    """A failed attempt sent back to pending: ``attempt`` (read for the decision, part of
    the guard) and when the next one is due."""

    attempt: int
    run_at: datetime


@dataclass(frozen=True, slots=True)
class Updated:
    """The updated row (with ``job_served``: whether a worker still serves its job) and
    the result the update wrote (the row does not read it back)."""

    row: Any
    result: Any


_ATTEMPTS = hot(
    select(task.c.attempt, task.c.max_attempts).where(task.c.id == bindparam("b_task_id"))
)


async def current_attempt(conn: Connection, task_id: UUID) -> tuple[int, int] | None:
    """The task's ``(attempt, max_attempts)``, or None if there is no such task."""
    row = (await conn.execute(_ATTEMPTS, {"b_task_id": task_id})).first()
    return None if row is None else (int(row.attempt), int(row.max_attempts))


async def update_status(
    conn: Connection,
    principal: Principal,
    task_id: UUID,
    target: TaskStatus | None,
    *,
    now: datetime,
    claim_token: UUID | None = None,
    error: str | None = None,
    result: Any = None,
    progress: float | None = None,
    progress_message: str | None = None,
    lease_until: datetime | None = None,
    retry: Retry | None = None,
    maintains_room: bool = False,
) -> Updated | None:
    """Move the task to ``target`` (None: a progress report while running), or with
    ``retry`` back to pending, in one statement guarded by the task's status, the caller's
    roles (``rules.authorisation``; none for ``update_unrestricted``), ``claim_token`` and
    the retry's attempt; None when the guard matched nothing."""
    values = _transition_values(target, error, result, now)
    if retry is not None:
        values = _retry_values(error, retry.run_at, now)
    if progress is not None:
        values["progress"] = progress
    if progress_message is not None:
        values["progress_message"] = progress_message
    if lease_until is not None:
        values["lease_expires_at"] = lease_until
    statement = _update_statement(
        target,
        claim_token is not None,
        update_unrestricted(principal, target, maintains_room=maintains_room),
        tuple(sorted(values)),
        retry is not None,
    )
    params = {f"v_{k}": v for k, v in values.items()}
    params.update(
        b_task_id=task_id,
        b_claim_token=claim_token,
        b_user_id=principal.id,
        b_attempt=None if retry is None else retry.attempt,
    )
    row = (await conn.execute(statement, params)).first()
    return None if row is None else Updated(row, values.get("result"))


def _transition_values(
    target: TaskStatus | None, error: str | None, result: Any, now: datetime
) -> dict[str, Any]:
    if target is None:
        return {}
    values: dict[str, Any] = {"status": target.value}
    if result is not None:
        values["result"] = result
    if target == TaskStatus.RUNNING:
        values["started_at"] = now
    if is_terminal(target):
        values["completed_at"] = now
        if error is not None:
            values["error"] = error
    return values


def _retry_values(error: str | None, run_at: datetime, now: datetime) -> dict[str, Any]:
    """Back to pending, due at ``run_at``, free for any worker; ``started_at`` and ``error``
    stay to tell what the ended attempt did (the next claim clears them)."""
    return {
        "status": TaskStatus.PENDING.value,
        **due_at(run_at, now),
        "worker_id": None,
        "claim_token": None,
        "lease_expires_at": None,
        "error": error,
    }


def _role_guard(role: Role) -> Any:
    """SQL for "``:b_user_id`` holds ``role`` towards the task"."""
    if role is Role.WORKER_OWNER:
        return exists().where(
            worker_table.c.id == task.c.worker_id,
            worker_table.c.user_id == bindparam("b_user_id"),
        )
    return task.c.submitted_by == bindparam("b_user_id")


@functools.cache
def _update_statement(
    target: TaskStatus | None,
    with_token: bool,
    unrestricted: bool,
    columns: tuple[str, ...],
    with_attempt: bool = False,
) -> Any:
    """``UPDATE task SET <columns> WHERE id AND <may write target> RETURNING *``, built once
    per shape. Parameters: ``b_task_id``, ``b_claim_token``, ``b_user_id``, ``b_attempt``,
    ``v_<column>``."""
    allowed = patch_predecessors(target) if target is not None else {TaskStatus.RUNNING}
    guard: list[Any] = [
        task.c.id == bindparam("b_task_id"),
        # OR of equalities, not IN (…): an IN list is re-expanded on every execution.
        # false() keeps a target without predecessors (pending, claimed) from matching.
        or_(false(), *(task.c.status == s.value for s in sorted(allowed))),
    ]
    if with_token:
        guard.append(task.c.claim_token == bindparam("b_claim_token"))
    if with_attempt:
        guard.append(task.c.attempt == bindparam("b_attempt"))
    if not unrestricted:
        roles = [_role_guard(role) for role in update_roles(target)]
        guard.append(or_(*roles) if len(roles) > 1 else roles[0])
    values: dict[str, ColumnElement[Any]] = {
        column: bindparam(f"v_{column}") for column in columns
    } | next_version()
    if with_attempt:  # a retry: back into the queue, at a new turn in a fair job
        values["turn_at"] = requeued_turn()
    # Whether a worker still serves the job: a served job is no orphan, so a terminal
    # transition needs no soft-delete statement after this one.
    # The task's column spelled out with its table: SQLite's RETURNING leaves column names
    # unqualified, and a bare ``job_id`` would be the link's own (always true).
    task_job: ColumnClause[Any] = literal_column(f"{task.name}.{task.c.job_id.name}")
    served = exists().where(link_table.c.job_id == task_job).label("job_served")
    # The result is not read back: the guard admits only tasks not yet ended, which have
    # none, so the task's result is the one this update writes, if any (``Updated``).
    returned = [c for c in answered_task_columns() if c.name != "result"]
    unread = null().label("result")
    return hot(update(task).where(*guard).values(values).returning(*returned, unread, served))


_WITH_WORKER_OWNER = (
    select(task, worker_table.c.user_id.label("worker_owner"))
    .outerjoin(worker_table, worker_table.c.id == task.c.worker_id)
    .where(task.c.id == bindparam("b_task_id"))
)


async def task_with_worker_owner(conn: Connection, task_id: UUID) -> Any | None:
    """The task's row with ``worker_owner`` (the owner of the worker holding it, None if
    none), to explain why an update matched nothing; None if there is no such task."""
    return (await conn.execute(_WITH_WORKER_OWNER, {"b_task_id": task_id})).first()
