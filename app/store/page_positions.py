"""A page of tasks with the queue positions of its pending ones, read by one statement.

Per task, the statements of ``queue_positions`` walk the job's bucket rows, and for a delayed
task the waiting tasks due after it, once each: a page of P pending tasks would walk them
P times, and anyone may submit delayed tasks to a shared job. A page's statement takes
its pending tasks (the subjects) as rows, from one JSON parameter (so that it is the same
statement for every page of a shape: compiled once, and hot). Up to ``FEW`` subjects, it
counts each one's place as its own statement would; beyond, it ranks them all among the
counted rows in one pass per job: running sums over the union of those rows and the
subjects, in queue order (a window function, on a sort of those rows). A position is then
the sum of its parts, as in ``queue_positions``; the counts inside the subjects' own seconds
stay row by row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any, NamedTuple

import orjson
from sqlalchemy import (
    Boolean,
    Integer,
    String,
    and_,
    bindparam,
    case,
    cast,
    column,
    func,
    literal_column,
    null,
    select,
    text,
    union_all,
)
from sqlalchemy.engine import Dialect

from taskhub.clock import utcnow
from taskhub.rules.records import TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.store.connections import Connection
from taskhub.store.hot_statements import hot
from taskhub.store.queue_positions import (
    QUEUED_IN_BUCKET,
    counts_from_end,
    delayed_position,
    due_waiting,
    is_ready,
    not_yet_due,
    place_of,
    position_params,
    ready_position,
    second_after_subject,
    second_up_to_subject,
)
from taskhub.store.tables import queue_bucket_table, task_table
from taskhub.store.task_rows import joined_record

task = task_table
bucket = queue_bucket_table

# A walk of the delayed tasks per subject costs less than one sort of them up to about this
# many subjects: SQLite sorts in about the time of 16 walks, PostgreSQL of 8.
FEW = 8

_SUBJECT_COLUMNS = {
    "job_id": task.c.job_id.type,
    "task_id": task.c.id.type,
    "priority": task.c.priority.type,
    "turn_at": task.c.turn_at.type,
    "run_at": task.c.run_at.type,
    "bucket": bucket.c.bucket.type,
    "bucket_start": task.c.turn_at.type,
    "bucket_end": task.c.turn_at.type,
    "ready": Boolean(),
    "from_end": Boolean(),
}
# The subjects as rows, from the JSON array: PostgreSQL types the values as it reads them;
# SQLite compares them as they are stored (text, integers), which is how they are sent.
_SUBJECTS_FROM_JSON = {
    "postgresql": "SELECT * FROM json_to_recordset(CAST(:subjects AS json)) AS subject("
    "job_id uuid, task_id uuid, priority integer, turn_at timestamptz, run_at timestamptz,"
    " bucket bigint, bucket_start timestamptz, bucket_end timestamptz, ready boolean,"
    " from_end boolean)",
    "sqlite": "SELECT "
    + ", ".join(f"json_extract(value, '$.{name}') AS {name}" for name in _SUBJECT_COLUMNS)
    + " FROM json_each(:subjects)",
}
_ZERO = literal_column("0", Integer)
_ONE = literal_column("1", Integer)
_NO_TASK = cast(null(), task.c.id.type)


class PageShape(NamedTuple):
    """What the statement of a page's positions is made for: more than ``FEW`` subjects
    (``ranked``), ready ones, delayed ones, subjects of several jobs."""

    ranked: bool
    ready: bool
    delayed: bool
    several_jobs: bool


def page_shape(records: Sequence[TaskRecord], now: datetime) -> PageShape:
    ready = [is_ready(record.run_at, now) for record in records]
    jobs = {record.job_id for record in records}
    return PageShape(len(records) > FEW, any(ready), not all(ready), len(jobs) > 1)


def page_params(records: Sequence[TaskRecord], now: datetime, dialect: Dialect) -> dict[str, Any]:
    """The parameters of ``page_positions``: ``now``, and as ``subjects`` each pending
    record's values (as ``dialect`` binds them), whether it is ready at ``now``, and the
    end of its second it is counted from (as ``position_query`` chooses)."""
    bind = {name: _bind_processor(type_, dialect) for name, type_ in _SUBJECT_COLUMNS.items()}
    subjects = []
    for record in records:
        values = position_params(record, now)  # the values of its own statement, less now
        del values["now"]
        values["ready"] = is_ready(record.run_at, now)
        values["from_end"] = counts_from_end(record.turn)
        subjects.append({name: bind[name](value) for name, value in values.items()})
    return {"subjects": orjson.dumps(subjects, default=str).decode(), "now": now}


def _bind_processor(type_: Any, dialect: Dialect) -> Callable[[Any], Any]:
    processor = type_.dialect_impl(dialect).bind_processor(dialect)
    if processor is None:
        return lambda value: value
    return lambda value: None if value is None else processor(value)


@cache
def page_positions(dialect_name: str, shape: PageShape) -> Any:
    """The statement of (task_id, queue position) of every pending task of a page of
    ``shape`` (parameters: ``page_params``): the places ``position_query`` reads one by
    one."""
    subjects = text(_SUBJECTS_FROM_JSON[dialect_name]).bindparams(
        bindparam("subjects", type_=String)
    )
    rows = subjects.columns(*(column(n, t) for n, t in _SUBJECT_COLUMNS.items()))
    if shape.ranked:
        return hot(_ranked(_Page(rows.cte("subject"), shape)))
    return hot(_counted_one_by_one(select(rows.subquery()).limit(FEW).cte("subject"), shape))


def _counted_one_by_one(subject: Any, shape: PageShape) -> Any:
    """Each subject's place, counted as ``position_query``'s statement for it counts it. One
    query per kind of subject, and at most ``FEW`` subjects: PostgreSQL prices every query
    in an expression (every kind's, for the 100 rows it expects of a JSON array), and
    compiles a statement it expects to be that expensive first (JIT)."""
    s = subject.c
    kinds = []
    if shape.ready:
        kinds.append((and_(s.ready, s.from_end), ready_position(from_end=True, subject=s)))
        kinds.append((and_(s.ready, ~s.from_end), ready_position(from_end=False, subject=s)))
    if shape.delayed:
        kinds.append((~s.ready, delayed_position(s)))
    return union_all(
        *(select(s.task_id, position.label("position")).where(kind) for kind, position in kinds)
    )


@dataclass(frozen=True)
class _Page:
    """The pending tasks of a page as rows (``subject``), and the page's shape."""

    subject: Any
    shape: PageShape

    def of_jobs(self, job_id: Any) -> Any:
        return job_id.in_(select(self.subject.c.job_id))

    def per_job(self, rows: Any) -> dict[str, Any]:
        """A running sum goes per job only when there are several (sorting by a job's id
        costs SQLite about as much as the rest of the sort)."""
        return {"partition_by": rows.c.job_id} if self.shape.several_jobs else {}


def _ranked(page: _Page) -> Any:
    """The positions as sums of their parts, which come as rows to add up. (Joined, they
    would leave a planner unable to tell how few rows of the ranked unions are subjects:
    PostgreSQL would price the counts inside a second for every row it expects, and then
    compile the statement before running it, JIT.)"""
    parts = []
    if page.shape.ready:
        parts += _ready_parts(page, _waiting_tasks(page, due_waiting(), "due_waiting"))
    if page.shape.delayed:
        parts += _delayed_parts(page, _waiting_tasks(page, not_yet_due(), "delayed"))
    summed = union_all(*parts).subquery()
    position = cast(func.sum(summed.c.part), Integer)
    return select(summed.c.task_id, position).group_by(summed.c.task_id)


def _sums_up_to(page: _Page, counted: Any, subjects: Any, order: Callable[[Any], list[Any]]) -> Any:
    """Per subject: ``up_to``, the sum of the ``weight`` of its job's counted rows up to it
    in ``order`` (at a tie, a subject of ``place`` 1 comes after the counted row, of -1
    before it). ``counted`` (``place`` 0) and ``subjects`` (``weight`` 0) select job_id,
    task_id, the columns of ``order``, weight and place."""
    rows = union_all(counted, subjects).subquery()
    in_order = [*order(rows.c), rows.c.place]
    up_to = func.sum(rows.c.weight).over(**page.per_job(rows), order_by=in_order, rows=(None, 0))
    summed = select(rows.c.task_id, rows.c.place, up_to.label("up_to")).subquery()
    return select(summed.c.task_id, summed.c.up_to).where(summed.c.place != _ZERO).subquery()


def _bucket_order(c: Any) -> list[Any]:
    return [c.priority.desc(), c.bucket]


def _claim_order(c: Any) -> list[Any]:
    return [c.priority.desc(), c.turn_at, c.task_id]


def _due_order_reversed(c: Any) -> list[Any]:
    """Delayed tasks, the last due first (by due time, then as claims would take them)."""
    return [c.run_at.desc(), c.priority, c.turn_at.desc(), c.task_id.desc()]


def _waiting_tasks(page: _Page, which: list[Any], name: str) -> Any:
    """The waiting tasks of the page's jobs matching ``which`` (on ``ix_task_delayed``)."""
    rows = select(
        task.c.job_id, task.c.id.label("task_id"), task.c.priority, task.c.turn_at, task.c.run_at
    )
    return rows.where(page.of_jobs(task.c.job_id), *which).cte(name)


def _ready_parts(page: _Page, due_waiting: Any) -> list[Any]:
    """A ready subject's position, in (task_id, part) rows to add up: its bucket rows' queued
    tasks, plus or less the queued tasks of its second up to it or after it, plus the due
    waiting tasks up to it."""
    subject = page.subject
    in_buckets = _in_buckets_up_to(page)
    in_second = case(
        (subject.c.from_end, -second_after_subject(subject.c)),
        else_=second_up_to_subject(subject.c),
    )
    due_ahead = _due_waiting_up_to(page, due_waiting)
    return [
        select(in_buckets.c.task_id, in_buckets.c.up_to.label("part")),
        select(subject.c.task_id, in_second.label("part")).where(subject.c.ready),
        select(due_ahead.c.task_id, due_ahead.c.up_to.label("part")),
    ]


def _in_buckets_up_to(page: _Page) -> Any:
    """``up_to`` a ready subject: the queued tasks of the bucket rows of higher priority,
    and of its own priority up to its second (``from_end``) or before it."""
    subject = page.subject
    counted = select(
        bucket.c.job_id,
        _NO_TASK.label("task_id"),
        bucket.c.priority,
        bucket.c.bucket,
        QUEUED_IN_BUCKET.label("weight"),
        _ZERO.label("place"),
    ).where(page.of_jobs(bucket.c.job_id))
    place = case((subject.c.from_end, _ONE), else_=-_ONE)
    subjects = select(
        subject.c.job_id, subject.c.task_id, subject.c.priority, subject.c.bucket, _ZERO, place
    ).where(subject.c.ready)
    return _sums_up_to(page, counted, subjects, _bucket_order)


def _due_waiting_up_to(page: _Page, due_waiting: Any) -> Any:
    """``up_to`` a ready subject: the due waiting tasks of higher priority, and of its own
    up to it (by turn; itself included, should it be one)."""
    subject = page.subject
    key = ("job_id", "task_id", "priority", "turn_at")
    counted = select(
        *(due_waiting.c[name] for name in key), _ONE.label("weight"), _ZERO.label("place")
    )
    subjects = select(*(subject.c[name] for name in key), _ZERO, _ONE).where(subject.c.ready)
    return _sums_up_to(page, counted, subjects, _claim_order)


def _delayed_parts(page: _Page, delayed: Any) -> list[Any]:
    """A delayed subject's position, in (task_id, part) rows to add up: its job's pending
    tasks, less the delayed ones due after it."""
    subject = page.subject
    job_pending = (
        select(bucket.c.job_id, func.sum(bucket.c.pending).label("pending"))
        .where(page.of_jobs(bucket.c.job_id))
        .group_by(bucket.c.job_id)
        .subquery()
    )
    due_after = _delayed_due_after(page, delayed)
    return [
        select(subject.c.task_id, job_pending.c.pending.label("part"))
        .join(job_pending, job_pending.c.job_id == subject.c.job_id)
        .where(~subject.c.ready),
        select(due_after.c.task_id, (-due_after.c.up_to).label("part")),
    ]


def _delayed_due_after(page: _Page, delayed: Any) -> Any:
    """``up_to`` a delayed subject: the delayed tasks due after it."""
    subject = page.subject
    key = ("job_id", "task_id", "run_at", "priority", "turn_at")
    counted = select(*(delayed.c[name] for name in key), _ONE.label("weight"), _ZERO.label("place"))
    subjects = select(*(subject.c[name] for name in key), _ZERO, -_ONE).where(~subject.c.ready)
    return _sums_up_to(page, counted, subjects, _due_order_reversed)


async def with_positions(
    conn: Connection, rows: Any, now: datetime | None = None
) -> list[TaskRecord]:
    """The records of joined rows (a page), with the queue positions of the pending ones:
    all read by one statement, at one ``now`` (none when no task is pending)."""
    records = [joined_record(row) for row in rows]
    pending = [record for record in records if record.status == TaskStatus.PENDING]
    if pending:
        now = now or utcnow()
        statement = page_positions(conn.dialect.name, page_shape(pending, now))
        params = page_params(pending, now, conn.dialect)
        found = (await conn.execute(statement, params)).all()
        places = {task_id: position for task_id, position in found}
        for record in pending:
            record.queue_position = place_of(places[record.id])
    return records
