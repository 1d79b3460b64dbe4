"""Request latency with a deep queue: B pending tasks of one job.

For each target (SQLite, PostgreSQL) and each backlog size B, a fresh hub: register one job
(and its worker) over REST, seed B pending tasks of it into the hub's database (the store's
bulk seeding; PostgreSQL: then ``VACUUM ANALYZE task, task_queue_bucket``), and time
``--samples`` sequential requests of each kind, in this order:

- ``get_back``: ``GET /tasks/{id}`` of the newest seeded task (``queue_position`` = B, the
  most expensive read),
- ``get_front``: ``GET /tasks/{id}`` of the oldest one (``queue_position`` = 1),
- ``submit``: ``POST /rooms/{room}/tasks/{job}`` (the answer carries the new task's
  position, B + 1 onwards),
- ``claim``: ``POST /tasks/claim`` for the job's worker (each takes the front task, so the
  queue stays B deep).

With ``--delayed D``, D delayed tasks of the job (due an hour ahead, submitted before the
backlog) are seeded first: they stand in the queue order before none of the backlog, yet
a claim, a submit and a read must not step over them.

One JSON line per (target, B, request) on stdout; a markdown table on stderr.

    .venv/bin/python -m benchmarks backlog
    .venv/bin/python -m benchmarks backlog --targets sqlite --backlog 10000 --samples 50
    .venv/bin/python -m benchmarks backlog --backlog 1000 --delayed 100000 --samples 50
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

import httpx

from benchmarks.harness.cli import choices, csv_ints, run_command, scenario_parser
from benchmarks.harness.client import (
    API,
    JOB,
    RUN_FAILURES,
    BenchError,
    call,
    heartbeat,
    new_client,
)
from benchmarks.harness.report import (
    Results,
    emit,
    latency_summary,
    load_average,
    log,
    markdown_table,
)
from benchmarks.harness.seeding import SEED_STEP, hub_database, seed_tasks, token_user
from benchmarks.harness.targets import FACTORIES, Target, TargetOptions
from taskhub.clock import new_id, utcnow
from taskhub.store.seeding import SeedTask, refresh_statistics

TARGETS = ("sqlite", "postgres")
REQUESTS = ("get_back", "get_front", "submit", "claim")
WARMUP_READS = 3


@dataclass(frozen=True)
class Queue:
    """The job under test and the ends of its seeded backlog."""

    room: str
    job_name: str
    worker_id: str
    front: UUID
    back: UUID


@dataclass(frozen=True)
class Seeded:
    """What seeding did: the backlog's ends, its duration and the maintenance that followed."""

    front: UUID
    back: UUID
    seconds: float
    maintenance: str | None


def backlog_tasks(
    job_id: UUID, room: str, user_id: UUID | None, count: int, delayed: int = 0
) -> Iterator[SeedTask]:
    """``delayed`` waiting tasks (due an hour ahead), then ``count`` pending tasks, oldest
    first, all created before now."""
    now = utcnow()
    start = now - SEED_STEP * (delayed + count + 1000)
    due = now + timedelta(hours=1)
    for index in range(delayed + count):
        yield SeedTask(
            id=new_id(),
            job_id=job_id,
            room_id=room,
            created_at=start + SEED_STEP * index,
            submitted_by=user_id,
            run_at=due if index < delayed else None,
        )


async def seed_backlog(
    target: Target, job_id: UUID, room: str, count: int, vacuum: bool, delayed: int = 0
) -> Seeded:
    """Seed ``count`` pending tasks of the job (after ``delayed`` waiting ones) into the
    running hub's database."""
    if count < 1:
        raise BenchError("the backlog must hold at least one task")
    started = time.perf_counter()
    async with hub_database(target) as db:
        user_id = await token_user(db, target.token)
        tasks = list(backlog_tasks(job_id, room, user_id, count, delayed))
        await seed_tasks(db, tasks)
        maintenance = await refresh_statistics(db, vacuum=vacuum)
    front, back = tasks[delayed].id, tasks[-1].id
    return Seeded(front, back, time.perf_counter() - started, maintenance)


async def timed(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None, samples: int
) -> tuple[list[float], list[Any]]:
    """``samples`` sequential requests; their durations and decoded answers."""
    timings, replies = [], []
    for _ in range(samples):
        reply, elapsed = await call(client, method, path, body)
        timings.append(elapsed)
        replies.append(reply)
    return timings, replies


