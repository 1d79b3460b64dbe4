"""Queue positions: a pending task's place in its job's queue (task rows: ``task_rows``).

The queue order of a job, at a moment ``now``: first the ready tasks (``run_at`` NULL or
past), higher priority first and by turn (``turn_at``, ``id``: FIFO in a FIFO job, see
``rules/fair_share.py``) within a priority — the
order claims take; then the delayed ones by ``run_at``. A pending task's ``queue_position``
is its 1-based place in that order.

It is computed without walking the queue: the database keeps how many tasks are pending,
and how many of those wait for their ``run_at``, per (job, priority, second of turn)
(``app/store/queue_counts.py``), so the queued tasks up to a task are a sum over a few
bucket rows and a count, row by row, inside the task's own second; plus the waiting tasks
among them that are due but not yet queued by the announcer (few, indexed per job by due
time). A delayed task's place is every pending task less the waiting ones due after it.
The count inside the second runs from whichever end of it is nearer the task: the tasks
before it (with the rows of the earlier seconds), or those after it (taken from the rows up
to its own second). A task just submitted is the last of its second, so its count is next to
nothing however many tasks a second brings.

A page of tasks reads the positions of all its pending tasks in one statement
(``page_positions``), built from the parts here.
"""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace
from typing import Any

from sqlalchemy import (
    and_,
    bindparam,
    func,
    or_,
    select,
    tuple_,
)

from taskhub.clock import utcnow
from taskhub.rules.records import TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.store.connections import Connection
from taskhub.store.hot_statements import hot
from taskhub.store.queue_counts import bucket_of, bucket_start
from taskhub.store.tables import (
    is_queued,
    is_waiting,
    queue_bucket_table,
    task_table,
)

task = task_table
bucket = queue_bucket_table


def _param(name: str, column: Any) -> Any:
    return bindparam(name, type_=column.type)


JOB_ID = _param("job_id", task.c.job_id)
PRIORITY = _param("priority", task.c.priority)
TURN_AT = _param("turn_at", task.c.turn_at)
TASK_ID = _param("task_id", task.c.id)
RUN_AT = _param("run_at", task.c.run_at)
NOW = _param("now", task.c.run_at)
BUCKET = _param("bucket", bucket.c.bucket)
BUCKET_START = _param("bucket_start", task.c.turn_at)
BUCKET_END = _param("bucket_end", task.c.turn_at)


# A subject's values: the statements of one task read them from bound parameters, the
# statement of a page from a row per task (``page_params``), under the same names.
_BOUND = SimpleNamespace(
    job_id=JOB_ID,
    priority=PRIORITY,
    turn_at=TURN_AT,
    task_id=TASK_ID,
    run_at=RUN_AT,
    bucket=BUCKET,
    bucket_start=BUCKET_START,
    bucket_end=BUCKET_END,
)


QUEUED_IN_BUCKET = bucket.c.pending - bucket.c.waiting


def _counted(*where: Any, subject: Any = _BOUND, weight: Any = bucket.c.pending) -> Any:
    """Pending tasks (or ``weight``) of the bucket rows matching ``where`` (0 when none)."""
    total = select(func.sum(weight)).where(bucket.c.job_id == subject.job_id, *where)
    return func.coalesce(total.scalar_subquery(), 0)


def _count(*where: Any, subject: Any = _BOUND) -> Any:
    """Tasks of the job matching ``where`` (which says which pending ones: queued or
    waiting), counted row by row on an index."""
    rows = select(func.count()).select_from(task)
    return rows.where(task.c.job_id == subject.job_id, *where).scalar_subquery()


def _up_to_subject(subject: Any = _BOUND) -> Any:
    """At the subject's place or before it in its own priority (by turn)."""
    return tuple_(task.c.turn_at, task.c.id) <= tuple_(subject.turn_at, subject.task_id)


def _after_subject(subject: Any = _BOUND) -> Any:
    """After the subject's place in its own priority (by turn)."""
    return tuple_(task.c.turn_at, task.c.id) > tuple_(subject.turn_at, subject.task_id)


def second_up_to_subject(subject: Any = _BOUND) -> Any:
    """The queued tasks of the subject's priority and second up to it (from the start)."""
    own_second = [task.c.priority == subject.priority, task.c.turn_at >= subject.bucket_start]
    return _count(is_queued(), *own_second, _up_to_subject(subject), subject=subject)


def second_after_subject(subject: Any = _BOUND) -> Any:
    """The queued tasks of the subject's priority and second after it (from the end)."""
    own_second = [task.c.priority == subject.priority, task.c.turn_at < subject.bucket_end]
    return _count(is_queued(), *own_second, _after_subject(subject), subject=subject)


def not_yet_due() -> list[Any]:
    """Delayed: waiting, and not claimable before ``now`` (on ``ix_task_delayed``)."""
    return [is_waiting(), task.c.run_at > NOW]


def due_waiting() -> list[Any]:
    """Waiting but due at ``now``: claimable, not yet queued by the announcer (few, on
    ``ix_task_delayed``)."""
    return [is_waiting(), task.c.run_at <= NOW]


def _ahead_of_ready(subject: Any = _BOUND) -> Any:
    """Claimed before a ready subject, or the subject itself: higher priority, or its own
    priority up to it (by turn)."""
    priority = subject.priority
    return or_(
        task.c.priority > priority, and_(task.c.priority == priority, _up_to_subject(subject))
    )


