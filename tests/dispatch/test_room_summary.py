"""``@internal:analysis:RoomSummary``'s figures, run straight on the database (SQLite and
PostgreSQL): computed there, equal to Python's over the same rows, at a cost in rows
fetched that does not grow with the room's history."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from sqlalchemy import insert

from taskhub.clock import new_id
from taskhub.dispatch.definitions import InternalContext
from taskhub.internal_jobs.jobs import RoomSummary
from taskhub.store.database import Database
from taskhub.store.hot_statements import HotConnection, HotResult
from taskhub.store.tables import task_table
from tests.support.rows import add_job

# Just before midnight, on the last microsecond of a second: a run that starts here ends
# on another second, minute, day and year (the text SQLite stores differs in every field).
EDGE = datetime(2025, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
US = timedelta(microseconds=1)


def a_task(job_id: UUID, status: str, *, room: str = "room1", **values: Any) -> dict[str, Any]:
    return {
        "id": new_id(),
        "job_id": job_id,
        "room_id": room,
        "status": status,
        "payload": {},
        "created_at": EDGE,
        "turn_at": EDGE,
        "attempt": 1,
        "started_at": None,
        "completed_at": None,
        "error": None,
        **values,
    }


async def insert_tasks(db: Database, rows: list[dict[str, Any]]) -> None:
    async with db.write() as conn:
        await conn.execute(insert(task_table), rows)


def summary(db: Database, room: str = "room1", **fields: Any) -> Any:
    ctx = InternalContext(task_id=uuid4(), room_id=room, attempt=1, db=db)
    return RoomSummary(**fields).run(ctx)


def known_runs() -> list[tuple[datetime, datetime]]:
    """Three dozen (started_at, completed_at) pairs: zero, a microsecond, across a second
    boundary from .999999, whole seconds, over midnight and the year's end, several days."""
    durations = [
        timedelta(0),
        US,
        2 * US,
        timedelta(microseconds=999_999),
        timedelta(seconds=1),
        timedelta(seconds=1, microseconds=1),
        timedelta(seconds=59, microseconds=999_999),
        timedelta(hours=1, microseconds=7),
        timedelta(days=1, microseconds=123_456),
        timedelta(days=3, hours=5, minutes=7, seconds=11, microseconds=13),
    ]
    durations += [timedelta(microseconds=37_777_777 * k + 1_013 * k * k) for k in range(1, 27)]
    runs = []
    for k, duration in enumerate(durations):
        # starts around EDGE, on fractions from .000000 to .999999
        start = EDGE + timedelta(seconds=-3 * k, microseconds=-((k * 999_983) % 1_000_000))
        if k % 3 == 0:
            start = EDGE - timedelta(seconds=k)  # on .999999 exactly
        runs.append((start, start + duration))
    return runs


async def test_figures_equal_a_python_computation_over_the_same_tasks(db: Database):
    job_id = await add_job(db)
    runs = known_runs()
    rows = [a_task(job_id, "completed", started_at=start, completed_at=end) for start, end in runs]
    # Not counted in run_seconds: completed without a start, other statuses, another room.
    rows.append(a_task(job_id, "completed", completed_at=EDGE))
    failures = [EDGE + timedelta(minutes=k) for k in range(4)]
    rows += [
        a_task(job_id, "failed", started_at=EDGE, completed_at=at, error=f"kaput {k}")
        for k, at in enumerate(failures)
    ]
    rows += [a_task(job_id, "cancelled", completed_at=EDGE), a_task(job_id, "pending")]
    rows += [a_task(job_id, "running", started_at=EDGE)]
    rows += [a_task(job_id, "completed", room="room2", started_at=EDGE, completed_at=EDGE + 9 * US)]
    await insert_tasks(db, rows)

    result = await summary(db, failures=2)

    durations = sorted((end - start).total_seconds() for start, end in runs)  # as Python does
    run_seconds = result["run_seconds"]
    assert run_seconds["count"] == len(runs) == 36
    assert run_seconds["max"] == durations[-1]
    assert run_seconds["mean"] == pytest.approx(sum(durations) / len(durations), rel=1e-15)
    # exactly: the sum of the runs in microseconds over their count, rounded once
    total_us = sum(((end - start) // US for start, end in runs), 0)
    assert run_seconds["mean"] == total_us / (1_000_000 * len(runs))

    assert result["room_id"] == "room1"
    assert result["total"] == len(rows) - 1
    assert result["by_status"] == {
        "pending": 1,
        "claimed": 0,
        "running": 1,
        "completed": len(runs) + 1,
        "failed": 4,
        "cancelled": 1,
    }
    assert list(result["by_job"].values()) == [len(rows) - 1]
    assert [failure["error"] for failure in result["latest_failures"]] == ["kaput 3", "kaput 2"]
    assert result["latest_failures"][0]["at"] == failures[3].isoformat()

    other = await summary(db, room="room2")
    assert other["run_seconds"] == {"count": 1, "mean": 9e-06, "max": 9e-06}
    empty = await summary(db, room="room3")
    assert empty["run_seconds"] == {"count": 0, "mean": None, "max": None}
    assert empty["total"] == 0 and empty["by_job"] == {} and empty["latest_failures"] == []


async def test_rows_fetched_do_not_grow_with_the_rooms_history(db: Database, monkeypatch):
    """Every statement RoomSummary executes, with the rows it brings into Python: a handful,
    with 500 completed tasks as with none (it used to fetch every completed task's times)."""
    job_id = await add_job(db)
    rows = [
        a_task(
            job_id,
            "completed",
            started_at=EDGE + timedelta(seconds=k),
            completed_at=EDGE + timedelta(seconds=k, milliseconds=k),
        )
        for k in range(500)
    ]
    rows += [
        a_task(job_id, "failed", started_at=EDGE, completed_at=EDGE, error="x") for _ in range(20)
    ]
    await insert_tasks(db, rows)
    fetched: list[int] = []
    execute = HotConnection.execute

    async def counting_execute(self: HotConnection, statement: Any, params: Any = None) -> Any:
        found = (await execute(self, statement, params)).all()
        fetched.append(len(found))
        return HotResult(list(found))

    monkeypatch.setattr(HotConnection, "execute", counting_execute)
    result = await summary(db, failures=3)

    assert result["run_seconds"]["count"] == 500
    assert result["run_seconds"]["max"] == 0.499
    assert result["total"] == 520
    # per status (2), per job (1), the failures listed (3)
    assert fetched == [2, 1, 3], fetched
