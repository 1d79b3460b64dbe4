"""Golden SQL: every shape of the claim and the other statements of the task cycle and the
sweeps, as each engine's dialect compiles them, are checked in under ``sql_snapshots/``
(``<name>.<dialect>.sql``), so that a change to the SQL shows in review. Parameters stay
bound, as the driver gets them; their names are listed in order above each statement, with
the values the statement itself holds (a claim's status, its LIMIT). A snapshot that
differs fails with a diff; ``TASKHUB_UPDATE_SNAPSHOTS=1`` rewrites them (and removes those
of statements no longer listed here).

The statements come from the store's own functions, run on a connection that only records
what it is sent, with inputs that pick each shape the services use; the claim's from
``claim_statement``, one snapshot per combination of its shape that ``claims.claim`` runs.
A claim of more than two tasks differs from the one of two only in its LIMITs' values,
which ``test_a_bigger_claim_differs_only_in_its_limit`` holds."""

from __future__ import annotations

import difflib
import os
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any, cast
from uuid import UUID

import pytest
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.sql import Executable
from sqlalchemy.sql.elements import DQLDMLClauseElement

from taskhub.rules.records import Principal, TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.store import attempts, due_tasks, sweeps, task_updates, tasks
from taskhub.store.claims import (
    ClaimFrom,
    claim_statement,
    claimable_left_statement,
    held_under_key,
)
from taskhub.store.database import Database
from taskhub.store.queue_positions import queue_position
from taskhub.store.sqlite_driver import DRIVER_NAME
from taskhub.store.task_rows import load_task

SNAPSHOTS = Path(__file__).parent / "sql_snapshots"
UPDATE = os.environ.get("TASKHUB_UPDATE_SNAPSHOTS") == "1"
DIALECTS = ("sqlite", "postgresql")
URLS = {"sqlite": f"{DRIVER_NAME}://", "postgresql": "postgresql+asyncpg://"}


@cache
def dialect_of(name: str) -> Dialect:
    """The dialect the engine of ``name`` runs (``Database``'s drivers), without a
    connection (``test_the_engines_compile_as_the_snapshots_do`` holds that it compiles
    as a connected one does)."""
    return create_async_engine(URLS[name]).dialect


class _Answer:
    """The answer to every recorded statement: no rows."""

    rowcount = 0

    def all(self) -> list[Any]:
        return []

    def first(self) -> None:
        return None

    def scalar(self) -> None:
        return None

    def __iter__(self) -> Iterator[Any]:
        return iter(())


