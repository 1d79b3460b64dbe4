"""The *history* and *soak* dimensions of ``python -m benchmarks scale`` (issue #49): a hub
with a long past, and a hub kept busy for a long time.

**history.** Per engine, one fresh database and ``taskhub serve`` with retention off
(``TASKHUB_TASK_RETENTION_SECONDS=0``): three jobs in each of ``--history-rooms`` rooms
registered over REST (one worker, heartbeating throughout), 1000 submitters, then terminal
tasks seeded through the store's table (``harness.seeding.bulk_seed_tasks``: ``COPY`` on
PostgreSQL) up to each size of ``--history-sizes`` (SQLite) or ``--history-postgres-sizes``
in turn, each size adding to the last. The tasks are spread evenly over the past
``--history-days`` days, over the rooms (the measured room holds ``--history-room-share``,
30 %; the others share the rest), their jobs, the submitters and 20 workers; 85 %
completed, 10 % failed (a fifth with "Disk full" in their error), 5 % cancelled. On
PostgreSQL each size ends with ``VACUUM ANALYZE`` (``store.seeding.refresh_statistics``).
At each size, over REST, ``--history-samples`` sequential requests of each operation
(after two untimed; an operation stops early, after three, once it has taken
``--history-op-seconds``):

- ``submit``, ``claim`` (the worker takes what the submits queued), ``task_read`` (seeded
  tasks, a different one each time);
- ``list_default`` (the room page's first page: ``view=summary``, 50 tasks, newest first),
  filtered as the page offers (``list_status`` ``failed,cancelled``, ``list_job``,
  ``list_submitter``, ``list_worker``), ``search`` (``q=disk``), and sorted by each other
  sort the page offers (``list_sort_<key>_<asc|desc>``);
- ``stats_15m``, ``stats_1h``, ``stats_24h``; ``bulk_dry_run`` (a re-run of the room's
  failed "disk" tasks of one worker, ``dry_run``).

Each row has p50/p95 and their ratio to the smallest size; ``goal``: p95 within 1.5 x the
smallest size's (submit, claim, read) or at most 50 ms (lists, search, stats). A ``storage``
row per size: bytes on disk per task (SQLite: the file and its WAL; PostgreSQL: the total
size of ``task`` and ``task_log``, indexes and TOAST included) and the seeding's rate.

Then the **purge**: the hub restarted on the same database with retention on
(``--history-retention-days``, the sweeper every ``--history-purge-interval`` s, its batch
size the default): for ``--history-purge-seconds`` (or until the purge is done) submit and
claim alternately while the sweeper's ``tasks_purged`` count (``/metrics``) is read every
half second. One ``purge`` row: tasks purged, their rate, and submit/claim p95 meanwhile
against the retention-off figures at the largest size.

**soak.** Per engine, a fresh hub, one ``taskhub worker`` process
(``benchmarks.apps.sdk_worker:Noop``, ``--soak-concurrency`` slots) and as many submit loops
(submit, then ``GET /tasks/{id}`` with ``Prefer: wait=30`` until it has completed, then the
next): ``--soak-tasks`` tasks back to back. Every ``--soak-every`` tasks a row: the hub's
RSS and open file descriptors (``/proc``), p50/p95 of submit -> completed over that slice,
and its tasks/s. A ``summary`` row compares the first slice after warm-up (the second) with
the last: RSS growth (goal: at most 5 %) and p95 change (goal: within 20 %).

    .venv/bin/python -m benchmarks.scenarios.scale_history --engines sqlite \\
        --dimensions history --history-sizes 50000,200000
    .venv/bin/python -m benchmarks.scenarios.scale_history --dimensions soak \\
        --soak-tasks 20000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import secrets
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

import asyncpg
import httpx

from benchmarks.harness.cli import (
    cancel_on_termination,
    choices,
    csv_ints,
    run_command,
    scenario_parser,
    scratch_options,
)
from benchmarks.harness.client import API, RUN_FAILURES, BenchError, call, heartbeat, new_client
from benchmarks.harness.report import (
    Results,
    emit,
    load_average,
    log,
    markdown_table,
    ms,
    percentile,
)
from benchmarks.harness.seeding import (
    asyncpg_url,
    bulk_seed_tasks,
    hub_database,
    seed_users,
    token_user,
)
from benchmarks.harness.targets import (
    LIMITS_OFF,
    LOCALHOST,
    REPO_ROOT,
    Target,
    TargetError,
    TargetOptions,
    database_env,
    free_port,
    fresh_database,
    pg_server_pid,
    served,
    taskhub_command,
)
from taskhub.clock import new_id, utcnow
from taskhub.rules.task_filter import DEFAULT_SORT, SORTS
from taskhub.store.seeding import SeedTask, refresh_statistics

SCENARIO = "scale"
DIMENSIONS = ("history", "soak")
ENGINES = ("sqlite", "postgres")
JOBS = ("Rotate", "Scale", "Smooth")
CATEGORY = "modifiers"
SUBMITTERS = 1000  # many: each one's usage row is updated once a seeded task (see COPY_CHUNK)
FAKE_WORKERS = 20  # the workers the seeded history ran on (gone since)
# (status, share): the rest of 1.0 is completed.
TERMINAL_MIX = (("failed", 0.10), ("cancelled", 0.05))
READ_IDS = 500  # seeded tasks kept to read
WARMUP = 2
MIN_SAMPLES = 3
PAGE = 50  # the room page's page size (app/static/state.js)
RATIO_GOAL = 1.5  # submit, claim and read p95 at size / at the smallest size
LIST_GOAL_MS = 50.0  # stats, lists and search p95
HOT_OPERATIONS = ("submit", "claim", "task_read")
SOAK_WAIT_SECONDS = 30
SOAK_RSS_GOAL_PCT = 5.0
SOAK_P95_GOAL_PCT = 20.0
WORKER_READY_SECONDS = 90.0
WORKER_STOP_SECONDS = 20.0
SOAK_JOB = "benchmarks.apps.sdk_worker:Noop"
PURGED = re.compile(r'^taskhub_sweeper_cleaned_total\{kind="tasks_purged"\}\s+(\S+)', re.M)
SWEEPS = re.compile(r"^taskhub_sweeper_runs_total\s+(\S+)", re.M)


# -- the command line ----------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the history and soak dimensions (all prefixed)."""
    group = parser.add_argument_group("history and soak")
    group.add_argument(
        "--history-sizes",
        type=csv_ints,
        default=[50_000, 1_000_000],
        help="terminal tasks kept on SQLite, each size in turn (default 50000,1000000)",
    )
    group.add_argument(
        "--history-postgres-sizes",
        type=csv_ints,
        default=[50_000, 10_000_000],
        help="the same on PostgreSQL (default 50000,10000000)",
    )
    group.add_argument(
        "--history-samples", type=int, default=50, help="requests of each operation (50)"
    )
    group.add_argument(
        "--history-op-seconds",
        type=float,
        default=60.0,
        help="an operation stops sampling after this long (at least 3 samples; 60)",
    )
    group.add_argument("--history-days", type=int, default=28, help="the history's span (28)")
    group.add_argument("--history-rooms", type=int, default=16, help="rooms of the history (16)")
    group.add_argument(
        "--history-room-share",
        type=float,
        default=0.3,
        help="the measured room's share of the history's tasks (0.3)",
    )
    group.add_argument(
        "--history-retention-days",
        type=float,
        default=14.0,
        help="retention while the purge is measured (14: half the history goes)",
    )
    group.add_argument(
        "--history-purge-interval",
        type=float,
        default=1.0,
        help="the sweeper's interval while the purge is measured (1 s)",
    )
    group.add_argument(
        "--history-purge-seconds",
        type=float,
        default=30.0,
        help="how long the purge is watched (30; 0: not measured)",
    )
    group.add_argument(
        "--soak-tasks", type=int, default=1_000_000, help="tasks through the soak's hub"
    )
    group.add_argument(
        "--soak-every", type=int, default=10_000, help="tasks between the soak's samples"
    )
    group.add_argument(
        "--soak-concurrency",
        type=int,
        default=8,
        help="submit loops, and the worker's slots (8)",
    )


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse values the dimensions cannot run with."""
    if args.history_samples < 1 or args.history_days < 1 or args.history_rooms < 1:
        parser.error("--history-samples, --history-days and --history-rooms must be positive")
    if args.soak_tasks < 1 or args.soak_every < 1 or args.soak_concurrency < 1:
        parser.error("--soak-tasks, --soak-every and --soak-concurrency must be positive")
    if not 0 < args.history_room_share <= 1:
        parser.error("--history-room-share must be above 0 and at most 1")
    if not 0 < args.history_retention_days < args.history_days:
        parser.error("--history-retention-days must be above 0 and below --history-days")


# -- hubs ----------------------------------------------------------------------------------


@asynccontextmanager
async def serve_hub(
    engine: str, url: str, options: TargetOptions, name: str, extra_env: dict[str, str]
) -> AsyncIterator[Target]:
    """``taskhub serve`` on ``url`` (an existing database: a hub can be started again on
    it), the benchmarks' usual environment plus ``extra_env``."""
    port, token = free_port(), "th_" + secrets.token_urlsafe(32)
    env = {**LIMITS_OFF, **database_env(url), **extra_env}
    env.update(
        TASKHUB_ADMIN_TOKEN=token, TASKHUB_LOG_LEVEL=options.log_level, TASKHUB_ACCESS_LOG="false"
    )
    argv = [*taskhub_command(), "serve", "--host", LOCALHOST, "--port", str(port)]
    postmaster = await pg_server_pid(options.pg_admin_url) if engine == "postgres" else None
    log_path = options.workdir / f"{name}.log"
    async with served(name, argv, env, port, token, log_path, url, postmaster) as target:
        yield target


