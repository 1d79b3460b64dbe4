"""Submitting a task."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol
from uuid import UUID

import orjson

from taskhub.clock import new_id, utcnow
from taskhub.json_codec import exact_json
from taskhub.observability import metrics
from taskhub.rules.errors import (
    IdempotencyKeyReused,
    InternalJobNotConfigured,
    JobNotFound,
    NoWorkersAvailable,
    ValidationFailed,
)
from taskhub.rules.events import EventBatch, TaskAvailable, TaskStatusChanged
from taskhub.rules.fair_share import ClaimOrder, next_turn, share_key
from taskhub.rules.naming import INTERNAL_ROOM, validate_room_id
from taskhub.rules.naming import full_name as name_of
from taskhub.rules.records import Principal, TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.rules.user_limits import over_quota
from taskhub.services import user_limits
from taskhub.services.jobs import KnownJobs, find_visible_job, visible_job_name
from taskhub.services.live_workers import require_live_worker
from taskhub.store import tasks as store
from taskhub.store.connections import Connection
from taskhub.store.database import Database
from taskhub.store.turns import turn_inputs
from taskhub.store.user_usage import usage_of
from taskhub.validation.payload_checks import check_payload


@dataclass(frozen=True, slots=True)
class SubmitOptions:
    """Taskhub's optional submit fields: ``max_attempts`` None takes the job's."""

    priority: int = 0
    run_at: datetime | None = None
    max_attempts: int | None = None
    # As sent, when ``run_at`` was computed from it (part of the request's digest).
    delay_seconds: float | None = None


class InternalExecutors(Protocol):
    """What submit needs to know about ``@internal`` execution."""

    def has_executor(self, full_name: str) -> bool: ...

    # Whether the job's tasks count as costly validations (``InternalJob.costly``).
    def is_costly(self, full_name: str) -> bool: ...


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
    rerun_of: UUID | None = None,
    limits: user_limits.LimitSettings | None = None,
) -> tuple[TaskRecord, EventBatch, bool]:
    """Queue a task of a job visible from ``room_id``; returns ``(task, events, created)``.
    ``task_available`` goes out only if the task is claimable at once (a delayed one is
    announced when it comes due). An ``@internal`` task is inserted as its first attempt:
    the caller dispatches it to the broker after this commit. With ``idempotency_key``, a
    task this user already submitted to this job with that key is returned instead
    (``created`` False, no events) — also when the duplicates race: the unique index
    decides, and the loser reads the winner — whatever the job's schema is now; repeated
    with another request, ``IdempotencyKeyReused``. With ``known_jobs``, the job as last read
    stands in for a lookup (the insert checks it is still current). ``rerun_of``: the task
    this one re-runs (``services.rerun``), recorded with it.

    With ``limits`` (the hub's settings; None: none, for callers outside a hub), held to
    the submitter's per-user limits (``services.user_limits``): the submit rate first (429
    ``submit-rate-exceeded``), then, in the insert, the bounds on unfinished tasks and
    stored bytes (429 ``too-many-pending-tasks``, ``storage-quota-exceeded``) and, for a
    costly job's task, on costly validations (503 ``validation-busy``); a refused submit
    stores nothing. A replay of a key is answered whatever the bounds."""
    validate_room_id(room_id)
    visible_job_name(room_id, full_name)
    exempt = limits is None or user_limits.is_exempt(limits, principal)
    if limits is not None:
        user_limits.check_submit_rate(limits, principal, exempt=exempt)
    options = options or SubmitOptions()
    digest = None if idempotency_key is None else request_digest(payload, options)
    job = known_jobs.get(full_name) if known_jobs is not None else None
    read_again = False  # a fresh job's insert failed within the bounds once already
    while True:
        fresh = job is None
        # A job read afresh comes with the original task of a repeated key, answered before
        # the payload is judged (by the job's schema of today it might no longer pass). A
        # remembered job costs no read: a repeat is found by the insert's conflict, or, if
        # the payload fails, by the fresh read that failure leads to.
        if job is None:
            async with db.autocommit() as conn:
                job, replay = await _visible_job(
                    conn, principal, room_id, full_name, idempotency_key
                )
            if replay is not None:
                return _replayed(replay, digest), EventBatch(), False
            if known_jobs is not None:
                known_jobs.remember(full_name, job)
        try:
            _check_executor(job, internal)
            await require_live_worker(db, job, limits)  # TASKHUB_SUBMIT_REQUIRES_LIVE_WORKER
            # No connection is held meanwhile: a costly payload takes up to seconds.
            await check_payload((job.id, job.updated_at), job.schema, payload, principal.id)
        except (ValidationFailed, InternalJobNotConfigured, NoWorkersAvailable):
            if fresh:
                raise
            job = None  # judged by a job as read earlier: read it again to be sure
            continue
        now = utcnow()
        record = _new_task(job, room_id, principal, payload, options, now)
        record.rerun_of = rerun_of
        replay = None
        share = share_key(ClaimOrder(job.claim_order), principal.id, room_id)
        costly = job.room_id == INTERNAL_ROOM and internal.is_costly(_full_name(job))
        quota = (
            None if limits is None else user_limits.quota_of(limits, exempt=exempt, costly=costly)
        )
        async with db.autocommit() as conn:
            if share is not None:  # a fair job: the task's turn among the shares
                head, last = await turn_inputs(conn, job.id, record.priority, share)
                record.turn_at = next_turn(record.created_at, head, last)
                record.share_backlogged = last is not None
            inserted = await store.insert_task(
                conn,
                record,
                job_version=job.updated_at,
                idempotency_key=idempotency_key,
                request_digest=digest,
                max_attempts=options.max_attempts,
                now=now,
                share_key=share,
                quota=quota,
            )
            if not inserted and idempotency_key is not None:  # a duplicate that raced?
                replay = await store.submitted_before(conn, principal.id, job.id, idempotency_key)
            if not inserted and replay is None and quota is not None:
                refusal = over_quota(await usage_of(conn, principal.id), quota)
                if refusal is not None:
                    metrics.user_limit_refused(refusal.slug)
                    raise refusal
        if inserted:
            break
        if replay is not None:
            return _replayed(replay, digest), EventBatch(), False
        # The job changed or went since it was read (or, with a quota, a task of the user's
        # ended between the insert and the read of the figures: read the job again).
        if known_jobs is not None:
            known_jobs.forget(full_name)
        if fresh and (quota is None or read_again):
            raise JobNotFound(f"Job {full_name!r} not found.")
        read_again = fresh
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
    conn: Connection,
    principal: Principal,
    room_id: str,
    full_name: str,
    idempotency_key: str | None,
) -> tuple[Any, store.Submitted | None]:
    """``(job, task)``: the live job, and with ``idempotency_key`` the task this user
    submitted to it with that key, if any; or ``(None, task)`` for a job gone since (a
    replay answers what the first request got, whether or not the job is still live)."""
    try:
        job = await find_visible_job(conn, room_id, full_name)
    except JobNotFound:
        if idempotency_key is not None:
            parsed = visible_job_name(room_id, full_name)
            original = await store.submitted_to_name_before(
                conn,
                principal.id,
                parsed.room_id,
                parsed.category,
                parsed.name,
                idempotency_key,
            )
            if original is not None:
                return None, original
        raise
    if idempotency_key is None:
        return job, None
    return job, await store.submitted_before(conn, principal.id, job.id, idempotency_key)


def request_digest(payload: dict[str, Any], options: SubmitOptions) -> str:
    """A digest of a submit as sent (payload, whatever its key order, and options): a
    repeat of its ``Idempotency-Key`` must match it."""
    schedule = (
        {"delay_seconds": options.delay_seconds}
        if options.delay_seconds is not None
        else {"run_at": None if options.run_at is None else options.run_at.astimezone(UTC)}
    )
    request = {
        "payload": payload,
        "priority": options.priority,
        "max_attempts": options.max_attempts,
        **schedule,
    }
    text = exact_json(request, orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return hashlib.blake2b(text, digest_size=16).hexdigest()


def _replayed(original: store.Submitted, digest: str | None) -> TaskRecord:
    """The original task of a repeated key, if the request is the one that created it
    (a task submitted before digests were kept matches any)."""
    if original.request_digest is not None and original.request_digest != digest:
        raise IdempotencyKeyReused(
            "This Idempotency-Key was used with another request (payload or options); "
            "use a fresh key for a new task."
        )
    return original.task
