"""Task submission, claiming, transitions and reads."""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from uuid import UUID, uuid4

from sqlalchemy import bindparam, exists, false, literal_column, null, or_, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from taskhub.clock import new_id, utcnow
from taskhub.rules.errors import (
    Forbidden,
    InternalJobNotConfigured,
    InvalidTaskTransition,
    JobNotFound,
    StaleClaim,
    TaskNotFound,
    ValidationFailed,
)
from taskhub.rules.events import (
    EventBatch,
    JobsInvalidate,
    TaskAvailable,
    TaskCancelled,
    TaskStatusChanged,
)
from taskhub.rules.naming import INTERNAL_ROOM, validate_room_id
from taskhub.rules.naming import full_name as name_of
from taskhub.rules.records import Principal, TaskRecord
from taskhub.rules.retries import DEFAULT_RETRY_POLICY, RetryPolicy, may_retry
from taskhub.rules.states import (
    TaskStatus,
    check_patch_transition,
    is_terminal,
    patch_predecessors,
    previous_status,
)
from taskhub.services.jobs import (
    JobNames,
    KnownJobs,
    find_visible_job,
    soft_delete_if_orphaned,
    visible_job_name,
)
from taskhub.services.ownership import check_worker, owned_worker
from taskhub.store.claims import ClaimFrom, claim_statement, claimable_left_statement
from taskhub.store.database import Database, is_deadlock
from taskhub.store.hot_statements import hot
from taskhub.store.inserts import insert_task_of_live_job
from taskhub.store.queue_positions import (
    SELECT_TASKS,
    due_at,
    load_task,
    position_before_insert,
    position_params,
    queue_position,
    task_record,
    with_position,
)
from taskhub.store.tables import (
    answered_task_columns,
    job_table,
    link_table,
    next_version,
    task_table,
    worker_table,
)
from taskhub.validation.payload_checks import check_payload

task = task_table

log = logging.getLogger(__name__)
# A claim aborted as one side of a deadlock runs again, this many times in all at most.
CLAIM_ATTEMPTS = 4
# PostgreSQL: an empty claim while a task was claimable waits for locked tasks this many
# times at most (see ``_claim``).
LOCKED_CLAIM_ATTEMPTS = 2


@dataclass(frozen=True, slots=True)
class SubmitOptions:
    """Taskhub's optional submit fields: ``max_attempts`` None takes the job's."""

    priority: int = 0
    run_at: datetime | None = None
    max_attempts: int | None = None


class InternalExecutors(Protocol):
    """What submit needs to know about ``@internal`` execution."""

    def has_executor(self, full_name: str) -> bool: ...


async def submit_task(
    db: Database,
    principal: Principal,
    room_id: str,
    full_name: str,
    payload: dict[str, Any],
    internal: InternalExecutors,
    idempotency_key: str | None = None,
    options: SubmitOptions | None = None,
    known_jobs: KnownJobs | None = None,
) -> tuple[TaskRecord, EventBatch, bool]:
    """Queue a task of a job visible from ``room_id``; returns ``(task, events, created)``.
    ``task_available`` goes out only if the task is claimable at once (a delayed one is
    announced when it comes due). An ``@internal`` task is inserted as its first attempt:
    the caller dispatches it to the broker after this commit. With ``idempotency_key``, a
    task this user already submitted to this job with that key is returned instead
    (``created`` False, no events) — also when the duplicates race: the unique index
    decides, and the loser reads the winner. With ``known_jobs``, the job as last read
    stands in for a lookup (the insert checks it is still current)."""
    validate_room_id(room_id)
    visible_job_name(room_id, full_name)
    options = options or SubmitOptions()
    job = known_jobs.get(full_name) if known_jobs is not None else None
    while True:
        fresh = job is None
        if job is None:
            async with db.autocommit() as conn:
                job, replay = await _visible_job(
                    conn, principal, room_id, full_name, idempotency_key
                )
            if replay is not None:
                return replay, EventBatch(), False
            if known_jobs is not None:
                known_jobs.remember(full_name, job)
        try:
            _check_executor(job, internal)
            # No connection is held meanwhile: a costly payload takes up to seconds.
            await check_payload((job.id, job.updated_at), job.schema, payload, principal.id)
        except (ValidationFailed, InternalJobNotConfigured):
            if fresh:
                raise
            job = None  # judged by a job as read earlier: read it again to be sure
            continue
        now = utcnow()
        record = _new_task(job, room_id, principal, payload, options, now)
        async with db.autocommit() as conn:
            answer = await _inserted_or_replayed(
                conn, db, principal, record, job, idempotency_key, options, now
            )
        if answer is record:
            break
        if answer is not None:
            return answer, EventBatch(), False
        # The job changed or went since it was read.
        if known_jobs is not None:
            known_jobs.forget(full_name)
        if fresh:
            raise JobNotFound(f"Job {full_name!r} not found.")
        job = None
    events = EventBatch()
    events.add(TaskStatusChanged(record))
    if job.room_id != INTERNAL_ROOM and record.run_at is None:
        events.add(TaskAvailable(job_name=record.job_name, room_id=room_id, task_id=str(record.id)))
    return record, events, True


