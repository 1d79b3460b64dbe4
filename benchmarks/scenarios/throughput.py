"""End-to-end throughput: submitters and HTTP workers racing through one job's tasks.

For each target and each worker count W: register one job with W workers, then run
``--submitters`` coroutines that submit ``--tasks`` tasks between them while the W workers
loop claim -> PATCH running -> PATCH completed (sleeping ``--backoff-ms`` after an empty
claim) until every task is completed. One JSON line per (target, W) goes to stdout; progress
and a markdown summary table go to stderr.

``--rounds K`` repeats it all K times, the targets interleaved (ceiling, SQLite, PostgreSQL,
ceiling, …), so that a busy moment of a shared machine weighs on one round of every target
rather than on all of one; each run is then compared with the ceiling of its own round, and a
second table gives the medians over the rounds.

    .venv/bin/python -m benchmarks throughput --tasks 2000 --workers 1,4,16
    .venv/bin/python -m benchmarks throughput --workers 4 --rounds 5 --targets ceiling,sqlite
    .venv/bin/python -m benchmarks throughput --url http://127.0.0.1:8000 --token "$TOKEN"
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from collections import defaultdict
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any

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
    register_workers,
    remove_workers,
)
from benchmarks.harness.cpu import CPU_KEYS, cpu_seconds, cpu_used
from benchmarks.harness.report import (
    Results,
    emit,
    load_average,
    log,
    markdown_table,
    ms,
    percentile,
)
from benchmarks.harness.targets import (
    ABLATIONS,
    FACTORIES,
    Target,
    TargetError,
    TargetOptions,
    external_target,
    require_local,
)

REQUEST_KINDS = ("submit", "claim", "claim_empty", "running", "completed")


@dataclass(frozen=True)
class Scenario:
    """The load of one run (``backoff`` and ``timeout`` in seconds)."""

    tasks: int
    submitters: int
    backoff: float
    timeout: float


@dataclass(frozen=True)
class Run:
    """One run's fixtures: the job, its workers, and the client for setup and heartbeats."""

    target: Target
    job: str
    worker_ids: list[str]
    setup_client: httpx.AsyncClient


@dataclass
class RunState:
    """What one run measures, keyed by task id; times are ``time.perf_counter()`` seconds."""

    total: int
    submitted_at: dict[str, float] = field(default_factory=dict)
    completed_at: dict[str, float] = field(default_factory=dict)
    timings: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))

    @property
    def done(self) -> bool:
        return len(self.completed_at) >= self.total


async def submitter(target: Target, state: RunState, path: str, count: int) -> None:
    """Submit ``count`` tasks back to back, noting when each submit was answered."""
    async with new_client(target) as client:
        for _ in range(count):
            task, elapsed = await call(client, "POST", path, {"payload": {}})
            state.submitted_at[task["id"]] = time.perf_counter()
            state.timings["submit"].append(elapsed)


async def finish(client: httpx.AsyncClient, state: RunState, task_id: str) -> None:
    """PATCH a claimed task to running, then to completed."""
    for status in ("running", "completed"):
        _task, elapsed = await call(client, "PATCH", f"{API}/tasks/{task_id}", {"status": status})
        state.timings[status].append(elapsed)
    state.completed_at[task_id] = time.perf_counter()


async def worker(target: Target, state: RunState, worker_id: str, backoff: float) -> None:
    """Claim and finish tasks until all of the run's tasks are completed."""
    claim = {"worker_id": worker_id}
    async with new_client(target) as client:
        while not state.done:
            reply, elapsed = await call(client, "POST", f"{API}/tasks/claim", claim)
            if reply["task"] is None:
                state.timings["claim_empty"].append(elapsed)
                await asyncio.sleep(backoff)
                continue
            state.timings["claim"].append(elapsed)
            await finish(client, state, reply["task"]["id"])


def split(total: int, parts: int) -> list[int]:
    """``total`` as ``parts`` near-equal counts."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def drive(run: Run, state: RunState, scenario: Scenario) -> None:
    """Run submitters and workers concurrently until every task is completed."""
    room = run.job.split(":", 1)[0]
    path = f"{API}/rooms/{room}/tasks/{run.job}"
    beat = asyncio.create_task(heartbeat(run.setup_client, run.worker_ids))
    try:
        async with asyncio.TaskGroup() as group:
            for count in split(scenario.tasks, scenario.submitters):
                group.create_task(submitter(run.target, state, path, count))
            for worker_id in run.worker_ids:
                group.create_task(worker(run.target, state, worker_id, scenario.backoff))
    finally:
        beat.cancel()


async def drive_bounded(run: Run, state: RunState, scenario: Scenario) -> str | None:
    """``drive`` within the scenario's time limit; returns an error message or None."""
    error: str | None = None
    try:
        async with asyncio.timeout(scenario.timeout):
            await drive(run, state, scenario)
    except* TimeoutError:
        error = f"timeout after {scenario.timeout:g}s"
    except* (BenchError, httpx.HTTPError) as group:
        error = "; ".join(f"{type(e).__name__}: {e}" for e in group.exceptions[:3])
    return error


