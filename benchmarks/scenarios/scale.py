"""The hub at scale: many sockets, many workers, a long history, a long run.

Dimensions (``--dimensions``, all by default), each on ``--engines`` (SQLite, PostgreSQL):

- ``sockets``: 1,000, 5,000 and 10,000 browser-like sockets spread over 100 rooms, and
  1,000 in one room, held by several client processes; on one hub and on two PostgreSQL
  replicas sharing Redis: the hub's RSS per socket, its CPU per published event, and a
  ``task_status_event``'s latency to the first, the last and every watcher of its room
  (``benchmarks/scenarios/scale_sockets.py``);
- ``workers``: 1,000 worker sockets holding push grants over 100 jobs, tasks submitted at
  a fixed rate: submit → running p50/p95 (the hub's timestamps) and the hub's CPU per task
  (``benchmarks/scenarios/scale_workers.py``);
- ``history``, ``soak``: a hub holding millions of terminal tasks, and a million tasks
  through one hub back to back (``benchmarks/scenarios/scale_history.py``, loaded only
  when one of them is asked for).

Goals: an idle connected socket costs the hub at most 30 KB of RSS; an event to 1,000
watchers of one room reaches the last within 100 ms p95 on one replica.

    .venv/bin/python -m benchmarks scale                                 # full sizes
    .venv/bin/python -m benchmarks scale --dimensions sockets --engines sqlite \\
        --sockets 200 --one-room 100 --replicas 1 --events 10
    .venv/bin/python -m benchmarks scale --dimensions workers --workers 200 --jobs 20
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from types import ModuleType

from benchmarks.harness.cli import (
    choices,
    raise_fd_limit,
    run_main,
    scenario_parser,
    scratch_options,
)
from benchmarks.harness.report import Results, log
from benchmarks.harness.targets import TargetOptions
from benchmarks.scenarios import scale_sockets, scale_workers

DIMENSIONS = ("sockets", "workers", "history", "soak")
OURS = ("sockets", "workers")  # the rest are scale_history's
ENGINES = ("sqlite", "postgres")
HISTORY_MODULE = "benchmarks.scenarios.scale_history"
FD_HEADROOM = 1024


def _dimensions_asked(argv: list[str]) -> set[str]:
    """The names in ``--dimensions`` as given, read before the whole command line can be
    (the history dimensions' options exist only once their module is loaded); the full
    parser refuses unknown ones."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--dimensions", default=",".join(DIMENSIONS))
    known, _rest = early.parse_known_args(argv)
    return {name.strip() for name in known.dimensions.split(",")}


def history_module(argv: list[str]) -> ModuleType | None:
    """``scale_history``, if a history dimension is asked for (or the help)."""
    wanted = _dimensions_asked(argv) & (set(DIMENSIONS) - set(OURS))
    if wanted or {"-h", "--help"} & set(argv):
        return importlib.import_module(HISTORY_MODULE)
    return None


def parse_args(argv: list[str], history: ModuleType | None) -> argparse.Namespace:
    parser = scenario_parser("scale", __doc__)
    parser.add_argument(
        "--dimensions",
        type=choices(DIMENSIONS, "dimensions"),
        default=list(DIMENSIONS),
        help="comma-separated: " + ", ".join(DIMENSIONS),
    )
    parser.add_argument(
        "--engines",
        type=choices(ENGINES, "engines"),
        default=list(ENGINES),
        help="comma-separated: " + ", ".join(ENGINES),
    )
    scale_sockets.add_arguments(parser)
    scale_workers.add_arguments(parser)
    if history is not None:
        history.add_arguments(parser)
    args = parser.parse_args(argv)
    scale_sockets.check_arguments(parser, args)
    scale_workers.check_arguments(parser, args)
    if history is not None:
        history.check_arguments(parser, args)
    return args


def table(rows: Results) -> str:
    """The sockets and workers tables (those with rows)."""
    tables = []
    if any(row.get("dimension") == "sockets" and not row.get("error") for row in rows):
        tables.append(scale_sockets.table(rows))
    if any(row.get("dimension") == "workers" and not row.get("error") for row in rows):
        tables.append(scale_workers.table(rows))
    return "\n\n".join(tables)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    history = history_module(argv)
    args = parse_args(argv, history)
    rows: Results = []
    code = 0
    if set(args.dimensions) & set(OURS):
        # The hubs and the client processes inherit it: a file per socket, and headroom.
        raise_fd_limit(max(scale_sockets.largest(args), args.workers) + FD_HEADROOM)
        code = run_main(lambda results: _ours(args, results, rows), table)
    if history is not None and code != 130 and set(args.dimensions) - set(OURS):
        try:
            theirs = history.run(args)
        except KeyboardInterrupt:
            log("interrupted: servers stopped")
            code = 130
        else:
            rows += theirs
            log("\n" + history.table(theirs))
    if args.json_out is not None:
        args.json_out.write_text("".join(json.dumps(row) + "\n" for row in rows))
    if code:
        return code
    return 1 if any(row.get("error") for row in rows) else 0


async def _ours(args: argparse.Namespace, results: Results, rows: Results) -> None:
    """The sockets and workers dimensions, in a scratch directory of the run's own; every
    row also kept in ``rows`` (for ``--json-out``, with the history dimensions')."""
    try:
        async with scratch_options(args, "scale") as options:
            await _dimensions(args, options, results)
    finally:
        rows += results


async def _dimensions(args: argparse.Namespace, options: TargetOptions, results: Results) -> None:
    if "sockets" in args.dimensions:
        await scale_sockets.run(args, options, results)
    if "workers" in args.dimensions:
        await scale_workers.run(args, options, results)


if __name__ == "__main__":
    raise SystemExit(main())