def _check_executor(job: Any, internal: InternalExecutors) -> None:
    """503 for a task of an ``@internal`` job that no executor here can run."""
    if job.room_id == INTERNAL_ROOM and not internal.has_executor(_full_name(job)):
        raise InternalJobNotConfigured(
            f"Internal job {_full_name(job)!r} is registered but no executor is available."
        )


def _full_name(job: Any) -> str:
    return name_of(job.room_id, job.category, job.name)


def _new_task(
    job: Any,
    room_id: str,
    principal: Principal,
    payload: dict[str, Any],
    options: SubmitOptions,
    now: datetime,
) -> TaskRecord:
    """The record of a task submitted at ``now`` to ``job`` (a row of the job table); only
    a ``run_at`` ahead of ``now`` is kept."""
    job_name = _full_name(job)
    ahead = options.run_at is not None and options.run_at > now
    run_at = options.run_at.astimezone(UTC) if ahead and options.run_at else None
    return TaskRecord(
        id=new_id(),
        job_id=job.id,
        job_name=job_name,
        room_id=room_id,
        status=TaskStatus.PENDING,
        payload=payload,
        created_at=now,
        started_at=None,
        completed_at=None,
        worker_id=None,
        error=None,
        submitted_by=principal.id,
        claim_token=None,
        attempt=1 if job.room_id == INTERNAL_ROOM else 0,
        priority=options.priority,
        max_attempts=options.max_attempts or job.max_attempts,
        run_at=run_at,
    )


async def _visible_job(
    conn: AsyncConnection,
    principal: Principal,
    room_id: str,
    full_name: str,
    idempotency_key: str | None,
) -> tuple[Any, TaskRecord | None]:
    """``(job, None)``; or ``(None, task)`` for a job gone since this user submitted
    ``task`` to it with ``idempotency_key`` (a replay answers what the first request got)."""
    try:
        return await find_visible_job(conn, room_id, full_name), None
    except JobNotFound:
        if idempotency_key is not None:
            original = await _submitted_to_name_before(
                conn, principal, room_id, full_name, idempotency_key
            )
            if original is not None:
                return None, original
        raise


async def _inserted_or_replayed(
    conn: AsyncConnection,
    db: Database,
    principal: Principal,
    record: TaskRecord,
    job: Any,
    idempotency_key: str | None,
    options: SubmitOptions,
    now: datetime,
) -> TaskRecord | None:
    """``record``, inserted; or the task this user submitted to ``job`` before with
    ``idempotency_key`` (also when the duplicates race: the unique index decides, and the
    loser reads the winner); None if the job changed or went since it was read."""
    if idempotency_key is not None:
        original = await _submitted_before(conn, principal, job.id, idempotency_key)
        if original is not None:
            return original
    if await _insert_task(conn, db, record, job, idempotency_key, options, now):
        return record
    if idempotency_key is not None:
        return await _submitted_before(conn, principal, job.id, idempotency_key)
    return None


