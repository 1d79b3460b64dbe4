"""The statements of a room's aggregates over a time window (``GET /rooms/{id}/stats``).

Every statement reads only rows of the window: finished tasks on ``ix_task_room_completed``
(room, completed_at), submitted ones on ``ix_task_room_created`` (room, created_at), and
the claimed/running ones (few); never the room's whole history — except the all-time
counts per job and status, one grouped count over the room's tasks.

Buckets lie on a grid of ``bucket_seconds`` from ``start`` (an instant on whole seconds).
PostgreSQL: a task's bucket is ``(epoch seconds of its time - start) // bucket_seconds``,
and the percentiles of each bucket's waits and run times are ``percentile_cont`` over
exact microsecond durations (``duration_microseconds``). SQLite has no percentile
function: one pass over the window's finished tasks (a materialised CTE) ranks each
bucket's durations with window functions and returns only the values at the two ranks
each percentile interpolates between, which ``interpolated`` combines as
``percentile_cont`` does — exact, for durations taken from ``julianday`` differences (to
the millisecond); its buckets are read off the stored time's text (hour and minute),
which needs no date arithmetic per row. Work and memory stay bounded by the window's rows,
and the rows returned by a few per bucket.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Integer,
    bindparam,
    case,
    cast,
    extract,
    func,
    literal_column,
    select,
    text,
)

from taskhub.rules.states import TaskStatus
from taskhub.store.connections import Connection
from taskhub.store.sql_functions import duration_microseconds
from taskhub.store.tables import is_active, job_table, task_table

task = task_table
ENDED = (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED)
PERCENTILES = (0.5, 0.95)


def epoch_seconds(dialect: str, moment: Any) -> Any:
    """Whole seconds since 1970 of a ``UTCDateTime`` column (its fraction dropped), exactly."""
    if dialect == "postgresql":
        return cast(func.floor(extract("epoch", moment)), BigInteger)
    days = func.julianday(func.substr(moment, 1, 19)) - literal_column("2440587.5")
    return cast(func.round(days * literal_column("86400")), BigInteger)


def bucket_of(dialect: str, moment: Any, start: int, bucket_seconds: int) -> Any:
    """The bucket index of ``moment`` (at or after ``start``, epoch seconds). Both numbers
    are the caller's integers, written into the SQL (no parameter types to infer)."""
    offset = epoch_seconds(dialect, moment) - literal_column(str(int(start)), Integer)
    return (offset // literal_column(str(int(bucket_seconds)), Integer)).label("bucket")


@dataclass
class FinishedBucket:
    """The tasks of the room that finished in one bucket."""

    completed: int = 0
    failed: int = 0
    cancelled: int = 0
    # Seconds, by percentile (None: no such duration in the bucket).
    wait: dict[float, float | None] = field(default_factory=dict)
    run: dict[float, float | None] = field(default_factory=dict)


def interpolated(ranked: dict[int, int], count: int, p: float) -> float:
    """``percentile_cont(p)`` of ``count`` sorted values of which ``ranked`` holds (0-based
    rank -> value) at least the ones at ranks ``int(p * (count - 1))`` and the next."""
    position = p * (count - 1)
    lower = int(position)
    low = ranked[lower]
    if lower + 1 not in ranked:
        return float(low)
    return low + (position - lower) * (ranked[lower + 1] - low)


def _status_count(status: TaskStatus) -> Any:
    return func.count().filter(task.c.status == status.value).label(status.value)


def _finished_in(room_id: str, start_at: datetime) -> list[Any]:
    return [
        task.c.room_id == room_id,
        task.c.completed_at.is_not(None),
        task.c.completed_at >= start_at,
    ]


async def finished(
    conn: Connection, room_id: str, start: datetime, bucket_seconds: int
) -> dict[int, FinishedBucket]:
    """PostgreSQL: per bucket (index), the room's tasks that finished in it from ``start``
    on: counts by status and the percentiles of their waits (submit to start) and run
    times (``percentile_cont``)."""
    dialect = conn.dialect.name
    epoch = int(start.timestamp())
    bucket = bucket_of(dialect, task.c.completed_at, epoch, bucket_seconds)
    wait_us = duration_microseconds(dialect, task.c.created_at, task.c.started_at)
    run_us = duration_microseconds(dialect, task.c.started_at, task.c.completed_at)
    columns = [bucket, *(_status_count(status) for status in ENDED)]
    for kind, duration in (("wait", wait_us), ("run", run_us)):
        for p in PERCENTILES:
            label = f"{kind}_{int(p * 100)}"
            columns.append(func.percentile_cont(p).within_group(duration).label(label))
    statement = (
        select(*columns).where(*_finished_in(room_id, start)).group_by(literal_column("bucket"))
    )
    found: dict[int, FinishedBucket] = {}
    for row in (await conn.execute(statement)).all():
        entry = FinishedBucket(row.completed, row.failed, row.cancelled)
        for kind in ("wait", "run"):
            for p in PERCENTILES:
                us = getattr(row, f"{kind}_{int(p * 100)}")
                getattr(entry, kind)[p] = None if us is None else us / 1e6
        found[int(row.bucket)] = entry
    return found


async def arrivals(
    conn: Connection, room_id: str, start: datetime, bucket_seconds: int
) -> dict[int, int]:
    """Per bucket, how many tasks were submitted into the room in it (from ``start`` on)."""
    bucket = bucket_of(conn.dialect.name, task.c.created_at, int(start.timestamp()), bucket_seconds)
    statement = (
        select(bucket, func.count().label("n"))
        .where(task.c.room_id == room_id, task.c.created_at >= start)
        .group_by(literal_column("bucket"))
    )
    return {int(row.bucket): row.n for row in (await conn.execute(statement)).all()}


async def departures(
    conn: Connection, room_id: str, start: datetime, bucket_seconds: int
) -> dict[int, int]:
    """Per bucket, how many of the room's tasks left pending in it (from ``start`` on): at
    ``started_at``, or at ``completed_at`` for one that ended without starting (cancelled
    while pending). Read from the tasks finished since ``start`` and the claimed/running
    ones started since."""
    dialect = conn.dialect.name
    epoch = int(start.timestamp())
    left_at = case((task.c.started_at.is_not(None), task.c.started_at), else_=task.c.completed_at)
    ended = (
        select(bucket_of(dialect, left_at, epoch, bucket_seconds), func.count().label("n"))
        .where(*_finished_in(room_id, start), left_at >= start)
        .group_by(literal_column("bucket"))
    )
    running = (
        select(
            bucket_of(dialect, task.c.started_at, epoch, bucket_seconds), func.count().label("n")
        )
        .where(is_active(), task.c.room_id == room_id, task.c.started_at >= start)
        .group_by(literal_column("bucket"))
    )
    counts: dict[int, int] = {}
    for statement in (ended, running):
        for row in (await conn.execute(statement)).all():
            counts[int(row.bucket)] = counts.get(int(row.bucket), 0) + row.n
    return counts


@dataclass
class WindowRows:
    """What the window's rows say, per bucket index (only buckets with something)."""

    finished: dict[int, FinishedBucket]
    arrivals: dict[int, int]
    departures: dict[int, int]


async def window_rows(
    conn: Connection, room_id: str, start: datetime, bucket_seconds: int
) -> WindowRows:
    """The finished tasks, submits and departures from pending of the room, per bucket of
    ``bucket_seconds`` from ``start`` on (an instant on the bucket grid)."""
    if conn.dialect.name == "postgresql":
        return WindowRows(
            await finished(conn, room_id, start, bucket_seconds),
            await arrivals(conn, room_id, start, bucket_seconds),
            await departures(conn, room_id, start, bucket_seconds),
        )
    ended, left = await _sqlite_finished(conn, room_id, start, bucket_seconds)
    for index, count in (await _sqlite_running(conn, room_id, start, bucket_seconds)).items():
        left[index] = left.get(index, 0) + count
    return WindowRows(ended, await _sqlite_arrivals(conn, room_id, start, bucket_seconds), left)


def _sqlite_key(column: str, bucket_seconds: int) -> str:
    """SQLite: a stored time's bucket as text, read off the stored text
    (``YYYY-MM-DD HH:MM:SS.ffffff``) with no date arithmetic: its hour, and the minute
    divided by the bucket's minutes (for buckets that divide an hour, in whole minutes)."""
    if bucket_seconds % 60 or 3600 % bucket_seconds:
        raise ValueError("SQLite buckets must be whole minutes that divide an hour")
    minutes = bucket_seconds // 60
    return f"substr({column}, 1, 14) || (CAST(substr({column}, 15, 2) AS INTEGER) / {minutes})"


def _sqlite_index(key: str, start: datetime, bucket_seconds: int) -> int:
    """The bucket index of a ``_sqlite_key``."""
    hour = datetime.strptime(key[:13], "%Y-%m-%d %H").replace(tzinfo=UTC)
    moment = hour + timedelta(seconds=int(key[14:]) * bucket_seconds)
    return int((moment - start).total_seconds()) // bucket_seconds


# One pass over the room's tasks finished in the window (``ix_task_room_completed``, then
# each row once), into a temporary table; from it the counts per bucket and status, the
# departures from pending, and, per bucket, the ranks each percentile interpolates between
# (window functions sort each bucket's durations: the values at ranks int(p * (n - 1)) and
# the next). Durations from ``julianday`` differences, rounded to the millisecond (a
# ``julianday`` holds no finer).
_SQLITE_FINISHED = """
WITH d AS MATERIALIZED (
    SELECT {ended} AS bucket, status,
           CASE WHEN started_at IS NOT NULL THEN {started} ELSE {ended} END AS left_bucket,
           coalesce(started_at, completed_at) >= :start AS left_in,
           CAST(round((julianday(started_at) - julianday(created_at)) * 86400000)
                AS INTEGER) * 1000 AS wait_us,
           CAST(round((julianday(completed_at) - julianday(started_at)) * 86400000)
                AS INTEGER) * 1000 AS run_us
    FROM task
    WHERE room_id = :room_id AND completed_at IS NOT NULL AND completed_at >= :start
),
ranked AS (
    SELECT 'wait' AS part, bucket, wait_us AS v,
           row_number() OVER (PARTITION BY bucket ORDER BY wait_us) - 1 AS k,
           count(*) OVER (PARTITION BY bucket) AS n
    FROM d WHERE wait_us IS NOT NULL
    UNION ALL
    SELECT 'run', bucket, run_us,
           row_number() OVER (PARTITION BY bucket ORDER BY run_us) - 1,
           count(*) OVER (PARTITION BY bucket)
    FROM d WHERE run_us IS NOT NULL
)
SELECT 'status' AS part, bucket, status AS label, count(*) AS n, NULL AS k, NULL AS v
FROM d GROUP BY bucket, status
UNION ALL
SELECT 'left', left_bucket, NULL, count(*), NULL, NULL FROM d WHERE left_in GROUP BY left_bucket
UNION ALL
SELECT part, bucket, NULL, n, k, v FROM ranked
WHERE {near_ranks}
"""


def _sqlite_statement(bucket_seconds: int) -> Any:
    near = " OR ".join(f"k - CAST({p!r} * (n - 1) AS INTEGER) IN (0, 1)" for p in PERCENTILES)
    sql = _SQLITE_FINISHED.format(
        ended=_sqlite_key("completed_at", bucket_seconds),
        started=_sqlite_key("started_at", bucket_seconds),
        near_ranks=near,
    )
    return text(sql).bindparams(
        bindparam("start", type_=task.c.completed_at.type),
        bindparam("room_id", type_=task.c.room_id.type),
    )


async def _sqlite_finished(
    conn: Connection, room_id: str, start: datetime, bucket_seconds: int
) -> tuple[dict[int, FinishedBucket], dict[int, int]]:
    """SQLite: ``finished``, and the departures of the tasks finished in the window."""
    rows = (
        await conn.execute(_sqlite_statement(bucket_seconds), {"start": start, "room_id": room_id})
    ).all()
    found: dict[int, FinishedBucket] = {}
    left: dict[int, int] = {}
    ranks: dict[tuple[str, int], tuple[int, dict[int, int]]] = {}
    for part, key, label, n, k, v in rows:
        index = _sqlite_index(key, start, bucket_seconds)
        if part == "status":
            entry = found.setdefault(index, FinishedBucket())
            setattr(entry, label, getattr(entry, label) + n)
        elif part == "left":
            left[index] = left.get(index, 0) + n
        else:
            ranks.setdefault((part, index), (n, {}))[1][k] = v
    for (part, index), (count, ranked) in ranks.items():
        entry = found.setdefault(index, FinishedBucket())
        for p in PERCENTILES:
            getattr(entry, part)[p] = interpolated(ranked, count, p) / 1e6
    return found, left


async def _sqlite_counts(
    conn: Connection, statement: Any, start: datetime, bucket_seconds: int
) -> dict[int, int]:
    """The ``(bucket, n)`` rows of ``statement`` as counts by bucket index."""
    counts: dict[int, int] = {}
    for row in (await conn.execute(statement)).all():
        index = _sqlite_index(row.bucket, start, bucket_seconds)
        counts[index] = counts.get(index, 0) + row.n
    return counts


async def _sqlite_arrivals(
    conn: Connection, room_id: str, start: datetime, bucket_seconds: int
) -> dict[int, int]:
    """SQLite: ``arrivals``, on ``ix_task_room_created`` alone (it covers the query)."""
    key: Any = literal_column(_sqlite_key("task.created_at", bucket_seconds)).label("bucket")
    statement = (
        select(key, func.count().label("n"))
        .select_from(task)
        .where(task.c.room_id == room_id, task.c.created_at >= start)
        .group_by(literal_column("bucket"))
    )
    return await _sqlite_counts(conn, statement, start, bucket_seconds)


async def _sqlite_running(
    conn: Connection, room_id: str, start: datetime, bucket_seconds: int
) -> dict[int, int]:
    """SQLite: the departures of the room's claimed/running tasks started since ``start``,
    read on the claimed/running tasks' index (``ix_task_active_lease``): the room id is
    compared as ``room_id || ''``, which SQLite cannot look up on ``ix_task_room_created``
    (all of the room's tasks)."""
    key: Any = literal_column(_sqlite_key("task.started_at", bucket_seconds)).label("bucket")
    unindexed_room = task.c.room_id.op("||")(literal_column("''"))
    statement = (
        select(key, func.count().label("n"))
        .select_from(task)
        .where(is_active(), unindexed_room == room_id, task.c.started_at >= start)
        .group_by(literal_column("bucket"))
    )
    return await _sqlite_counts(conn, statement, start, bucket_seconds)


async def counts_by_job(conn: Connection, room_id: str) -> list[Any]:
    """All-time ``(room_id, category, name, status, n)`` of the room's tasks, per job and
    status: one grouped count over the room's tasks (``ix_task_room_created``), grouped
    before the job names are joined (a join per task row cost as much as the count)."""
    grouped = (
        select(task.c.job_id, task.c.status, func.count().label("n"))
        .where(task.c.room_id == room_id)
        .group_by(task.c.job_id, task.c.status)
        .subquery()
    )
    statement = select(
        job_table.c.room_id, job_table.c.category, job_table.c.name, grouped.c.status, grouped.c.n
    ).join(grouped, grouped.c.job_id == job_table.c.id)
    return list((await conn.execute(statement)).all())
