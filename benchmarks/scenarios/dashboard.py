"""Room dashboard latency: the dashboard's reads over a room of N tasks.

For each target (SQLite, PostgreSQL), a fresh hub: register three jobs of one room (and
their worker) over REST, seed four submitters and N tasks of the room into the hub's
database (the store's bulk seeding) — spread over the last 24 hours, mixed statuses (10 %
pending, 2 % running, 70 % completed, 10 % failed with an error text, 8 % cancelled), waits
of 0.1-10 s and run times of 0.5-60 s (PostgreSQL: then ``VACUUM ANALYZE``) — and time
``--samples`` sequential requests of each kind:

- ``stats_15m``, ``stats_1h``, ``stats_24h``: ``GET /rooms/{room}/stats?window=…``,
- ``list_summary``: the first page (50) of ``GET /rooms/{room}/tasks?view=summary``,
- ``list_sorted``: the same sorted by ``-completed_at``,
- ``list_status``: filtered by ``status=failed,cancelled``,
- ``list_job``: filtered by one job,
- ``list_q``: searching ``q=disk`` (the errors of a fifth of the failed tasks),
- ``bulk_dry_run``: ``POST /rooms/{room}/tasks/bulk`` cancelling the pending tasks by
  filter, ``dry_run``.

One JSON line per (target, request) on stdout; a markdown table on stderr.

    .venv/bin/python -m benchmarks dashboard
    .venv/bin/python -m benchmarks dashboard --targets sqlite --tasks 5000 --samples 20
"""

from __future__ import annotations

import argparse
import random
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlencode
from uuid import UUID

import httpx

from benchmarks.harness.cli import choices, run_command, scenario_parser
from benchmarks.harness.client import API, RUN_FAILURES, BenchError, call, new_client
from benchmarks.harness.report import (
    Results,
    emit,
    latency_summary,
    load_average,
    log,
    markdown_table,
)
from benchmarks.harness.seeding import hub_database, seed_tasks, seed_users, token_user
from benchmarks.harness.targets import FACTORIES, Target, TargetOptions
from taskhub.clock import new_id, utcnow
from taskhub.store.seeding import SeedTask, refresh_statistics

TARGETS = ("sqlite", "postgres")
REQUESTS = (
    "stats_15m",
    "stats_1h",
    "stats_24h",
    "list_summary",
    "list_sorted",
    "list_status",
    "list_job",
    "list_q",
    "bulk_dry_run",
)
JOBS = ("Rotate", "Scale", "Smooth")
SUBMITTERS = 4
WARMUP = 2
# (status, share): the rest of 1.0 is completed.
MIX = (("pending", 0.10), ("running", 0.02), ("failed", 0.10), ("cancelled", 0.08))


def status_of(draw: float) -> str:
    for status, share in MIX:
        if draw < share:
            return status
        draw -= share
    return "completed"


def room_tasks(
    jobs: list[UUID], room: str, users: list[UUID], worker: UUID, count: int, now: datetime
) -> Iterator[SeedTask]:
    """``count`` tasks of the room over the last 24 hours, oldest first."""
    draws = random.Random(42)
    span = timedelta(hours=24) / max(count, 1)
    start = now - timedelta(hours=24)
    for index in range(count):
        created = start + span * index
        status = status_of(draws.random())
        wait = timedelta(seconds=draws.uniform(0.1, 10))
        run = timedelta(seconds=draws.uniform(0.5, 60))
        started = created + wait if status in ("running", "completed", "failed") else None
        ended = None
        if status in ("completed", "failed"):
            ended = min(created + wait + run, now)
        elif status == "cancelled":
            ended = created + wait
        error = None
        if status == "failed":
            error = "Disk full on node7" if index % 5 == 0 else "ValueError: bad angle"
        yield SeedTask(
            id=new_id(),
            job_id=jobs[index % len(jobs)],
            room_id=room,
            created_at=created,
            submitted_by=users[index % len(users)],
            status=status,
            payload={"angle": index, "note": f"sample {index}"},
            started_at=started,
            completed_at=ended,
            worker_id=worker if started is not None else None,
            error=error,
            attempt=0 if status == "pending" else 1,
        )


async def seed_room(target: Target, jobs: list[UUID], room: str, worker: UUID, count: int) -> float:
    """Seed the submitters and ``count`` tasks into the running hub's database; the seconds
    it took."""
    started = time.perf_counter()
    async with hub_database(target) as db:
        admin = await token_user(db, target.token)
        others = [(new_id(), f"{room}-user{n}") for n in range(SUBMITTERS - 1)]
        await seed_users(db, others, utcnow())
        submitters = [user for user in (admin,) if user is not None] + [u for u, _ in others]
        await seed_tasks(db, room_tasks(jobs, room, submitters, worker, count, utcnow()))
        await refresh_statistics(db, vacuum=True)
    return time.perf_counter() - started