async def _insert_task(
    conn: AsyncConnection,
    db: Database,
    record: TaskRecord,
    job: Any,
    idempotency_key: str | None,
    options: SubmitOptions,
    now: datetime,
) -> bool:
    """Insert ``record`` if ``job`` is still live and as read; fill in what the database
    decided (``max_attempts``, ``queue_position``). PostgreSQL reads the position in the
    same statement; SQLite (in-process, no round trip) right after."""
    params = {
        "b_key": idempotency_key,
        "b_id": record.id,
        "b_job_id": job.id,
        "b_job_version": job.updated_at,
        "b_room_id": record.room_id,
        "b_payload": record.payload,
        "b_created_at": record.created_at,
        "b_submitted_by": record.submitted_by,
        "b_attempt": record.attempt,
        "b_priority": record.priority,
        "b_max_attempts": options.max_attempts,
        "b_run_at": record.run_at,
        "b_waiting": record.run_at is not None,  # only a run_at ahead is kept
    }
    if db.is_sqlite:
        statement = insert_task_of_live_job(db.dialect)
    else:
        statement = insert_task_of_live_job(db.dialect, position_before_insert(record, now))
        params |= position_params(record, now)
    row = (await conn.execute(statement, params)).first()
    if row is None:
        return False
    record.max_attempts = row.max_attempts
    if db.is_sqlite:
        record.queue_position = await queue_position(conn, record, now, newest=True)
    else:
        record.queue_position = int(row.queue_position)
    return True


async def _submitted_before(
    conn: AsyncConnection, principal: Principal, job_id: UUID, key: str
) -> TaskRecord | None:
    params = {"b_user": principal.id, "b_job": job_id, "b_key": key}
    row = (await conn.execute(_IDEMPOTENT_REPLAY, params)).first()
    return None if row is None else await with_position(conn, row)


async def _submitted_to_name_before(
    conn: AsyncConnection, principal: Principal, room_id: str, full_name: str, key: str
) -> TaskRecord | None:
    """``_submitted_before`` by the job's name, soft-deleted jobs included: a replay answers
    what its first request got, whether or not the job is still live."""
    parsed = visible_job_name(room_id, full_name)
    named = select(job_table.c.id).where(
        job_table.c.room_id == parsed.room_id,
        job_table.c.category == parsed.category,
        job_table.c.name == parsed.name,
    )
    statement = SELECT_TASKS.where(
        task.c.submitted_by == principal.id,
        task.c.job_id.in_(named),
        task.c.idempotency_key == key,
    )
    row = (await conn.execute(statement)).first()
    return None if row is None else await with_position(conn, row)


_IDEMPOTENT_REPLAY = hot(
    SELECT_TASKS.where(
        task.c.submitted_by == bindparam("b_user"),
        task.c.job_id == bindparam("b_job"),
        task.c.idempotency_key == bindparam("b_key"),
    )
)


async def claim_tasks(
    db: Database,
    principal: Principal,
    worker_id: UUID,
    max_tasks: int = 1,
    *,
    lease_seconds: float,
    request_key: str | None = None,
) -> tuple[list[TaskRecord], EventBatch]:
    """Hand the worker up to ``max_tasks`` of the oldest pending tasks of its jobs, each
    with a fresh claim token, in one atomic statement (which also checks ownership).

    With ``request_key`` (the claim's ``Idempotency-Key``) the tasks keep the key, and the
    tasks this worker still holds as claimed under it are answered again instead of
    claiming more: a worker that repeats a claim whose answer it never got (a connection
    reset after the commit) gets the same tasks, not the next ones while the first wait for
    their lease to run out. Keyed claims of one worker take its row lock first, so one
    repeated while the first is still running waits for it and then answers its tasks.

    A claim that PostgreSQL aborts as one side of a deadlock changed nothing and runs again
    (two batch claims can take the queue-count rows of two jobs in opposite orders: their
    tasks interleave in time)."""
    for attempt in range(1, CLAIM_ATTEMPTS + 1):
        try:
            if request_key is not None:
                return await _keyed_claim(
                    db, principal, worker_id, max_tasks, lease_seconds, request_key
                )
            async with db.autocommit() as conn:
                return await _claim(db, conn, principal, worker_id, max_tasks, lease_seconds, None)
        except Exception as exc:
            if attempt == CLAIM_ATTEMPTS or not is_deadlock(exc):
                raise
            log.info(
                "claim for worker %s deadlocked (attempt %d); running it again", worker_id, attempt
            )
    raise AssertionError("unreachable")