class Recorder:
    """A connection that runs nothing: it keeps the statements it is sent and answers
    each with nothing (no rows, no count)."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.statements: list[Executable] = []

    async def execute(self, statement: Executable, params: Any = None) -> _Answer:
        self.statements.append(statement)
        return _Answer()

    async def scalar(self, statement: Executable, params: Any = None) -> int:
        self.statements.append(statement)
        return 0  # (a count of nothing: ``queue_position`` reads one)

    async def scalars(self, statement: Executable, params: Any = None) -> list[Any]:
        self.statements.append(statement)
        return []


Source = Callable[[Any], Awaitable[object]]


@dataclass(frozen=True)
class Statement:
    name: str
    dialects: tuple[str, ...]
    source: Source


AT = datetime(2026, 3, 14, 12, 0, 0, 250_000, tzinfo=UTC)
AN_ID = UUID(int=1)
OWNER = Principal(id=UUID(int=2), name="owner", is_superuser=False)
ADMIN = Principal(id=UUID(int=3), name="admin", is_superuser=True)


def a_task(*, turn_at: datetime | None = None, run_at: datetime | None = None) -> TaskRecord:
    return TaskRecord(
        id=AN_ID,
        job_id=AN_ID,
        job_name="room1:modifiers:Job",
        room_id="room1",
        status=TaskStatus.PENDING,
        payload={},
        created_at=AT,
        started_at=None,
        completed_at=None,
        worker_id=None,
        error=None,
        submitted_by=OWNER.id,
        claim_token=None,
        attempt=0,
        turn_at=turn_at,
        run_at=run_at,
    )


# A FIFO job's new task (the last of its second: counted from its end), a fair job's whose
# turn is early in its second (counted from its start), a delayed one.
TASKS = {
    "fifo": a_task(),
    "fair": a_task(turn_at=AT - timedelta(microseconds=200_000)),
    "delayed": a_task(run_at=AT + timedelta(hours=1)),
}


def claims() -> Iterator[Statement]:
    """Each shape ``claims.claim`` runs: the queue, then the due waiting tasks, and on
    PostgreSQL both waiting for locked rows; of one task or more, for a caller whose
    ownership is checked or not, claiming or claiming and starting; and leaving the closed
    rooms alone (private rooms where the worker's owner may not work)."""
    shapes: list[tuple[ClaimFrom, bool, tuple[str, ...]]] = [
        (ClaimFrom.QUEUE, False, DIALECTS),
        (ClaimFrom.DUE_WAITING, False, DIALECTS),
        (ClaimFrom.BOTH, True, ("postgresql",)),
    ]
    for source, wait, dialects in shapes:
        for limit in (1, 2):
            for check_owner in (False, True):
                for start in (False, True):
                    name = f"claim-{source.value}{'-waiting' if wait else ''}-limit{limit}"
                    name += f"{'-owner-checked' if check_owner else ''}{'-start' if start else ''}"
                    shape = {
                        "check_owner": check_owner,
                        "limit": limit,
                        "wait_for_locked": wait,
                        "source": source,
                        "start": start,
                    }
                    yield Statement(name, dialects, _claim(shape))
            # A worker whose owner may not work in some private rooms: they are left alone.
            name = f"claim-{source.value}{'-waiting' if wait else ''}-limit{limit}"
            shape = {
                "check_owner": True,
                "limit": limit,
                "wait_for_locked": wait,
                "source": source,
                "exclude_rooms": True,
            }
            yield Statement(f"{name}-owner-checked-closed-rooms", dialects, _claim(shape))


def _claim(shape: dict[str, Any]) -> Source:
    async def source(conn: Recorder) -> None:
        await conn.execute(claim_statement(conn.dialect.name, **shape))

    return source


def _update(target: TaskStatus | None, principal: Principal = OWNER, **kw: Any) -> Source:
    def source(conn: Any) -> Awaitable[object]:
        return task_updates.update_status(conn, principal, AN_ID, target, now=AT, **kw)

    return source


def _insert(record: TaskRecord) -> Source:
    def source(conn: Any) -> Awaitable[object]:
        return tasks.insert_task(
            conn,
            record,
            job_version=AT,
            idempotency_key="key",
            request_digest="digest",
            max_attempts=None,
            now=AT,
        )

    return source


def _position(record: TaskRecord) -> Source:
    def source(conn: Any) -> Awaitable[object]:
        return queue_position(conn, record, AT, newest=True)

    return source


async def _claimable_left(conn: Recorder) -> None:
    await conn.scalar(claimable_left_statement(conn.dialect.name))


RETRY = task_updates.Retry(attempt=1, run_at=AT + timedelta(seconds=10))
LEASE = AT + timedelta(minutes=5)
EVERY = DIALECTS


def others() -> Iterator[Statement]:
    """The claim's other statements, the submit's, a task's read, the PATCHes', the
    sweeper's and the announcer's."""
    yield Statement("claimable-left", EVERY, _claimable_left)
    yield Statement(
        "held-under-key", EVERY, lambda conn: held_under_key(conn, AN_ID, "key", started=False)
    )
    yield Statement(
        "held-under-key-started",
        EVERY,
        lambda conn: held_under_key(conn, AN_ID, "key", started=True),
    )
    yield Statement("submit-insert", ("sqlite",), _insert(TASKS["fifo"]))
    for kind, record in TASKS.items():
        yield Statement(f"submit-insert-with-position-{kind}", ("postgresql",), _insert(record))
        yield Statement(f"queue-position-{kind}", EVERY, _position(record))
    yield Statement(
        "submit-replay", EVERY, lambda conn: tasks.submitted_before(conn, AN_ID, AN_ID, "key")
    )
    yield Statement("task-read", EVERY, lambda conn: load_task(conn, AN_ID))
    yield Statement(
        "task-read-stored", EVERY, lambda conn: load_task(conn, AN_ID, stored_documents=True)
    )
    updates = {
        "running": _update(TaskStatus.RUNNING, claim_token=AN_ID, lease_until=LEASE),
        "progress": _update(
            None, claim_token=AN_ID, progress=0.5, progress_message="half", lease_until=LEASE
        ),
        "completed": _update(TaskStatus.COMPLETED, claim_token=AN_ID, result={"ok": True}),
        "failed": _update(TaskStatus.FAILED, claim_token=AN_ID, error="boom"),
        "failed-retry": _update(TaskStatus.FAILED, claim_token=AN_ID, error="boom", retry=RETRY),
        "cancelled": _update(TaskStatus.CANCELLED),
        "completed-by-superuser": _update(TaskStatus.COMPLETED, ADMIN, result={"ok": True}),
    }
    for kind, source in updates.items():
        yield Statement(f"task-update-{kind}", EVERY, source)
    yield Statement(
        "task-update-attempt", EVERY, lambda conn: task_updates.current_attempt(conn, AN_ID)
    )
    yield Statement(
        "task-update-refusal", EVERY, lambda conn: task_updates.task_with_worker_owner(conn, AN_ID)
    )
    yield from sweeper()
    yield Statement(
        "announcer-came-due",
        EVERY,
        lambda conn: due_tasks.came_due_rows(conn, AT, AN_ID, AT, 100),
    )
    yield Statement(
        "announcer-queue-due", EVERY, lambda conn: due_tasks.queue_due_waiting(conn, AT, 100)
    )
    yield Statement("announcer-next-due", EVERY, lambda conn: due_tasks.next_due_at(conn, AT))


def sweeper() -> Iterator[Statement]:
    yield Statement("sweep-stale-workers", EVERY, lambda c: sweeps.stale_worker_ids(c, AT, 500))
    yield Statement(
        "sweep-lock-idle-silent-workers",
        EVERY,
        lambda c: sweeps.lock_idle_silent_workers(c, AT, 500),
    )
    yield Statement("sweep-jobs-served-by", EVERY, lambda c: sweeps.jobs_served_by(c, [AN_ID]))
    yield Statement(
        "sweep-delete-idle-workers", EVERY, lambda c: sweeps.delete_idle_workers(c, [AN_ID])
    )
    yield Statement(
        "sweep-fail-stuck-internal-tasks",
        EVERY,
        lambda c: sweeps.fail_internal_tasks_active_since(c, AT, error="timeout", now=AT),
    )
    yield Statement(
        "sweep-purge-ended-tasks", EVERY, lambda c: sweeps.delete_oldest_ended(c, AT, 1000)
    )
    which = {"expired-lease": attempts.lease_ran_out(AT), "worker-gone": attempts.worker_gone()}
    for name, attempts_of in which.items():
        for step, source in _ending(attempts_of).items():
            yield Statement(f"sweep-{name}-{step}", EVERY, source)


def _ending(which: attempts.Which) -> dict[str, Source]:
    """The statements that end the abandoned attempts of ``which``."""

    def retryable(conn: Any) -> Awaitable[object]:
        return attempts.retryable(conn, which)

    def retry(conn: Any) -> Awaitable[object]:
        return attempts.retry(conn, which, AN_ID, 1, run_at=None, error="gone", now=AT)

    def fail_exhausted(conn: Any) -> Awaitable[object]:
        return attempts.fail_exhausted(conn, which, error="gone", now=AT)

    return {"retryable": retryable, "retry": retry, "fail-exhausted": fail_exhausted}


STATEMENTS = {statement.name: statement for statement in [*claims(), *others()]}
CASES = [(name, dialect) for name, s in STATEMENTS.items() for dialect in s.dialects]


async def statement_of(name: str, dialect: Dialect) -> Executable:
    """The one statement ``name``'s source sends on ``dialect``."""
    recorder = Recorder(dialect)
    await STATEMENTS[name].source(recorder)
    assert len(recorder.statements) == 1, f"{name}: {len(recorder.statements)} statements"
    return recorder.statements[0]


def compiled_text(name: str, statement: Executable, dialect: Dialect) -> str:
    """The snapshot of ``statement``: the SQL as the dialect compiles it for the driver
    (trailing blanks dropped), after its parameters in order (``$n`` on PostgreSQL, the
    n-th ``?`` on SQLite), each with the value the statement itself holds, if any (the
    status a claim writes, a LIMIT; a sweep's inputs)."""
    compiled = cast(DQLDMLClauseElement, statement).compile(dialect=dialect)
    lines = [
        f"-- {name} ({dialect.name}), from tests/store/test_sql_snapshots.py",
        "-- parameters in order (= the value the statement holds):",
    ]
    for number, parameter in enumerate(compiled.positiontup or (), start=1):
        bind = compiled.binds[parameter]
        held = "" if bind.required else f" = {_shown(bind.effective_value)}"
        lines.append(f"--   {number} {parameter}{held}")
    lines += compiled.string.splitlines()
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _shown(value: Any) -> str:
    """A held value as a reader would write it (a moment or an id plainly, in quotes)."""
    if isinstance(value, datetime | UUID):
        return f"'{value}'"
    if isinstance(value, list | tuple):
        return f"[{', '.join(_shown(item) for item in value)}]"
    return repr(value)


def snapshot_path(name: str, dialect: str) -> Path:
    return SNAPSHOTS / f"{name}.{dialect}.sql"


@pytest.mark.parametrize(("name", "dialect"), CASES)
async def test_the_sql_is_its_snapshot(name: str, dialect: str) -> None:
    """The statement compiles to its snapshot, or (rewriting) becomes it."""
    engine = dialect_of(dialect)
    text = compiled_text(name, await statement_of(name, engine), engine)
    path = snapshot_path(name, dialect)
    if UPDATE:
        SNAPSHOTS.mkdir(exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        return
    if not path.exists():
        pytest.fail(f"no snapshot {path.name}: run with TASKHUB_UPDATE_SNAPSHOTS=1")
    stored = path.read_text()
    if stored != text:
        diff = difflib.unified_diff(
            stored.splitlines(keepends=True),
            text.splitlines(keepends=True),
            f"{path.name} (snapshot)",
            f"{path.name} (compiled now)",
        )
        pytest.fail(
            "the SQL differs from its snapshot (TASKHUB_UPDATE_SNAPSHOTS=1 rewrites it):\n"
            + "".join(diff),
            pytrace=False,
        )


def test_every_snapshot_is_of_a_listed_statement() -> None:
    """A snapshot of a statement no longer listed goes (rewriting), or fails the test."""
    expected = {snapshot_path(name, dialect).name for name, dialect in CASES}
    stale = sorted(path for path in SNAPSHOTS.glob("*.sql") if path.name not in expected)
    if UPDATE:
        for path in stale:
            path.unlink()
        return
    assert not stale, f"snapshots of no listed statement: {[path.name for path in stale]}"


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("source", [ClaimFrom.QUEUE, ClaimFrom.DUE_WAITING])
async def test_a_bigger_claim_differs_only_in_its_limit(dialect: str, source: ClaimFrom) -> None:
    """The claim of two tasks stands for every claim of more than one (the snapshots hold
    one and two): a claim of 25 is the same SQL, its LIMITs bound to 25 instead of 2."""
    engine = dialect_of(dialect)
    for check_owner, start in [(False, False), (False, True), (True, False), (True, True)]:
        shape = {"check_owner": check_owner, "source": source, "start": start}
        two = compiled_text("claim", claim_statement(dialect, limit=2, **shape), engine)
        many = compiled_text("claim", claim_statement(dialect, limit=25, **shape), engine)
        assert " = 25\n" in many
        assert many.replace(" = 25\n", " = 2\n") == two


async def test_the_engines_compile_as_the_snapshots_do(db: Database) -> None:
    """The dialect of a connected engine (its server's version known) compiles each
    statement as the unconnected one the snapshots are made with."""
    async with db.read() as conn:
        connected = conn.dialect
    name = connected.name
    for statement_name, dialect in CASES:
        if dialect != name:
            continue
        fresh = compiled_text(
            statement_name, await statement_of(statement_name, dialect_of(name)), dialect_of(name)
        )
        used = compiled_text(
            statement_name, await statement_of(statement_name, connected), connected
        )
        assert used == fresh, statement_name