async def measure(
    client: httpx.AsyncClient, queue: Queue, samples: int
) -> dict[str, tuple[list[float], int | None]]:
    """Each request kind's durations and the ``queue_position`` its first answer reported."""
    back, front = f"{API}/tasks/{queue.back}", f"{API}/tasks/{queue.front}"
    for path in (back, front):
        await timed(client, "GET", path, None, WARMUP_READS)
    submit = f"{API}/rooms/{queue.room}/tasks/{queue.job_name}"
    claim = {"worker_id": queue.worker_id}
    plan: dict[str, tuple[str, str, dict[str, Any] | None]] = {
        "get_back": ("GET", back, None),
        "get_front": ("GET", front, None),
        "submit": ("POST", submit, {"payload": {}}),
        "claim": ("POST", f"{API}/tasks/claim", claim),
    }
    measured: dict[str, tuple[list[float], int | None]] = {}
    for kind, (method, path, body) in plan.items():
        timings, replies = await timed(client, method, path, body, samples)
        if kind == "claim":
            if any(reply["task"] is None for reply in replies):
                raise BenchError("a claim found no task although the backlog is deep")
            measured[kind] = (timings, None)
        else:
            measured[kind] = (timings, replies[0]["queue_position"])
    return measured


def result_line(
    target: str,
    backlog: int,
    kind: str,
    timings: list[float],
    position: int | None,
    seeded: Seeded | None,
    error: str | None = None,
    delayed: int = 0,
) -> dict[str, Any]:
    """One (target, B, request) JSON line."""
    return {
        "scenario": "backlog",
        "target": target,
        "backlog": backlog,
        "delayed": delayed,
        "request": kind,
        **latency_summary(timings),
        "queue_position": position,
        "seed_s": None if seeded is None else round(seeded.seconds, 2),
        "maintenance": None if seeded is None else seeded.maintenance,
        "load_avg_1m": load_average(),
        "error": error,
    }


async def run_backlog(
    target: Target, backlog: int, samples: int, vacuum: bool, delayed: int = 0
) -> list[dict[str, Any]]:
    """Register, seed and measure one backlog on a running hub."""
    room = f"backlog-{uuid.uuid4().hex[:8]}"
    job_name = f"{room}:{JOB['category']}:{JOB['name']}"
    async with new_client(target) as client, new_client(target) as beats:
        job, _elapsed = await call(client, "PUT", f"{API}/rooms/{room}/jobs", JOB)
        beat = asyncio.create_task(heartbeat(beats, [job["worker_id"]]))
        try:
            log(f"[backlog {target.name} B={backlog} D={delayed}] seeding ...")
            job_id = UUID(job["id"])
            seeded = await seed_backlog(target, job_id, room, backlog, vacuum, delayed)
            queue = Queue(room, job_name, job["worker_id"], seeded.front, seeded.back)
            measured = await measure(client, queue, samples)
        finally:
            beat.cancel()
    return [
        emit(result_line(target.name, backlog, kind, timings, position, seeded, None, delayed))
        for kind, (timings, position) in measured.items()
    ]


async def bench_backlog(
    options: TargetOptions,
    targets: list[str],
    backlogs: list[int],
    samples: int,
    *,
    vacuum: bool = True,
    delayed: int = 0,
) -> list[dict[str, Any]]:
    """Every (target, B), each on a freshly started hub; a failure becomes error lines."""
    results: list[dict[str, Any]] = []
    for name in targets:
        for backlog in backlogs:
            try:
                async with FACTORIES[name](options) as target:
                    results += await run_backlog(target, backlog, samples, vacuum, delayed)
            except RUN_FAILURES as exc:
                error = f"{type(exc).__name__}: {exc}"
                log(f"[backlog {name} B={backlog}] failed: {error}")
                results += [
                    emit(result_line(name, backlog, kind, [], None, None, error, delayed))
                    for kind in REQUESTS
                ]
    return results


def table(results: list[dict[str, Any]]) -> str:
    headers = ["target", "request", "backlog", "delayed", "samples", "p50 ms", "p90 ms"]
    headers += ["p99 ms"]
    headers += ["max ms", "queue_position"]
    rows = [
        [
            r["target"],
            r["request"] + (" (failed)" if r["error"] else ""),
            r["backlog"],
            r["delayed"],
            r["samples"],
            r["p50_ms"],
            r["p90_ms"],
            r["p99_ms"],
            r["max_ms"],
            r["queue_position"],
        ]
        for r in results
    ]
    return markdown_table(headers, rows, left=2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser("backlog", __doc__)
    parser.add_argument(
        "--targets", type=choices(TARGETS, "targets"), default=list(TARGETS), help="sqlite,postgres"
    )
    parser.add_argument("--backlog", type=csv_ints, default=[10_000, 50_000], help="B values")
    parser.add_argument("--samples", type=int, default=200, help="requests of each kind")
    parser.add_argument(
        "--delayed", type=int, default=0, help="delayed tasks seeded before the backlog"
    )
    parser.add_argument(
        "--no-vacuum", action="store_true", help="PostgreSQL: ANALYZE only after seeding"
    )
    args = parser.parse_args(argv)
    if args.samples < 1:
        parser.error("--samples must be positive")
    if args.delayed < 0:
        parser.error("--delayed must not be negative")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    async def work(options: TargetOptions, results: Results) -> None:
        results += await bench_backlog(
            options,
            args.targets,
            args.backlog,
            args.samples,
            vacuum=not args.no_vacuum,
            delayed=args.delayed,
        )

    return run_command(args, "backlog", work, table)


if __name__ == "__main__":
    sys.exit(main())
