"""The benchmark suite: several scenarios in one run (``python -m benchmarks``).

    .venv/bin/python -m benchmarks                         # the full run
    .venv/bin/python -m benchmarks --quick                 # small sizes: a smoke run
    .venv/bin/python -m benchmarks --only backlog,roomfanout --targets sqlite
    .venv/bin/python -m benchmarks --json-out results.jsonl
    .venv/bin/python -m benchmarks SCENARIO --help         # one scenario, all its options

Scenarios, in this order: ``throughput`` (end-to-end, W = 1/4/16, on the ceiling app, SQLite
and PostgreSQL), ``longpoll`` (wake latency, one replica and two), ``notify``
(``task_available`` with 1 and 200 sockets), ``fanout`` (``task_available`` to 200 worker
sockets), ``roomfanout`` (``task_status_event`` to 500 room sockets), ``backlog``
(get/submit/claim with 10k and 50k pending tasks, SQLite and PostgreSQL), ``documents``
(requests carrying 0.8 MB payloads and results, pages of them, 250 kB schemas registered at
once, and a bystander's small submits meanwhile; SQLite and PostgreSQL), ``sdk`` (real
worker processes of the SDK and of zndraw-joblib's ``JobManager``, one round), ``dashboard``
(the room dashboard's aggregates, filtered listings and bulk dry run over a room of 50,000
tasks; SQLite and PostgreSQL) and ``fair`` (a ``fair-by-submitter`` job next to a FIFO one:
B's wait behind A's 10,000 tasks, throughput, claims at a depth of 50,000; SQLite and
PostgreSQL). Each result is a JSON line on stdout as soon as it is measured; the markdown
tables (one per family) follow on stderr at the end. A scenario that fails gives an
``error`` line and the run goes on; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.harness.cli import choices, run_command, scenario_parser
from benchmarks.harness.report import Results, emit, log
from benchmarks.harness.targets import FACTORIES, TargetOptions
from benchmarks.scenarios import (
    COMMANDS,
    backlog,
    dashboard,
    documents,
    fair,
    realtime,
    sdk,
    throughput,
)

SCENARIOS = (
    "throughput",
    "longpoll",
    "notify",
    "fanout",
    "roomfanout",
    "backlog",
    "documents",
    "sdk",
    "dashboard",
    "fair",
)


@dataclass(frozen=True)
class Sizes:
    """How big each scenario is."""

    tasks: int  # throughput: tasks per run
    workers: list[int]  # throughput: W values
    runs: int  # real-time: samples per scenario
    notify_sockets: list[int]  # notify; fanout uses the last
    room_sockets: list[int]  # roomfanout
    backlogs: list[int]  # backlog: B values
    samples: int  # backlog: requests of each kind
    documents: documents.Sizes
    dashboard_tasks: int = 50_000  # dashboard: tasks in the room
    dashboard_samples: int = 50  # dashboard: requests of each kind
    fair: fair.Sizes = fair.FULL  # fair: its measures' sizes


FULL = Sizes(
    2000, [1, 4, 16], 30, [1, 200], [500], [10_000, 50_000], 200, documents.Sizes(10, 36_000, 6)
)
QUICK = Sizes(
    200, [1, 4, 16], 5, [1, 20], [20], [500], 20, documents.Sizes(2, 2_000, 2), 500, 5, fair.QUICK
)

Runner = Callable[[TargetOptions, Sizes, list[str]], Awaitable[Results]]


async def _throughput(options: TargetOptions, sizes: Sizes, targets: list[str]) -> Results:
    scenario = throughput.Scenario(sizes.tasks, 4, 0.005, 300.0)
    return await throughput.bench_throughput(options, targets, sizes.workers, scenario)


def _realtime(name: str) -> Runner:
    async def run(options: TargetOptions, sizes: Sizes, _targets: list[str]) -> Results:
        return await realtime.bench_realtime(
            options, [name], sizes.runs, sizes.notify_sockets, sizes.room_sockets
        )

    return run


async def _backlog(options: TargetOptions, sizes: Sizes, targets: list[str]) -> Results:
    databases = [name for name in targets if name in backlog.TARGETS]
    return await backlog.bench_backlog(options, databases, sizes.backlogs, sizes.samples)


async def _documents(options: TargetOptions, sizes: Sizes, targets: list[str]) -> Results:
    databases = [name for name in targets if name in documents.TARGETS]
    return await documents.bench_documents(options, databases, sizes.documents)


async def _sdk(options: TargetOptions, sizes: Sizes, _targets: list[str]) -> Results:
    """``benchmarks.sdk``, one round of every system (its own sizes, quick or full)."""
    quick = sizes == QUICK
    layouts = sdk.QUICK_LAYOUTS if quick else sdk.DEFAULT_LAYOUTS
    results: Results = []
    await sdk.bench_sdk(
        options,
        list(sdk.SYSTEMS),
        layouts,
        sdk.QUICK if quick else sdk.FULL,
        1,
        sdk.DEFAULT_JOBLIB_POLL,
        sdk.REDIS_URL,
        results,
    )
    return results


async def _dashboard(options: TargetOptions, sizes: Sizes, targets: list[str]) -> Results:
    databases = [name for name in targets if name in dashboard.TARGETS]
    return await dashboard.bench_dashboard(
        options, databases, sizes.dashboard_tasks, sizes.dashboard_samples
    )


async def _fair(options: TargetOptions, sizes: Sizes, targets: list[str]) -> Results:
    databases = [name for name in targets if name in fair.TARGETS]
    return await fair.bench_fair(options, databases, sizes.fair)


RUNNERS: dict[str, Runner] = {
    "throughput": _throughput,
    **{name: _realtime(name) for name in realtime.SCENARIOS},
    "backlog": _backlog,
    "documents": _documents,
    "sdk": _sdk,
    "dashboard": _dashboard,
    "fair": _fair,
}


async def run_scenarios(
    options: TargetOptions, names: list[str], sizes: Sizes, targets: list[str], results: Results
) -> None:
    """The chosen scenarios in order, appending to ``results`` (kept if interrupted); one that
    raises becomes an error line."""
    for name in (n for n in SCENARIOS if n in names):
        log(f"== {name} ==")
        try:
            results += await RUNNERS[name](options, sizes, targets)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # one broken scenario must not hide the others' figures
            log(f"{name} failed: {type(exc).__name__}: {exc}")
            results.append(emit({"scenario": name, "error": f"{type(exc).__name__}: {exc}"}))


def _measured(result: dict[str, Any]) -> bool:
    return "samples" in result or "tasks_per_s" in result


def tables(results: Results) -> str:
    """One markdown table per family of results, then the scenarios that failed outright."""
    measured = [r for r in results if _measured(r)]
    families = [
        ("Throughput", throughput.table, lambda r: r["scenario"] == "throughput"),
        ("Real-time latency", realtime.table, lambda r: r["scenario"] in realtime.SCENARIOS),
        ("Backlog", backlog.table, lambda r: r["scenario"] == "backlog"),
        ("Big documents", documents.table, lambda r: r["scenario"] == "documents"),
        ("SDK workers", sdk.table, lambda r: r["scenario"] == "sdk"),
        ("Room dashboard", dashboard.table, lambda r: r["scenario"] == "dashboard"),
        ("Fair sharing", fair.table, lambda r: r["scenario"] == "fair"),
    ]
    parts = []
    for title, render, belongs in families:
        rows = [r for r in measured if belongs(r)]
        if rows:
            parts.append(f"### {title}\n\n{render(rows)}")
    failed = [r for r in results if not _measured(r)]
    if failed:
        lines = [f"- {r['scenario']}: {r['error']}" for r in failed]
        parts.append("### Failed\n\n" + "\n".join(lines))
    return "\n\n".join(parts)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser("", __doc__)
    parser.epilog = "One scenario alone, with all its options: python -m benchmarks SCENARIO "
    parser.epilog += "--help. Scenarios:\n" + "\n".join(
        f"  {name:<14} {what}" for name, what in COMMANDS.items()
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--only",
        type=choices(SCENARIOS, "scenarios"),
        default=list(SCENARIOS),
        help="comma-separated, of: " + ", ".join(SCENARIOS),
    )
    parser.add_argument(
        "--targets",
        type=choices(FACTORIES, "targets"),
        default=list(FACTORIES),
        help="throughput targets; backlog, documents, dashboard and fair use the databases "
        "among them",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL

    async def work(options: TargetOptions, results: Results) -> None:
        await run_scenarios(options, args.only, sizes, args.targets, results)

    return run_command(args, "bench", work, tables)