async def run_scenario(target: Target, workers: int, scenario: Scenario) -> dict[str, Any]:
    """One (target, W) measurement, in a fresh room."""
    room = f"bench-w{workers}-{uuid.uuid4().hex[:8]}"
    job = f"{room}:{JOB['category']}:{JOB['name']}"
    state = RunState(total=scenario.tasks)
    async with new_client(target) as client:
        run = Run(target, job, await register_workers(client, room, workers), client)
        cpu_before = cpu_seconds(target.pid, target.database_pid)
        start = time.perf_counter()
        try:
            error = await drive_bounded(run, state, scenario)
            end = max(state.completed_at.values(), default=time.perf_counter())
            cpu = cpu_used(cpu_before, cpu_seconds(target.pid, target.database_pid))
        finally:
            await remove_workers(client, run.worker_ids)
    return summarise(target.name, workers, state, end - start, error, cpu)


def summarise(
    target: str,
    workers: int,
    state: RunState,
    seconds: float,
    error: str | None,
    cpu: dict[str, float | None] | None = None,
) -> dict[str, Any]:
    """The run's JSON line."""
    latencies = [
        max(0.0, done - state.submitted_at[task_id])
        for task_id, done in state.completed_at.items()
        if task_id in state.submitted_at
    ]
    completed = len(state.completed_at)
    requests = {
        kind: {
            "count": len(state.timings[kind]),
            "p50_ms": ms(percentile(state.timings[kind], 50)),
            "p99_ms": ms(percentile(state.timings[kind], 99)),
        }
        for kind in REQUEST_KINDS
    }
    return {
        "scenario": "throughput",
        "target": target,
        "workers": workers,
        "tasks": state.total,
        "completed": completed,
        "seconds": round(seconds, 3),
        "tasks_per_s": round(completed / seconds, 1) if seconds > 0 else 0.0,
        "p50_ms": ms(percentile(latencies, 50)),
        "p99_ms": ms(percentile(latencies, 99)),
        "requests": requests,
        **(cpu or dict.fromkeys(CPU_KEYS)),
        "load_avg_1m": load_average(),
        "error": error,
    }


def failed(target: str, workers: int, tasks: int, error: str) -> dict[str, Any]:
    """The result line of a run that could not take place."""
    return summarise(target, workers, RunState(total=tasks), 0.0, error)


def report(result: dict[str, Any]) -> None:
    """The run's JSON line on stdout and a progress line on stderr."""
    emit(result)
    log(
        f"[{result['target']} W={result['workers']}] {result['completed']}/{result['tasks']} "
        f"tasks, {result['tasks_per_s']} tasks/s, p50 {result['p50_ms']} ms, "
        f"p99 {result['p99_ms']} ms" + (f", ERROR: {result['error']}" if result["error"] else "")
    )


async def bench_target(
    name: str,
    opened: AbstractAsyncContextManager[Target],
    workers: list[int],
    scenario: Scenario,
    round_number: int = 1,
) -> list[dict[str, Any]]:
    """Start one target and measure it at every worker count (in round ``round_number``)."""
    results: list[dict[str, Any]] = []

    def add(result: dict[str, Any]) -> None:
        results.append({**result, "round": round_number})
        report(results[-1])

    log(f"starting target {name} (round {round_number}) ...")
    try:
        async with opened as target:
            for count in workers:
                add(await run_scenario(target, count, scenario))
    except RUN_FAILURES as exc:
        log(f"target {name} failed: {exc}")
        for count in workers[len(results) :]:
            add(failed(name, count, scenario.tasks, f"{type(exc).__name__}: {exc}"))
    return results


def ceiling_shares(results: list[dict[str, Any]]) -> list[float | None]:
    """Each run's tasks/s as a percentage of the ceiling's at the same W in the same round
    (None without a successful ceiling run to compare with, or if the run itself failed)."""
    ceiling = {
        (r["round"], r["workers"]): r["tasks_per_s"]
        for r in results
        if r["target"] == "ceiling" and not r["error"]
    }
    shares: list[float | None] = []
    for r in results:
        base = ceiling.get((r["round"], r["workers"]))
        shares.append(None if not base or r["error"] else 100 * r["tasks_per_s"] / base)
    return shares


def cpu_per_task(result: dict[str, Any]) -> str:
    """Client / server / database CPU milliseconds per completed task ("-" where unknown)."""
    done = result["completed"]
    if not done:
        return "n/a"
    return " / ".join(
        "-" if result[key] is None else f"{1000 * result[key] / done:.2f}" for key in CPU_KEYS
    )


def server_cpu_ratio(result: dict[str, Any]) -> float | None:
    """CPU of the server side (server process and database) per CPU second of the client.
    The client does the same work against every target, and a slow or fast spell of the
    machine scales both alike, so this compares targets across runs that wall time cannot."""
    client, server = result["client_cpu_s"], result["server_cpu_s"]
    if not client or server is None or result["error"]:
        return None
    return (server + (result["database_cpu_s"] or 0.0)) / client