async def _claim(
    db: Database,
    conn: AsyncConnection,
    principal: Principal,
    worker_id: UUID,
    max_tasks: int,
    lease_seconds: float,
    request_key: str | None,
) -> tuple[list[TaskRecord], EventBatch]:
    now = utcnow()
    params = {
        "worker_id": worker_id,
        "claim_token": uuid4(),
        "claim_key": request_key,
        "owner_id": principal.id,
        "lease_until": now + timedelta(seconds=lease_seconds),
        "now": now,
    }
    shape = {"check_owner": not principal.is_superuser}
    rows = (await conn.execute(claim_statement(db.dialect, **shape, limit=max_tasks), params)).all()
    if not db.is_sqlite:  # the claim's rows carry the worker's owner (one row of NULLs if none)
        owner = rows[0].worker_owner
        rows = [row for row in rows if row.id is not None]
        if not rows:
            check_worker(principal, worker_id, owner)
    if len(rows) < max_tasks:  # the queue was short: due tasks the announcer has not queued
        due = claim_statement(
            db.dialect, **shape, limit=max_tasks - len(rows), source=ClaimFrom.DUE_WAITING
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
        if db.is_sqlite:
            rows += more
        else:
            rows += [row for row in more if row.id is not None]
            if not rows:
                left = more[0].claimable_left
                rows = await _claim_waiting_for_locked(conn, db, shape, max_tasks, params, left)
    if db.is_sqlite and not rows:  # nothing claimed: is the worker unknown, or not the caller's?
        await owned_worker(conn, principal, worker_id)
    names = await JobNames.resolve(conn, {row.job_id for row in rows})
    records = _in_queue_order(task_record(row, names[row.job_id]) for row in rows)
    events = EventBatch()
    for record in records:
        events.add(TaskStatusChanged(record, TaskStatus.PENDING))
    return records, events


async def _claim_waiting_for_locked(
    conn: AsyncConnection,
    db: Database,
    shape: dict[str, Any],
    max_tasks: int,
    params: dict[str, Any],
    left: bool,
) -> list[Any]:
    """PostgreSQL, after a claim that got nothing although a task was claimable (``left``):
    it skipped what another claim held but did not take, so wait for it this time. Again
    when the task it waited for moved meanwhile to where it did not look (the announcer
    queued a due task it had locked)."""
    statement = claim_statement(
        db.dialect, **shape, limit=max_tasks, wait_for_locked=True, source=ClaimFrom.BOTH
    )
    for _ in range(LOCKED_CLAIM_ATTEMPTS):
        if not left:
            break
        rows = [row for row in (await conn.execute(statement, params)) if row.id is not None]
        if rows:
            return rows
        left = await conn.scalar(claimable_left_statement(), params)
    return []


async def _keyed_claim(
    db: Database,
    principal: Principal,
    worker_id: UUID,
    max_tasks: int,
    lease_seconds: float,
    request_key: str,
) -> tuple[list[TaskRecord], EventBatch]:
    """One transaction: the worker's row locked (SQLite: the one writer), then the tasks it
    holds under the key — or, if none, a fresh claim that leaves the key on its tasks."""
    async with db.write() as conn:
        await owned_worker(conn, principal, worker_id, lock="exclusive")
        held = (
            await conn.execute(_HELD_UNDER_KEY, {"worker_id": worker_id, "claim_key": request_key})
        ).all()
        if not held:
            return await _claim(
                db, conn, principal, worker_id, max_tasks, lease_seconds, request_key
            )
        names = await JobNames.resolve(conn, {row.job_id for row in held})
    records = _in_queue_order(task_record(row, names[row.job_id]) for row in held)
    return records[:max_tasks], EventBatch()


def _in_queue_order(records: Iterable[TaskRecord]) -> list[TaskRecord]:
    return sorted(records, key=lambda r: (-r.priority, r.created_at, r.id))


_HELD_UNDER_KEY = select(task).where(
    task.c.worker_id == bindparam("worker_id", type_=task.c.worker_id.type),
    task.c.status == literal_column(f"'{TaskStatus.CLAIMED.value}'"),
    task.c.claim_key == bindparam("claim_key", type_=task.c.claim_key.type),
)


async def update_task(
    db: Database,
    principal: Principal,
    task_id: UUID,
    *,
    status: TaskStatus | None,
    error: str | None = None,
    claim_token: UUID | None = None,
    result: Any = None,
    progress: float | None = None,
    progress_message: str | None = None,
    lease_seconds: float | None = None,
    retry: bool = False,
    retry_policy: RetryPolicy = DEFAULT_RETRY_POLICY,
) -> tuple[TaskRecord, EventBatch]:
    """Apply a PATCH — a transition, or (``status=None``) a progress report while running —
    as one guarded ``UPDATE … WHERE id = ? AND status IN (allowed
    predecessors) AND <caller may> [AND claim_token = ?] RETURNING``. Only when it matches
    nothing is the task read again, to say why (404, 403, stale claim, bad transition).
    Every write here is one self-guarded statement, so none needs a transaction.

    ``failed`` with ``retry`` sends the task back to pending (due after the policy's
    backoff) while it has attempts left; the attempt read for that decision is part of the
    guard, so a concurrent change makes the write match nothing."""
    events = EventBatch()
    async with db.autocommit() as conn:
        now = utcnow()
        values = _transition_values(status, error, result, now)
        attempt = None
        if retry and status == TaskStatus.FAILED:
            attempt = await _retryable_attempt(conn, task_id)
            if attempt is not None:
                values = _retry_values(error, retry_policy.next_run_at(attempt, now), now)
        if progress is not None:
            values["progress"] = progress
        if progress_message is not None:
            values["progress_message"] = progress_message
        if lease_seconds is not None and (status is None or status == TaskStatus.RUNNING):
            values["lease_expires_at"] = now + timedelta(seconds=lease_seconds)
        statement = _update_statement(
            status,
            claim_token is not None,
            principal.is_superuser,
            tuple(sorted(values)),
            attempt is not None,
        )
        params = {f"v_{k}": v for k, v in values.items()}
        params.update(
            b_task_id=task_id, b_claim_token=claim_token, b_user_id=principal.id, b_attempt=attempt
        )
        updated = (await conn.execute(statement, params)).first()
        if updated is None:
            await _explain_refusal(conn, principal, task_id, status, claim_token)
            raise InvalidTaskTransition(f"Task {task_id} changed concurrently; retry.")
        record = task_record(updated, await JobNames.one(conn, updated.job_id))
        record.result = values.get("result")  # (not read back: see ``_update_statement``)
        record.queue_position = await queue_position(conn, record, now)
        events.add(
            TaskStatusChanged(record, _previous(record, status, retried=attempt is not None))
        )
        if status == TaskStatus.CANCELLED and record.worker_id is not None:
            events.add(TaskCancelled(str(record.id), record.job_name, str(record.worker_id)))
    if status is not None and is_terminal(record.status) and not updated.job_served:
        room = await soft_delete_if_orphaned(db, record.job_id)
        if room is not None:
            events.add(JobsInvalidate(room))
    return record, events


def _previous(record: TaskRecord, target: TaskStatus | None, *, retried: bool) -> TaskStatus:
    if target is None:  # a progress report
        return record.status
    return previous_status(
        record.status,
        started=record.started_at is not None,
        claimed=retried or record.worker_id is not None,
        retried=retried,
    )


async def _retryable_attempt(conn: AsyncConnection, task_id: UUID) -> int | None:
    """The task's current attempt, if another one may follow it."""
    row = (await conn.execute(_ATTEMPTS, {"b_task_id": task_id})).first()
    if row is None or not may_retry(row.attempt, row.max_attempts):
        return None
    return int(row.attempt)


_ATTEMPTS = hot(
    select(task.c.attempt, task.c.max_attempts).where(task.c.id == bindparam("b_task_id"))
)


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


@functools.cache
def _update_statement(
    target: TaskStatus | None,
    with_token: bool,
    superuser: bool,
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
    if not superuser:
        owns_worker = exists().where(
            worker_table.c.id == task.c.worker_id,
            worker_table.c.user_id == bindparam("b_user_id"),
        )
        if target == TaskStatus.CANCELLED:
            guard.append(or_(owns_worker, task.c.submitted_by == bindparam("b_user_id")))
        else:
            guard.append(owns_worker)
    values = {column: bindparam(f"v_{column}") for column in columns} | next_version()
    # Whether a worker still serves the job: a served job is no orphan, so a terminal
    # transition needs no soft-delete statement after this one.
    # The task's column spelled out with its table: SQLite's RETURNING leaves column names
    # unqualified, and a bare ``job_id`` would be the link's own (always true).
    task_job = literal_column(f"{task.name}.{task.c.job_id.name}")
    served = exists().where(link_table.c.job_id == task_job).label("job_served")
    # The result is not read back: the guard admits only tasks not yet ended, which have
    # none, so the task's result is the one this update writes, if any (``update_task``).
    returned = [c for c in answered_task_columns() if c.name != "result"]
    unread = null().label("result")
    return hot(update(task).where(*guard).values(values).returning(*returned, unread, served))


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


async def _explain_refusal(
    conn: AsyncConnection,
    principal: Principal,
    task_id: UUID,
    target: TaskStatus | None,
    claim_token: UUID | None,
) -> None:
    """Raise the reason the guarded update matched nothing, in the order a client needs."""
    row = (
        await conn.execute(
            select(task, worker_table.c.user_id.label("worker_owner"))
            .outerjoin(worker_table, worker_table.c.id == task.c.worker_id)
            .where(task.c.id == task_id)
        )
    ).first()
    if row is None:
        raise TaskNotFound(f"Task {task_id} not found.")
    if claim_token is not None:
        # The token is handed only to the claimant: a matching one proves who writes, even
        # after its worker was removed (its late write then gets 409, not 403).
        if claim_token != row.claim_token:
            raise StaleClaim(f"Claim token is no longer current for task {task_id}.")
        if row.worker_owner is not None:  # its worker is still there: is it the caller's?
            _authorise_update(principal, row, target)
    else:
        _authorise_update(principal, row, target)
    if target is not None:
        check_patch_transition(TaskStatus(row.status), target)
    elif row.status != TaskStatus.RUNNING.value:
        raise InvalidTaskTransition(f"Progress is reported only while running, not {row.status}.")


def _authorise_update(principal: Principal, row: Any, target: TaskStatus | None) -> None:
    """Superusers may update any task; a worker's owner the tasks that worker claimed; the
    submitter may cancel their own task."""
    if principal.is_superuser:
        return
    if target == TaskStatus.CANCELLED and row.submitted_by == principal.id:
        return
    if row.worker_id is not None and row.worker_owner == principal.id:
        return
    raise Forbidden("Only the claiming worker's owner, the submitter (to cancel) or a superuser.")


async def get_task(db: Database, task_id: UUID, *, stored_documents: bool = False) -> TaskRecord:
    """``stored_documents``: see ``load_task`` (for an answer)."""
    async with db.read() as conn:
        record = await load_task(conn, task_id, stored_documents=stored_documents)
    if record is None:
        raise TaskNotFound(f"Task {task_id} not found.")
    return record
