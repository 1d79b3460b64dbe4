"""A room's aggregates over a recent window, for the dashboard: all-time task counts per
job and status, and per time bucket the tasks finished, the wait and run time percentiles
and the queue depth (``GET /rooms/{id}/stats``).

Buckets lie on a grid of whole multiples of their length since 1970 (UTC), so a bucket is
the same bucket on every read; the window's last bucket is the current one (partial).

``queue_depth`` of a bucket: how many tasks of the room were pending (submitted, not yet
started, not ended) at the bucket's end (now, for the current bucket). Computed without
reading history: today's pending count walked back through the window's arrivals (tasks
submitted, by ``created_at``) and departures (by ``started_at``, or ``completed_at`` for a
task that ended without starting): pending(t) = pending(now) - submitted after t + left
after t. Approximate for the few tasks whose rows no longer hold their past: a task
claimed but not yet started counts as gone from the queue since its submit, and a task a
retry sent back to pending counts as pending since its submit.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from taskhub.clock import utcnow
from taskhub.rules.errors import ValidationFailed
from taskhub.rules.naming import full_name, validate_room_id
from taskhub.rules.states import TaskStatus
from taskhub.store import room_stats as store
from taskhub.store.database import Database

# Window -> (seconds, bucket seconds).
WINDOWS: dict[str, tuple[int, int]] = {
    "15m": (15 * 60, 60),
    "1h": (3600, 60),
    "24h": (24 * 3600, 1200),
}


@dataclass(frozen=True, slots=True)
class StatsBucket:
    start: datetime
    completed: int
    failed: int
    cancelled: int
    queue_depth: int
    wait_p50: float | None
    wait_p95: float | None
    run_p50: float | None
    run_p95: float | None


@dataclass(frozen=True, slots=True)
class RoomStats:
    room_id: str
    window: str
    bucket_seconds: int
    since: datetime
    until: datetime
    counts: list[dict[str, int | str]]
    """Per job (``job``: its full name), the room's tasks in each status, all time."""
    buckets: list[StatsBucket]


def window_start(window: str, now: datetime) -> datetime:
    """The start of the window's first bucket: the current bucket's, less the others'."""
    length, step = WINDOWS[window]
    current = int(now.timestamp()) // step * step
    return datetime.fromtimestamp(current - (length // step - 1) * step, UTC)


def floored(moment: datetime, step: int) -> datetime:
    """``moment`` floored to the bucket grid of ``step`` seconds."""
    return datetime.fromtimestamp(int(moment.timestamp()) // step * step, UTC)


async def room_stats(
    db: Database, room_id: str, window: str, since: datetime | None = None
) -> RoomStats:
    """The room's aggregates over ``window`` (``WINDOWS``); with ``since`` (within the
    window), only the buckets from the one holding it."""
    validate_room_id(room_id)
    if window not in WINDOWS:
        raise ValidationFailed(
            f"window must be one of {', '.join(WINDOWS)}.",
            errors=[{"loc": ["query", "window"], "msg": "unknown window"}],
        )
    now = utcnow()
    _, step = WINDOWS[window]
    start = window_start(window, now)
    if since is not None:
        if since.tzinfo is None:
            since = since.replace(tzinfo=UTC)
        first = floored(since, step)
        if not start <= first <= now:
            raise ValidationFailed(
                f"since must lie within the window ({start.isoformat()} to now).",
                errors=[{"loc": ["query", "since"], "msg": "outside the window"}],
            )
        start = first
    async with db.read() as conn:
        by_job = await store.counts_by_job(conn, room_id)
        rows = await store.window_rows(conn, room_id, start, step)
    finished, arrived, left = rows.finished, rows.arrivals, rows.departures
    counts = _counts(by_job)
    pending_now = sum(int(entry[TaskStatus.PENDING.value]) for entry in counts)
    last = (int(now.timestamp()) - int(start.timestamp())) // step
    buckets: list[StatsBucket] = []
    depth = pending_now
    for index in range(last, -1, -1):  # newest first: depth walks back in time
        if index < last:
            depth += left.get(index + 1, 0) - arrived.get(index + 1, 0)
        entry = finished.get(index, store.FinishedBucket())
        buckets.append(
            StatsBucket(
                start=start + timedelta(seconds=index * step),
                completed=entry.completed,
                failed=entry.failed,
                cancelled=entry.cancelled,
                queue_depth=max(depth, 0),
                wait_p50=entry.wait.get(0.5),
                wait_p95=entry.wait.get(0.95),
                run_p50=entry.run.get(0.5),
                run_p95=entry.run.get(0.95),
            )
        )
    buckets.reverse()
    return RoomStats(room_id, window, step, start, now, counts, buckets)


def _counts(rows: list[Any]) -> list[dict[str, int | str]]:
    """One entry per job, every status present (0 where none), by full name."""
    per_job: dict[str, dict[str, int | str]] = {}
    for row in rows:
        name = full_name(row.room_id, row.category, row.name)
        entry = per_job.setdefault(
            name, {"job": name, **{status.value: 0 for status in TaskStatus}}
        )
        entry[row.status] = int(entry[row.status]) + row.n
    return [per_job[name] for name in sorted(per_job)]