def base_row(dimension: str, engine: str, **fields: Any) -> dict[str, Any]:
    return {"scenario": SCENARIO, "dimension": dimension, "engine": engine, **fields}


def error_row(dimension: str, engine: str, exc: BaseException) -> dict[str, Any]:
    return base_row(dimension, engine, operation="error", error=f"{type(exc).__name__}: {exc}")


# -- history: the seeded past --------------------------------------------------------------


@dataclass
class History:
    """What the history's hub has registered and seeded."""

    room: str  # the measured room
    jobs: dict[str, list[UUID]]  # room -> its jobs
    worker_id: str
    room_share: float = 0.3  # of the tasks, in the measured room
    users: list[UUID] = field(default_factory=list)
    workers: list[UUID] = field(default_factory=lambda: [new_id() for _ in range(FAKE_WORKERS)])
    read_ids: list[UUID] = field(default_factory=list)
    seeded: int = 0

    @property
    def job_name(self) -> str:
        return f"{self.room}:{CATEGORY}:{JOBS[0]}"

    @property
    def other_rooms(self) -> list[str]:
        return [room for room in self.jobs if room != self.room]


async def register_history(client: httpx.AsyncClient, rooms: int, room_share: float) -> History:
    """The rooms' jobs over REST, all served by one worker."""
    prefix = f"hist-{secrets.token_hex(3)}"
    worker_id: str | None = None
    jobs: dict[str, list[UUID]] = {}
    for index in range(rooms):
        room = f"{prefix}-{index}"
        for name in JOBS:
            body: dict[str, Any] = {"category": CATEGORY, "name": name, "schema": {}}
            if worker_id is not None:
                body["worker_id"] = worker_id
            job, _elapsed = await call(client, "PUT", f"{API}/rooms/{room}/jobs", body)
            worker_id = job["worker_id"]
            jobs.setdefault(room, []).append(UUID(job["id"]))
    assert worker_id is not None
    return History(room=f"{prefix}-0", jobs=jobs, worker_id=worker_id, room_share=room_share)


