"""The scale benchmark's *workers* dimension (``python -m benchmarks scale --dimensions
workers``): many worker sockets holding push grants on one hub.

Per engine, a fresh hub; ``--workers`` workers registered over REST
(``PUT /rooms/{room}/jobs``, each making a worker of the admin user) spread over ``--jobs``
jobs of one room; ``--clients`` processes (``benchmarks/apps/scale_sockets.py``) hold a
raw Socket.IO session per worker that joins its job's room (``join_job_room``) and grants
the hub one slot (``worker_ready``, docs/protocol.md "Task push"). Then a submitter sends
``--worker-rate`` tasks a second for ``--worker-seconds``, round-robin over the jobs; each
task the hub pushes (``task_pushed``) is completed over the socket (``task_update``) and
its slot granted again. No worker claims over HTTP: every task runs by push. Once every
task has ended: submit → running p50/p95 from the hub's own timestamps (``created_at``,
``started_at``), and the hub's CPU (and PostgreSQL's) per task from the first submit to
the last task's end.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from datetime import datetime
from typing import Any

import httpx

from benchmarks.harness.report import emit, load_average, log, markdown_table
from benchmarks.harness.scale_clients import ClientProcesses, split
from benchmarks.harness.sockets import websocket_url
from benchmarks.harness.targets import TargetOptions, hub_target
from benchmarks.scenarios.scale_sockets import (
    cpu_readings,
    delta,
    http_client,
    hub_env,
    per_event,
    spread,
)

ROOM = "scale-workers"
REGISTER_CONCURRENCY = 8
DRAIN_SECONDS = 60.0  # after the last submit, for every task to end
DRAIN_POLL_SECONDS = 0.1
UNFINISHED = "pending,claimed,running"
PAGE = 500


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("workers dimension")
    group.add_argument("--workers", type=int, default=1000, help="worker sockets")
    group.add_argument("--jobs", type=int, default=100, help="jobs the workers serve")
    group.add_argument("--worker-rate", type=float, default=50.0, help="tasks submitted a second")
    group.add_argument("--worker-seconds", type=float, default=10.0, help="how long")


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if min(args.workers, args.jobs) < 1 or args.jobs > args.workers:
        parser.error("--workers and --jobs must be at least 1, --jobs at most --workers")
    if args.worker_rate <= 0 or args.worker_seconds <= 0:
        parser.error("--worker-rate and --worker-seconds must be positive")


async def register_workers(http: httpx.AsyncClient, workers: int, jobs: int) -> list[list[str]]:
    """``workers`` new workers, worker ``i`` registered for job ``i % jobs``: ``[worker_id,
    job's full name]`` each. Each job's first registration (which makes the job) comes
    before the others of it."""
    gate = asyncio.Semaphore(REGISTER_CONCURRENCY)

    async def register(index: int) -> list[str]:
        body = {"category": "modifiers", "name": f"J{index % jobs:04d}", "schema": {}}
        async with gate:
            response = await http.put(f"/rooms/{ROOM}/jobs", json=body)
        response.raise_for_status()
        job = response.json()
        return [job["worker_id"], job["full_name"]]

    first = await asyncio.gather(*(register(index) for index in range(jobs)))
    return first + await asyncio.gather(*(register(index) for index in range(jobs, workers)))


async def submit_at_rate(
    http: httpx.AsyncClient, jobs: list[str], rate: float, seconds: float
) -> int:
    """Submit ``rate`` tasks a second for ``seconds`` (each on its schedule, whatever the
    answers to the earlier ones take), round-robin over ``jobs``; how many."""
    count = max(1, round(rate * seconds))
    loop = asyncio.get_running_loop()
    start = loop.time()

    async def submit(index: int) -> None:
        await asyncio.sleep(max(0.0, start + index / rate - loop.time()))
        job = jobs[index % len(jobs)]
        response = await http.post(f"/rooms/{ROOM}/tasks/{job}", json={"payload": {}})
        response.raise_for_status()

    await asyncio.gather(*(submit(index) for index in range(count)))
    return count


async def unfinished(http: httpx.AsyncClient) -> int:
    response = await http.get(f"/rooms/{ROOM}/tasks", params={"status": UNFINISHED, "limit": 0})
    response.raise_for_status()
    total: int = response.json()["total"]
    return total


async def drain(http: httpx.AsyncClient) -> int:
    """Wait (at most ``DRAIN_SECONDS``) until every task of the room has ended; how many
    have not."""
    for _ in range(round(DRAIN_SECONDS / DRAIN_POLL_SECONDS)):
        if not await unfinished(http):
            return 0
        await asyncio.sleep(DRAIN_POLL_SECONDS)
    return await unfinished(http)


async def room_tasks(http: httpx.AsyncClient) -> list[dict[str, Any]]:
    """Every task of the room (summaries, page by page)."""
    tasks: list[dict[str, Any]] = []
    while True:
        params: dict[str, str | int] = {"view": "summary", "limit": PAGE, "offset": len(tasks)}
        response = await http.get(f"/rooms/{ROOM}/tasks", params=params)
        response.raise_for_status()
        page = response.json()["items"]
        tasks += page
        if len(page) < PAGE:
            return tasks


def start_delays(tasks: list[dict[str, Any]]) -> list[float]:
    """Seconds from each started task's ``created_at`` to its ``started_at`` (the hub's)."""
    return [
        (
            datetime.fromisoformat(task["started_at"]) - datetime.fromisoformat(task["created_at"])
        ).total_seconds()
        for task in tasks
        if task["started_at"] is not None
    ]


async def measure(args: argparse.Namespace, options: TargetOptions, engine: str) -> dict[str, Any]:
    """One row: a fresh hub, its workers connected and granting, the submits, the drain."""
    async with (
        hub_target(engine, options, extra_env=hub_env(args.workers)) as target,
        http_client(target) as http,
    ):
        began = time.monotonic()
        workers = await register_workers(http, args.workers, args.jobs)
        register_s = time.monotonic() - began
        jobs = sorted({job for _, job in workers})
        url = websocket_url(target.base_url)
        plans = [
            {"mode": "workers", "urls": [url], "workers": workers[first : first + count]}
            for first, count in split(len(workers), args.clients)
        ]
        began = time.monotonic()
        async with ClientProcesses(plans, target.token, options.workdir) as clients:
            connect_s = time.monotonic() - began
            before = cpu_readings([target], target.database_pid, clients)
            count = await submit_at_rate(http, jobs, args.worker_rate, args.worker_seconds)
            left = await drain(http)
            after = cpu_readings([target], target.database_pid, clients)
            closing = await clients.close()
        tasks = await room_tasks(http)
    hub_used, database_used, clients_used = (
        delta(start, end) for start, end in zip(before, after, strict=True)
    )
    return {
        "register_s": round(register_s, 2),
        "connect_s": round(connect_s, 2),
        "tasks": count,
        "completed": sum(task["status"] == "completed" for task in tasks),
        "unfinished": left,
        "pushed": sum(report["pushed"] for report in closing),
        "failed_updates": sum(report["failed_updates"] for report in closing),
        **spread("running", start_delays(tasks)),
        "hub_cpu_ms_per_task": per_event(hub_used, count),
        "database_cpu_ms_per_task": per_event(database_used, count),
        "clients_cpu_ms_per_task": per_event(clients_used, count),
    }


async def run(
    args: argparse.Namespace, options: TargetOptions, results: list[dict[str, Any]]
) -> None:
    """A row per engine, emitted as soon as it is measured (a failed one with its
    ``error``)."""
    for engine in args.engines:
        row: dict[str, Any] = {
            "scenario": "scale",
            "dimension": "workers",
            "engine": engine,
            "workers": args.workers,
            "jobs": args.jobs,
            "clients": min(args.clients, args.workers),
            "rate": args.worker_rate,
            "seconds": args.worker_seconds,
        }
        log(f"scale workers: {engine}, {args.workers} workers over {args.jobs} jobs")
        try:
            row |= await measure(args, options, engine)
            row |= {"load_avg_1m": load_average(), "error": None}
        except Exception as exc:  # reported; the other engines still run
            row["error"] = repr(exc)
        results.append(emit(row))


def table(rows: list[dict[str, Any]]) -> str:
    headers = (
        "engine",
        "workers",
        "jobs",
        "tasks/s",
        "tasks",
        "completed",
        "submit→running p50 ms",
        "p95 ms",
        "hub CPU ms/task",
        "db CPU ms/task",
    )
    lines = [
        (
            r["engine"],
            r["workers"],
            r["jobs"],
            f"{r['rate']:g}",
            r["tasks"],
            r["completed"],
            r["running_p50_ms"],
            r["running_p95_ms"],
            r["hub_cpu_ms_per_task"],
            r["database_cpu_ms_per_task"],
        )
        for r in rows
        if r["dimension"] == "workers" and not r.get("error")
    ]
    return markdown_table(headers, lines)