def table(results: list[dict[str, Any]]) -> str:
    """The markdown summary, each row also as a share of the ceiling at the same W (and
    round); with several rounds, a second table of medians over the rounds."""
    several = len({r["round"] for r in results}) > 1
    rows = []
    for r, share in zip(results, ceiling_shares(results), strict=True):
        shown = "n/a" if share is None else f"{share:.0f}%"
        if r["error"]:
            shown += " (failed)"
        row = [r["target"], r["workers"], r["tasks_per_s"], r["p50_ms"], r["p99_ms"], shown]
        row.append(cpu_per_task(r))
        rows.append([r["round"], *row] if several else row)
    headers = ["target", "W", "tasks/s", "p50 ms", "p99 ms", "% of ceiling"]
    headers.append("CPU ms/task client / server / db")
    runs = markdown_table(["round", *headers] if several else headers, rows)
    return runs + "\n\n" + median_table(results) if several else runs


def median_table(results: list[dict[str, Any]]) -> str:
    """Per target and W, over the rounds: the median tasks/s, and the median, lowest and
    highest share of the same round's ceiling (failed runs left out)."""
    grouped: dict[tuple[str, int], list[tuple[dict[str, Any], float | None]]] = defaultdict(list)
    for r, share in zip(results, ceiling_shares(results), strict=True):
        if not r["error"]:
            grouped[(r["target"], r["workers"])].append((r, share))
    rows = []
    for (target, workers), runs in grouped.items():
        rates = [r["tasks_per_s"] for r, _share in runs]
        shares = [share for _r, share in runs if share is not None]
        ratios = [ratio for r, _share in runs if (ratio := server_cpu_ratio(r)) is not None]
        spread = f"{min(shares):.0f} to {max(shares):.0f}%" if shares else "n/a"
        median_share = f"{statistics.median(shares):.0f}%" if shares else "n/a"
        median_ratio = f"{statistics.median(ratios):.2f}" if ratios else "n/a"
        median_rate = round(statistics.median(rates), 1)
        rows.append([target, workers, len(runs), median_rate, median_share, spread, median_ratio])
    headers = ["target", "W", "rounds", "median tasks/s", "median % of ceiling", "range"]
    headers.append("median server ÷ client CPU")
    return markdown_table(headers, rows)


THROUGHPUT_TARGETS = {**FACTORIES, **ABLATIONS}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser("throughput", __doc__, server_log_level="info")
    parser.add_argument("--tasks", type=int, default=2000, help="tasks per run (N)")
    parser.add_argument("--workers", type=csv_ints, default=[1, 4, 16], help="e.g. 1,4,16")
    parser.add_argument("--submitters", type=int, default=4)
    parser.add_argument(
        "--targets",
        type=choices(THROUGHPUT_TARGETS, "targets"),
        default=["ceiling", "sqlite", "postgres"],
        help=f"comma-separated, of {', '.join(THROUGHPUT_TARGETS)}",
    )
    parser.add_argument("--url", help="benchmark a running hub on 127.0.0.1 instead")
    parser.add_argument("--token", default=os.environ.get("TASKHUB_TOKEN"), help="for --url")
    parser.add_argument("--backoff-ms", type=float, default=5.0, help="sleep after empty claim")
    parser.add_argument("--run-timeout", type=float, default=300.0, help="seconds per run")
    parser.add_argument(
        "--rounds", type=int, default=1, help="repeat all runs, targets interleaved; medians"
    )
    parser.add_argument("--access-log", action="store_true", help="servers log every request")
    args = parser.parse_args(argv)
    if args.tasks < 1 or args.submitters < 1 or args.rounds < 1:
        parser.error("--tasks, --submitters and --rounds must be positive")
    if args.url:
        if not args.token:
            parser.error("--url needs --token (or TASKHUB_TOKEN)")
        try:
            require_local(args.url)
        except TargetError as exc:
            parser.error(str(exc))
    return args


def planned_targets(
    args: argparse.Namespace, options: TargetOptions
) -> list[tuple[str, AbstractAsyncContextManager[Target]]]:
    """``--targets`` started here; with ``--url``, the running hub replaces sqlite/postgres."""
    names = [n for n in args.targets if n == "ceiling"] if args.url else args.targets
    planned = [(name, THROUGHPUT_TARGETS[name](options)) for name in names]
    if args.url:
        planned.append(("url", external_target(args.url, args.token)))
    return planned


async def bench_throughput(
    options: TargetOptions, names: list[str], workers: list[int], scenario: Scenario
) -> list[dict[str, Any]]:
    """Every (target, W) run of the named targets (started here), in order."""
    results: list[dict[str, Any]] = []
    for name in names:
        results.extend(
            await bench_target(name, THROUGHPUT_TARGETS[name](options), workers, scenario)
        )
    return results


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scenario = Scenario(args.tasks, args.submitters, args.backoff_ms / 1000, args.run_timeout)

    async def work(options: TargetOptions, results: Results) -> None:
        for round_number in range(1, args.rounds + 1):
            for name, opened in planned_targets(args, options):
                results.extend(
                    await bench_target(name, opened, args.workers, scenario, round_number)
                )

    return run_command(args, "throughput", work, table)


if __name__ == "__main__":
    sys.exit(main())