def plan(room: str, job_name: str) -> dict[str, tuple[str, str, dict[str, Any] | None]]:
    tasks = f"{API}/rooms/{room}/tasks"

    def listing(**params: str) -> tuple[str, str, None]:
        return ("GET", f"{tasks}?{urlencode({'view': 'summary', **params})}", None)

    dry_run = {"action": "cancel", "filter": {"status": "pending"}, "dry_run": True}
    return {
        **{
            f"stats_{window}": ("GET", f"{API}/rooms/{room}/stats?window={window}", None)
            for window in ("15m", "1h", "24h")
        },
        "list_summary": listing(),
        "list_sorted": listing(sort="-completed_at"),
        "list_status": listing(status="failed,cancelled"),
        "list_job": listing(job=job_name),
        "list_q": listing(q="disk"),
        "bulk_dry_run": ("POST", f"{tasks}/bulk", dry_run),
    }


async def measure(
    client: httpx.AsyncClient, room: str, job_name: str, samples: int
) -> dict[str, tuple[list[float], int | None]]:
    """Each request's durations, and what its answer counted (``total``/``matched``)."""
    measured: dict[str, tuple[list[float], int | None]] = {}
    for kind, (method, path, body) in plan(room, job_name).items():
        for _ in range(WARMUP):
            await call(client, method, path, body)
        timings: list[float] = []
        reply: Any = None
        for _ in range(samples):
            reply, elapsed = await call(client, method, path, body)
            timings.append(elapsed)
        counted = None
        if isinstance(reply, dict):
            counted = reply.get("total", reply.get("matched"))
            if kind.startswith("stats_") and not reply.get("buckets"):
                raise BenchError(f"{kind} answered no buckets")
        measured[kind] = (timings, counted)
    return measured


def result_line(
    target: str,
    tasks: int,
    kind: str,
    timings: list[float],
    counted: int | None,
    seed_s: float | None,
    error: str | None = None,
) -> dict[str, Any]:
    """One (target, request) JSON line."""
    return {
        "scenario": "dashboard",
        "target": target,
        "tasks": tasks,
        "request": kind,
        **latency_summary(timings),
        "counted": counted,
        "seed_s": None if seed_s is None else round(seed_s, 2),
        "load_avg_1m": load_average(),
        "error": error,
    }


async def run_dashboard(target: Target, tasks: int, samples: int) -> list[dict[str, Any]]:
    """Register, seed and measure one room on a running hub."""
    room = f"dash-{uuid.uuid4().hex[:8]}"
    async with new_client(target) as client:
        worker_id: str | None = None
        jobs: list[UUID] = []
        for name in JOBS:
            body: dict[str, Any] = {"category": "modifiers", "name": name, "schema": {}}
            if worker_id is not None:
                body["worker_id"] = worker_id
            job, _elapsed = await call(client, "PUT", f"{API}/rooms/{room}/jobs", body)
            worker_id = job["worker_id"]
            jobs.append(UUID(job["id"]))
        assert worker_id is not None
        log(f"[dashboard {target.name} N={tasks}] seeding ...")
        seed_s = await seed_room(target, jobs, room, UUID(worker_id), tasks)
        measured = await measure(client, room, f"{room}:modifiers:{JOBS[0]}", samples)
    return [
        emit(result_line(target.name, tasks, kind, timings, counted, seed_s))
        for kind, (timings, counted) in measured.items()
    ]


async def bench_dashboard(
    options: TargetOptions, targets: list[str], tasks: int, samples: int
) -> list[dict[str, Any]]:
    """Every target, each on a freshly started hub; a failure becomes error lines."""
    results: list[dict[str, Any]] = []
    for name in targets:
        try:
            async with FACTORIES[name](options) as target:
                results += await run_dashboard(target, tasks, samples)
        except RUN_FAILURES as exc:
            error = f"{type(exc).__name__}: {exc}"
            log(f"[dashboard {name} N={tasks}] failed: {error}")
            results += [
                emit(result_line(name, tasks, kind, [], None, None, error)) for kind in REQUESTS
            ]
    return results


def table(results: list[dict[str, Any]]) -> str:
    headers = ["target", "request", "tasks", "samples", "p50 ms", "p90 ms", "p99 ms"]
    headers += ["max ms", "counted"]
    rows = [
        [
            r["target"],
            r["request"] + (" (failed)" if r["error"] else ""),
            r["tasks"],
            r["samples"],
            r["p50_ms"],
            r["p90_ms"],
            r["p99_ms"],
            r["max_ms"],
            r["counted"],
        ]
        for r in results
    ]
    return markdown_table(headers, rows, left=2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser("dashboard", __doc__)
    parser.add_argument(
        "--targets", type=choices(TARGETS, "targets"), default=list(TARGETS), help="sqlite,postgres"
    )
    parser.add_argument("--tasks", type=int, default=50_000, help="tasks in the room")
    parser.add_argument("--samples", type=int, default=50, help="requests of each kind")
    args = parser.parse_args(argv)
    if args.samples < 1 or args.tasks < 1:
        parser.error("--samples and --tasks must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    async def work(options: TargetOptions, results: Results) -> None:
        results += await bench_dashboard(options, args.targets, args.tasks, args.samples)

    return run_command(args, "dashboard", work, table)


if __name__ == "__main__":
    sys.exit(main())