def terminal_status(draw: float) -> str:
    for status, share in TERMINAL_MIX:
        if draw < share:
            return status
        draw -= share
    return "completed"


def uuid7_at(seconds: float, bits: Callable[[int], int]) -> UUID:
    """A UUIDv7 of the moment ``seconds`` (Unix time), as the hub's ids are of their
    submit: its 48 bits of milliseconds, the version, 74 random bits and the variant."""
    random_bits = bits(74)
    value = int(seconds * 1000) << 80 | 0x7 << 76 | (random_bits >> 62) << 64
    return UUID(int=value | 0b10 << 62 | (random_bits & (1 << 62) - 1))


def history_tasks(
    history: History, count: int, batch: int, now: datetime, days: int
) -> Iterator[SeedTask]:
    """``count`` terminal tasks spread evenly over the past ``days`` (each batch, its own
    draws, offset a little, so that batches interleave), oldest first, each id of its
    submit's moment; keeps some of the measured room's ids to read. (Times as floats and
    plain draws: millions of rows are built.)"""
    draws = random.Random(batch)
    draw, bits = draws.random, draws.getrandbits
    span = days * 86400.0
    start, end = now.timestamp() - span, now.timestamp()
    step = span / max(count, 1)
    offset = draw()
    others = history.other_rooms or [history.room]
    users, workers = history.users, history.workers
    keep_every = max(1, count // READ_IDS)
    for index in range(count):
        at = start + step * (index + offset)
        room = history.room if draw() < history.room_share else others[int(draw() * len(others))]
        jobs = history.jobs[room]
        status = terminal_status(draw())
        started: float | None = at + 0.1 + 9.9 * draw()  # waited 0.1-10 s
        ran = 0.5 + 59.5 * draw()  # ran 0.5-60 s
        if status == "cancelled" and draw() < 0.5:
            started, ran = None, 0.0  # cancelled before it started
        ended = min((started or at) + ran, end)
        error = None
        if status == "failed":
            error = "Disk full on node7" if index % 5 == 0 else "ValueError: bad angle"
        number = history.seeded + index
        task_id = uuid7_at(at, bits)
        if room == history.room and index % keep_every == 0 and len(history.read_ids) < READ_IDS:
            history.read_ids.append(task_id)
        yield SeedTask(
            id=task_id,
            job_id=jobs[number % len(jobs)],
            room_id=room,
            created_at=datetime.fromtimestamp(at, UTC),
            submitted_by=users[int(draw() * len(users))],
            status=status,
            payload={"angle": number % 360, "note": f"sample {number}"},
            started_at=None if started is None else datetime.fromtimestamp(started, UTC),
            completed_at=datetime.fromtimestamp(ended, UTC),
            worker_id=None if started is None else workers[int(draw() * len(workers))],
            error=error,
            attempt=0 if started is None else 1,
        )


async def seed_history(
    target: Target, history: History, size: int, days: int
) -> tuple[int, float, float | None]:
    """Seed up to ``size`` tasks (the submitters first, once); how many went in, the seconds
    they took, and those of PostgreSQL's ``VACUUM ANALYZE`` after (None on SQLite)."""
    async with hub_database(target) as db:
        if not history.users:
            admin = await token_user(db, target.token)
            others = [(new_id(), f"{history.room}-user{n}") for n in range(SUBMITTERS - 1)]
            await seed_users(db, others, utcnow() - timedelta(days=days + 1))
            history.users = [u for u in (admin,) if u is not None] + [u for u, _ in others]
        started = time.perf_counter()
        count = size - history.seeded
        tasks = history_tasks(history, count, history.seeded, utcnow(), days)
        written = await bulk_seed_tasks(target, tasks)
        history.seeded += written
        seed_s = time.perf_counter() - started
        if db.is_sqlite:
            return written, seed_s, None
        started = time.perf_counter()
        await refresh_statistics(db, vacuum=True)
        return written, seed_s, time.perf_counter() - started


async def disk_bytes(target: Target) -> int:
    """The task data on disk: SQLite's file and WAL; PostgreSQL's ``task`` and ``task_log``
    with their indexes and TOAST."""
    assert target.database_url is not None
    if target.database_url.startswith("sqlite"):
        path = Path(target.database_url.split(":///", 1)[1])
        wal = path.with_name(path.name + "-wal")
        return sum(p.stat().st_size for p in (path, wal) if p.exists())
    conn = await asyncpg.connect(asyncpg_url(target.database_url), timeout=10)
    try:
        statement = "SELECT pg_total_relation_size('task') + pg_total_relation_size('task_log')"
        return int(await conn.fetchval(statement))
    finally:
        await conn.close()


# -- history: the operations ---------------------------------------------------------------

Request = tuple[str, str, dict[str, Any] | None]


def sort_name(sort: str) -> str:
    return f"list_sort_{sort.lstrip('-')}_{'desc' if sort.startswith('-') else 'asc'}"


def read_plan(history: History) -> dict[str, Request]:
    """The room page's reads and the bulk dry run, by operation name."""
    tasks = f"{API}/rooms/{history.room}/tasks"

    def listing(**params: str) -> Request:
        query = urlencode({"view": "summary", "limit": str(PAGE), **params})
        return ("GET", f"{tasks}?{query}", None)

    worker = str(history.workers[0])
    narrow = {"status": "failed", "worker_id": worker, "q": "disk"}
    return {
        "list_default": listing(),
        "list_status": listing(status="failed,cancelled"),
        "list_job": listing(job=history.job_name),
        "list_submitter": listing(submitted_by=str(history.users[-1])),
        "list_worker": listing(worker_id=worker),
        "search": listing(q="disk"),
        **{sort_name(sort): listing(sort=sort) for sort in SORTS if sort != DEFAULT_SORT},
        **{
            f"stats_{window}": ("GET", f"{API}/rooms/{history.room}/stats?window={window}", None)
            for window in ("15m", "1h", "24h")
        },
        "bulk_dry_run": (
            "POST",
            f"{tasks}/bulk",
            {"action": "rerun", "filter": narrow, "dry_run": True},
        ),
    }


def hot_plan(history: History) -> Iterator[tuple[str, Any]]:
    """Submit, claim and read, each a function of the sample's number giving its request."""
    submit = f"{API}/rooms/{history.room}/tasks/{history.job_name}"
    claim = {"worker_id": history.worker_id}
    ids = history.read_ids or [new_id()]
    yield "submit", lambda n: ("POST", submit, {"payload": {"angle": n}})
    yield "claim", lambda n: ("POST", f"{API}/tasks/claim", claim)
    yield "task_read", lambda n: ("GET", f"{API}/tasks/{ids[n % len(ids)]}", None)


def counted_of(operation: str, reply: Any) -> int | None:
    if not isinstance(reply, dict):
        return None
    if operation == "claim" and reply.get("task") is None:
        raise BenchError("a claim found no task although submits queued some")
    value = reply.get("total", reply.get("matched"))
    return value if isinstance(value, int) else None


async def time_operation(
    client: httpx.AsyncClient, operation: str, request: Any, samples: int, budget: float
) -> tuple[list[float], int | None]:
    """``samples`` timed requests (after ``WARMUP`` untimed), fewer once ``budget`` seconds
    have gone (at least ``MIN_SAMPLES``); the durations and what the last answer counted."""
    for n in range(WARMUP):
        await call(client, *request(-1 - n))
    timings: list[float] = []
    counted = None
    began = time.perf_counter()
    for n in range(samples):
        if n >= MIN_SAMPLES and time.perf_counter() - began > budget:
            break
        reply, elapsed = await call(client, *request(n))
        timings.append(elapsed)
        counted = counted_of(operation, reply)
    return timings, counted


def latency_fields(timings: list[float]) -> dict[str, Any]:
    return {
        "samples": len(timings),
        "p50_ms": ms(percentile(timings, 50)),
        "p95_ms": ms(percentile(timings, 95)),
        "p99_ms": ms(percentile(timings, 99)),
        "max_ms": ms(max(timings, default=None)),
    }


def goal_of(operation: str) -> str:
    if operation in HOT_OPERATIONS:
        return f"p95 <= {RATIO_GOAL} x smallest"
    return f"p95 <= {LIST_GOAL_MS:g} ms"


def judged(row: dict[str, Any], smallest: dict[str, Any] | None) -> dict[str, Any]:
    """``row`` with its ratios to the smallest size's row and whether it meets its goal."""
    for key in ("p50_ms", "p95_ms"):
        ours, theirs = row.get(key), (smallest or {}).get(key)
        ratio = round(ours / theirs, 2) if ours is not None and theirs else None
        row[f"ratio_{key[:3]}"] = ratio
    p95 = row.get("p95_ms")
    if row["operation"] in HOT_OPERATIONS:
        ratio = row["ratio_p95"]
        row["meets_goal"] = None if ratio is None or smallest is row else ratio <= RATIO_GOAL
    else:
        row["meets_goal"] = None if p95 is None else p95 <= LIST_GOAL_MS
    return row


async def measure_size(
    client: httpx.AsyncClient,
    engine: str,
    history: History,
    args: argparse.Namespace,
    smallest: dict[str, dict[str, Any]],
) -> list[dict[str, Any]]:
    """Every operation at the history's current size, one row each."""
    rows = []
    operations: list[tuple[str, Any]] = list(hot_plan(history))
    operations += [(name, lambda n, r=req: r) for name, req in read_plan(history).items()]
    for operation, request in operations:
        row = base_row(
            "history", engine, tasks=history.seeded, operation=operation, goal=goal_of(operation)
        )
        try:
            timings, counted = await time_operation(
                client, operation, request, args.history_samples, args.history_op_seconds
            )
        except (BenchError, httpx.HTTPError) as exc:
            row.update(latency_fields([]), counted=None, error=f"{type(exc).__name__}: {exc}")
        else:
            row.update(latency_fields(timings), counted=counted, error=None)
        smallest.setdefault(operation, row)
        row["load_avg_1m"] = load_average()
        rows.append(emit(judged(row, smallest[operation])))
    return rows


# -- history: the purge --------------------------------------------------------------------


async def sweeper_counts(client: httpx.AsyncClient) -> tuple[int, int]:
    """The sweeper's cycles and the tasks they purged, from the hub's ``/metrics``."""
    text = (await client.get("/metrics")).text
    counts = [pattern.search(text) for pattern in (SWEEPS, PURGED)]
    runs, purged = (int(float(match.group(1))) if match else 0 for match in counts)
    return runs, purged


async def measure_purge(
    target: Target, engine: str, history: History, args: argparse.Namespace, before: dict[str, Any]
) -> dict[str, Any]:
    """Watch the sweeper purge while submitting and claiming; the ``purge`` row."""
    timings: dict[str, list[tuple[float, float]]] = {"submit": [], "claim": []}
    submit = f"{API}/rooms/{history.room}/tasks/{history.job_name}"
    claim = {"worker_id": history.worker_id}
    stop = asyncio.Event()

    async def hot_path() -> None:
        async with new_client(target) as client:
            while not stop.is_set():
                _reply, elapsed = await call(client, "POST", submit, {"payload": {}})
                timings["submit"].append((time.perf_counter(), elapsed))
                reply, elapsed = await call(client, "POST", f"{API}/tasks/claim", claim)
                timings["claim"].append((time.perf_counter(), elapsed))
                if reply.get("task") is None:
                    raise BenchError("a claim found no task during the purge")

    began = time.perf_counter()
    last_growth, purged, runs_then = began, 0, 0
    async with new_client(target) as client, new_client(target) as beats:
        await call(client, "PATCH", f"{API}/workers/{history.worker_id}")
        beat = asyncio.ensure_future(heartbeat(beats, [history.worker_id]))
        loop = asyncio.ensure_future(hot_path())
        try:
            while time.perf_counter() - began < args.history_purge_seconds and not loop.done():
                await asyncio.sleep(0.5)
                runs, now_purged = await sweeper_counts(client)
                if now_purged > purged:
                    purged, last_growth, runs_then = now_purged, time.perf_counter(), runs
                elif purged and runs > runs_then:
                    break  # a whole cycle since the last one that purged found nothing left
        finally:
            stop.set()
            beat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(loop, 30)
    active = last_growth - began
    during = {
        kind: [elapsed for at, elapsed in values if at <= last_growth or not purged]
        for kind, values in timings.items()
    }
    row = base_row(
        "history",
        engine,
        tasks=history.seeded,
        operation="purge",
        purged=purged,
        purge_seconds=round(active, 2),
        purge_tasks_per_s=round(purged / active, 1) if purged and active > 0 else None,
        retention_days=args.history_retention_days,
        sweeper_interval_s=args.history_purge_interval,
    )
    for kind, values in during.items():
        p95 = ms(percentile(values, 95))
        base = before.get(kind, {}).get("p95_ms")
        row[f"{kind}_samples"] = len(values)
        row[f"{kind}_p95_ms"] = p95
        row[f"{kind}_p95_ratio"] = round(p95 / base, 2) if p95 is not None and base else None
    row["load_avg_1m"] = load_average()
    row["error"] = None if purged else "nothing was purged"
    return row


# -- history: one engine -------------------------------------------------------------------


async def storage_row(
    target: Target, engine: str, history: History, added: int, seed_s: float, vacuum_s: float | None
) -> dict[str, Any]:
    """Bytes on disk per task at the history's size, and what seeding it took."""
    storage = await disk_bytes(target)
    return base_row(
        "history",
        engine,
        tasks=history.seeded,
        operation="storage",
        disk_bytes=storage,
        bytes_per_task=round(storage / max(history.seeded, 1), 1),
        seed_s=round(seed_s, 1),
        seed_rows_per_s=round(added / seed_s) if seed_s else None,
        vacuum_s=None if vacuum_s is None else round(vacuum_s, 1),
        error=None,
    )


async def grow_and_measure(
    target: Target, engine: str, sizes: list[int], args: argparse.Namespace
) -> tuple[History, list[dict[str, Any]]]:
    """Register the rooms, then seed up to each size in turn and measure there; the history
    and the rows (the last size's last)."""
    rows: list[dict[str, Any]] = []
    smallest: dict[str, dict[str, Any]] = {}
    async with new_client(target) as client, new_client(target) as beats:
        history = await register_history(client, args.history_rooms, args.history_room_share)
        beat = asyncio.ensure_future(heartbeat(beats, [history.worker_id]))
        try:
            for size in sorted(set(sizes)):
                log(f"[scale history {engine}] seeding up to {size:,} tasks ...")
                added, seed_s, vacuum_s = await seed_history(
                    target, history, size, args.history_days
                )
                rows.append(
                    emit(await storage_row(target, engine, history, added, seed_s, vacuum_s))
                )
                log(f"[scale history {engine}] measuring at {history.seeded:,} tasks ...")
                rows += await measure_size(client, engine, history, args, smallest)
        finally:
            beat.cancel()
    return history, rows


async def history_engine(
    engine: str, sizes: list[int], options: TargetOptions, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """Seed and measure each size in turn on one database (retention off), then the purge
    on the same database (the hub started again, retention on)."""
    off = {"TASKHUB_TASK_RETENTION_SECONDS": "0"}
    retention = {
        "TASKHUB_TASK_RETENTION_SECONDS": str(args.history_retention_days * 86400),
        "TASKHUB_SWEEPER_INTERVAL_SECONDS": str(args.history_purge_interval),
    }
    async with fresh_database(engine, options) as url:
        async with serve_hub(engine, url, options, f"history-{engine}", off) as target:
            history, rows = await grow_and_measure(target, engine, sizes, args)
        if args.history_purge_seconds > 0:
            last = {row["operation"]: row for row in rows if row["tasks"] == history.seeded}
            log(f"[scale history {engine}] purging ...")
            async with serve_hub(engine, url, options, f"purge-{engine}", retention) as target:
                rows.append(emit(await measure_purge(target, engine, history, args, last)))
    return rows


# -- soak ----------------------------------------------------------------------------------


@asynccontextmanager
async def soak_worker(
    target: Target, room: str, concurrency: int, workdir: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """One ``taskhub worker`` process serving the no-op job in ``room``, registered and
    ready; stopped (SIGTERM: it drains and leaves) after."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHUB_")}
    env.update(TASKHUB_URL=target.base_url, TASKHUB_TOKEN=target.token, PYTHONUNBUFFERED="1")
    argv = [sys.executable, "-m", "taskhub.cli", "worker", SOAK_JOB, "--room", room]
    argv += ["--concurrency", str(concurrency)]
    log_path = workdir / f"soak-worker-{room}.log"
    with log_path.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=REPO_ROOT, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=out
        )
    try:
        async with new_client(target) as client, asyncio.timeout(WORKER_READY_SECONDS):
            while True:
                if process.returncode is not None:
                    raise TargetError(f"the soak's worker exited with {process.returncode}")
                jobs, _elapsed = await call(client, "GET", f"{API}/rooms/{room}/jobs")
                if any(item.get("workers") for item in jobs.get("items", [])):
                    break
                await asyncio.sleep(0.2)
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), WORKER_STOP_SECONDS)
            except TimeoutError:
                process.kill()
                await process.wait()


def rss_mb(pid: int) -> float | None:
    """A process's resident set (``VmRSS``) in MB, from ``/proc``."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
    return round(int(match.group(1)) / 1024, 1) if match else None


def open_fds(pid: int) -> int | None:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


@dataclass
class Soak:
    """The soak's progress: tasks handed out and done, the current slice's latencies."""

    engine: str
    pid: int
    tasks: int
    every: int
    started: int = 0
    done: int = 0
    slice_latencies: list[float] = field(default_factory=list)
    slice_began: float = field(default_factory=time.perf_counter)
    rows: list[dict[str, Any]] = field(default_factory=list)

    def take(self) -> bool:
        """Whether a loop may submit another task."""
        if self.started >= self.tasks:
            return False
        self.started += 1
        return True

    def finished(self, latency: float) -> None:
        self.done += 1
        self.slice_latencies.append(latency)
        if self.done % self.every == 0 or self.done == self.tasks:
            self.sample()

    def sample(self) -> None:
        now = time.perf_counter()
        latencies, self.slice_latencies = self.slice_latencies, []
        seconds, self.slice_began = now - self.slice_began, now
        row = base_row(
            "soak",
            self.engine,
            operation="slice",
            slice=len(self.rows) + 1,
            tasks_done=self.done,
            rss_mb=rss_mb(self.pid),
            open_fds=open_fds(self.pid),
            samples=len(latencies),
            p50_ms=ms(percentile(latencies, 50)),
            p95_ms=ms(percentile(latencies, 95)),
            tasks_per_s=round(len(latencies) / seconds, 1) if seconds > 0 else None,
            load_avg_1m=load_average(),
            error=None,
        )
        self.rows.append(emit(row))


def change_pct(first: float | None, last: float | None) -> float | None:
    if first is None or last is None or not first:
        return None
    return round((last - first) / first * 100, 1)


def soak_summary(engine: str, slices: list[dict[str, Any]], tasks: int) -> dict[str, Any]:
    """The first slice after warm-up (the second; the first if there is one) against the
    last: RSS growth and p95 change, and whether both meet their goals."""
    first = slices[1] if len(slices) > 2 else slices[0]
    last = slices[-1]
    rss = change_pct(first["rss_mb"], last["rss_mb"])
    p95 = change_pct(first["p95_ms"], last["p95_ms"])
    meets = None if rss is None or p95 is None else rss <= SOAK_RSS_GOAL_PCT
    if meets is not None and p95 is not None:
        meets = meets and abs(p95) <= SOAK_P95_GOAL_PCT
    return base_row(
        "soak",
        engine,
        operation="summary",
        tasks=tasks,
        first_slice=first["slice"],
        last_slice=last["slice"],
        rss_first_mb=first["rss_mb"],
        rss_last_mb=last["rss_mb"],
        rss_growth_pct=rss,
        fds_first=first["open_fds"],
        fds_last=last["open_fds"],
        p95_first_ms=first["p95_ms"],
        p95_last_ms=last["p95_ms"],
        p95_change_pct=p95,
        goal=f"RSS +{SOAK_RSS_GOAL_PCT:g} % at most, p95 within {SOAK_P95_GOAL_PCT:g} %",
        meets_goal=meets,
        error=None,
    )


async def soak_loop(target: Target, room: str, soak: Soak) -> None:
    """Submit a task, wait until it has completed, again, while tasks are left."""
    submit = f"{API}/rooms/{room}/tasks/{room}:{CATEGORY}:Noop"
    wait = {"Prefer": f"wait={SOAK_WAIT_SECONDS}"}
    async with new_client(target) as client:
        while soak.take():
            began = time.perf_counter()
            task, _elapsed = await call(client, "POST", submit, {"payload": {}})
            response = await client.get(f"{API}/tasks/{task['id']}", headers=wait)
            if response.is_error or response.json().get("status") != "completed":
                raise BenchError(f"task {task['id']} did not complete: {response.text[:300]}")
            soak.finished(time.perf_counter() - began)


async def soak_engine(
    engine: str, options: TargetOptions, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """One hub, one worker process, ``--soak-tasks`` tasks back to back."""
    room = f"soak-{secrets.token_hex(3)}"
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(fresh_database(engine, options))
        target = await stack.enter_async_context(
            serve_hub(engine, url, options, f"soak-{engine}", {})
        )
        assert target.pid is not None
        await stack.enter_async_context(
            soak_worker(target, room, args.soak_concurrency, options.workdir)
        )
        log(f"[scale soak {engine}] {args.soak_tasks:,} tasks ...")
        soak = Soak(engine, target.pid, args.soak_tasks, args.soak_every)
        loops = [soak_loop(target, room, soak) for _ in range(args.soak_concurrency)]
        running = [asyncio.ensure_future(loop) for loop in loops]
        try:
            await asyncio.gather(*running)
        finally:  # one loop failed: the others stop too
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
    return [*soak.rows, emit(soak_summary(engine, soak.rows, soak.done))]


# -- the dimensions ------------------------------------------------------------------------


async def run_async(
    options: TargetOptions, args: argparse.Namespace, results: Results
) -> list[dict[str, Any]]:
    """The dimensions of ``args.dimensions`` that are these (history, soak) on each of
    ``args.engines``, appended to ``results`` as they come (each emitted); a failure
    becomes an error row and the others still run. Returns ``results``."""
    for dimension in (d for d in DIMENSIONS if d in args.dimensions):
        for engine in (e for e in args.engines if e in ENGINES):
            try:
                if dimension == "history":
                    sizes = (
                        args.history_sizes if engine == "sqlite" else args.history_postgres_sizes
                    )
                    results += await history_engine(engine, sizes, options, args)
                else:
                    results += await soak_engine(engine, options, args)
            except RUN_FAILURES as exc:
                log(f"[scale {dimension} {engine}] failed: {exc}")
                results.append(emit(error_row(dimension, engine, exc)))
    return results


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``run_async`` in an event loop of its own, with the run's own scratch directory (and
    PostgreSQL templates, dropped after); the rows."""
    results: Results = []

    async def work() -> None:
        cancel_on_termination()
        async with scratch_options(args, "scale-history") as options:
            await run_async(options, args, results)

    asyncio.run(work())
    return results


# -- the tables ----------------------------------------------------------------------------


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown tables of the history's operations, its storage and purge, and the soak."""
    ours = [r for r in rows if r.get("scenario") == SCENARIO and r.get("dimension") in DIMENSIONS]
    history = [r for r in ours if r["dimension"] == "history"]
    operations = [r for r in history if r["operation"] not in ("storage", "purge", "error")]
    storage = [r for r in history if r["operation"] == "storage"]
    purges = [r for r in history if r["operation"] == "purge"]
    slices = [r for r in ours if r["dimension"] == "soak" and r["operation"] == "slice"]
    summaries = [r for r in ours if r["dimension"] == "soak" and r["operation"] == "summary"]
    errors = [r for r in ours if r.get("operation") == "error"]
    parts = []
    if operations:
        headers = ["engine", "tasks", "operation", "samples", "p50 ms", "p95 ms"]
        headers += ["p95 x smallest", "goal", "meets", "counted"]
        parts.append(
            markdown_table(
                headers,
                [
                    [
                        r["engine"],
                        f"{r['tasks']:,}",
                        r["operation"] + (" (failed)" if r.get("error") else ""),
                        r["samples"],
                        r["p50_ms"],
                        r["p95_ms"],
                        r["ratio_p95"],
                        r["goal"],
                        r["meets_goal"],
                        r["counted"],
                    ]
                    for r in operations
                ],
                left=3,
            )
        )
    if storage:
        headers = ["engine", "tasks", "bytes/task", "disk MB", "seed s", "rows/s", "vacuum s"]
        parts.append(
            markdown_table(
                headers,
                [
                    [
                        r["engine"],
                        f"{r['tasks']:,}",
                        r["bytes_per_task"],
                        round(r["disk_bytes"] / 1e6, 1),
                        r["seed_s"],
                        r["seed_rows_per_s"],
                        r["vacuum_s"],
                    ]
                    for r in storage
                ],
                left=2,
            )
        )
    if purges:
        headers = ["engine", "tasks", "purged", "tasks/s", "submit p95 ms", "x before"]
        headers += ["claim p95 ms", "x before"]
        parts.append(
            markdown_table(
                headers,
                [
                    [
                        r["engine"],
                        f"{r['tasks']:,}",
                        r.get("purged"),
                        r.get("purge_tasks_per_s"),
                        r.get("submit_p95_ms"),
                        r.get("submit_p95_ratio"),
                        r.get("claim_p95_ms"),
                        r.get("claim_p95_ratio"),
                    ]
                    for r in purges
                ],
                left=2,
            )
        )
    if slices:
        headers = ["engine", "tasks done", "RSS MB", "open fds", "p50 ms", "p95 ms", "tasks/s"]
        parts.append(
            markdown_table(
                headers,
                [
                    [
                        r["engine"],
                        f"{r['tasks_done']:,}",
                        r["rss_mb"],
                        r["open_fds"],
                        r["p50_ms"],
                        r["p95_ms"],
                        r["tasks_per_s"],
                    ]
                    for r in slices
                ],
                left=1,
            )
        )
    if summaries:
        headers = ["engine", "slices", "RSS growth %", "fds", "p95 change %", "meets goal"]
        parts.append(
            markdown_table(
                headers,
                [
                    [
                        r["engine"],
                        f"{r['first_slice']} -> {r['last_slice']}",
                        r["rss_growth_pct"],
                        f"{r['fds_first']} -> {r['fds_last']}",
                        r["p95_change_pct"],
                        r["meets_goal"],
                    ]
                    for r in summaries
                ],
                left=2,
            )
        )
    parts += [f"{r['dimension']} {r['engine']} failed: {r['error']}" for r in errors]
    return "\n\n".join(parts)


# -- on its own ----------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser("scale_history", __doc__)
    parser.add_argument(
        "--engines", type=choices(ENGINES, "engines"), default=list(ENGINES), help="sqlite,postgres"
    )
    parser.add_argument(
        "--dimensions",
        type=choices(DIMENSIONS, "dimensions"),
        default=list(DIMENSIONS),
        help="history,soak",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    check_arguments(parser, args)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    async def work(options: TargetOptions, results: Results) -> None:
        await run_async(options, args, results)

    return run_command(args, "scale-history", work, table)


if __name__ == "__main__":
    sys.exit(main())