def ready_position(*, from_end: bool, subject: Any = _BOUND) -> Any:
    """A ready subject: the queued tasks of higher priority and those of its own priority
    submitted up to it, plus the due waiting ones among them. Its own priority: the bucket
    rows before its second plus its second's queued tasks up to it, or (``from_end``) the
    bucket rows up to its second less its second's queued tasks after it. (A subject that
    is itself due but still waiting counts among the due waiting ones.)"""
    priority = subject.priority
    queued = {"subject": subject, "weight": QUEUED_IN_BUCKET}
    higher = _counted(bucket.c.priority > priority, **queued)
    own = bucket.c.priority == priority
    if from_end:
        same_priority = _counted(
            own, bucket.c.bucket <= subject.bucket, **queued
        ) - second_after_subject(subject)
    else:
        same_priority = _counted(
            own, bucket.c.bucket < subject.bucket, **queued
        ) + second_up_to_subject(subject)
    due_ahead = _count(*due_waiting(), _ahead_of_ready(subject), subject=subject)
    return higher + same_priority + due_ahead


def delayed_position(subject: Any = _BOUND) -> Any:
    """A delayed subject: every pending task but the delayed ones due after it (by due
    time, then priority, then turn). Counted from the subject's due time on (the range the
    index reads: a delayed task due after all others counts next to nothing)."""
    due_after = or_(
        task.c.run_at > subject.run_at,
        and_(
            task.c.run_at == subject.run_at,
            or_(
                task.c.priority < subject.priority,
                and_(task.c.priority == subject.priority, _after_subject(subject)),
            ),
        ),
    )
    # Due at or after the subject: still waiting at ``now``, since the subject is (so that
    # the only lower bound of the range on ``run_at`` is the subject's own).
    from_its_time = [is_waiting(), task.c.run_at >= subject.run_at]
    return _counted(subject=subject) - _count(*from_its_time, due_after, subject=subject)


_READY_POSITION_FROM_START = hot(select(ready_position(from_end=False)))
_READY_POSITION_FROM_END = hot(select(ready_position(from_end=True)))
_DELAYED_POSITION = hot(select(delayed_position()))


def is_ready(run_at: datetime | None, now: datetime) -> bool:
    return run_at is None or run_at <= now


def due_at(run_at: datetime | None, now: datetime) -> dict[str, Any]:
    """The values of a task entering pending at ``now``, due at ``run_at``: it waits (out
    of the claim queue) while that is ahead. (A task that comes back takes a new turn too:
    ``turns.requeued_turn``.)"""
    return {"run_at": run_at, "waiting": not is_ready(run_at, now)}


def counts_from_end(turn: datetime) -> bool:
    """Whether the end of its second is the nearer end to ``turn``."""
    return turn.microsecond >= 500_000


# The same places, read on the snapshot of the statement that inserts the task (which does
# not hold the task itself yet): one more than the tasks ahead there.
_READY_POSITION_BEFORE_INSERT = {
    from_end: ready_position(from_end=from_end) + 1 for from_end in (False, True)
}
_DELAYED_POSITION_BEFORE_INSERT = delayed_position() + 1


def position_query(
    record: TaskRecord, now: datetime, *, newest: bool = False
) -> tuple[Any, dict[str, Any]]:
    """The statement that reads a pending ``record``'s place at ``now``, and its parameters.
    ``newest``: the task was just submitted (the last of its second so far)."""
    if not is_ready(record.run_at, now):
        return _DELAYED_POSITION, position_params(record, now)
    from_end = _counted_from_end(record, newest)
    statement = _READY_POSITION_FROM_END if from_end else _READY_POSITION_FROM_START
    return statement, position_params(record, now)


def position_before_insert(record: TaskRecord, now: datetime) -> Any:
    """The expression of a new pending ``record``'s place at ``now``, for the statement that
    inserts it (parameters: ``position_params``)."""
    if is_ready(record.run_at, now):
        return _READY_POSITION_BEFORE_INSERT[_counted_from_end(record, newest=True)]
    return _DELAYED_POSITION_BEFORE_INSERT


def _counted_from_end(record: TaskRecord, newest: bool) -> bool:
    """Whether ``record``'s count inside its second runs from the end. A task just
    submitted (``newest``) to a FIFO job is the last of its second; a fair job's may have
    taken a turn anywhere in the queue."""
    if newest and record.turn == record.created_at:
        return True
    return counts_from_end(record.turn)


def position_params(record: TaskRecord, now: datetime) -> dict[str, Any]:
    second = bucket_of(record.turn)
    return {
        "job_id": record.job_id,
        "priority": record.priority,
        "turn_at": record.turn,
        "task_id": record.id,
        "run_at": record.run_at,
        "now": now,
        "bucket": second,
        "bucket_start": bucket_start(second),
        "bucket_end": bucket_start(second + 1),
    }


async def queue_position(
    conn: Connection, record: TaskRecord, now: datetime | None = None, *, newest: bool = False
) -> int | None:
    """``record``'s place in its job's queue at ``now`` (None unless pending); ``newest``:
    it was just submitted."""
    if record.status != TaskStatus.PENDING:
        return None
    statement, params = position_query(record, now or utcnow(), newest=newest)
    return place_of(await conn.scalar(statement, params))


def place_of(counted: int) -> int:
    """The place of a task read as pending, from the tasks counted up to it. The count is
    read after the record: a task claimed in between no longer counts itself, and is
    given as the head it was (1), never 0."""
    return max(counted, 1)
