"""Task logs: how many lines a real ``taskhub worker`` gets into the hub, and what logging
costs task throughput.

For each target (SQLite by default; ``--targets sqlite,postgres``), a fresh hub and one
``taskhub worker benchmarks.apps.logs_worker:LogFlood benchmarks.apps.logs_worker:Noop``
process
(``--concurrency`` tasks at once, Socket.IO on). Then ``--rounds`` interleaved rounds (the
order of the modes alternates from round to round), each of:

- ``flood``: ``--concurrency`` ``LogFlood`` tasks at once, each calling ``ctx.log`` as fast
  as it can for ``--flood-seconds`` (a sync run: the worker's loop ships meanwhile). From
  the hub's answers: lines logged (the runs' results), lines stored (read back page by
  page), lines dropped (the ``dropped`` marks), and lines stored per second of the flood
  (first ``started_at`` to last ``completed_at``); the SDK ships at most 200 lines a second
  per task while a run goes on, and keeps its newest 1,000 for the end;
- ``noop-0`` and ``noop-N``: ``--tasks`` no-op tasks submitted as fast as they go
  (``--submitters`` at once), logging no line / ``--lines`` lines each through
  ``ctx.log``; tasks/s from the hub's own timestamps, first ``created_at`` to last
  ``completed_at``.

One JSON line per measurement on stdout; markdown tables (every round, then the medians
over the rounds, with the logging mode's throughput as a share of the silent one) on
stderr.

    .venv/bin/python -m benchmarks logs                       # 3 rounds, 1,000 tasks
    .venv/bin/python -m benchmarks logs --quick               # a smoke run
    .venv/bin/python -m benchmarks logs --targets postgres --rounds 5 --lines 50
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness.cli import choices, run_command, scenario_parser
from benchmarks.harness.client import API, RUN_FAILURES
from benchmarks.harness.report import Results, emit, load_average, log, markdown_table
from benchmarks.harness.targets import FACTORIES, REPO_ROOT, Target, TargetError, TargetOptions

TARGETS = ("sqlite", "postgres")
MODES = ("flood", "noop-0", "noop-N")
READY_SECONDS = 60.0
WAIT_SECONDS = 120.0
QUICK = {"tasks": 40, "rounds": 1, "flood_seconds": 0.5, "lines": 10}


@dataclass(frozen=True)
class Sizes:
    tasks: int
    lines: int
    rounds: int
    concurrency: int
    flood_seconds: float
    submitters: int


def _client(target: Target) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=target.base_url,
        headers={"Authorization": f"Bearer {target.token}"},
        timeout=60.0,
        trust_env=False,
    )


@asynccontextmanager
async def worker_process(
    target: Target, room: str, concurrency: int, workdir: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """One ``taskhub worker`` serving both jobs, registered and ready; SIGTERM after."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHUB_")}
    env.update(TASKHUB_URL=target.base_url, TASKHUB_TOKEN=target.token, PYTHONUNBUFFERED="1")
    argv = [sys.executable, "-m", "taskhub.cli", "worker"]
    argv += ["benchmarks.apps.logs_worker:LogFlood", "benchmarks.apps.logs_worker:Noop"]
    argv += ["--room", room, "--concurrency", str(concurrency), "--log-level", "warning"]
    log_path = workdir / f"worker-{target.name}.log"
    with log_path.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=out
        )
    try:
        async with _client(target) as http, asyncio.timeout(READY_SECONDS):
            while True:
                if process.returncode is not None:
                    tail = log_path.read_text(errors="replace")[-2000:]
                    raise TargetError(f"the worker exited:\n{tail}")
                response = await http.get(f"{API}/rooms/{room}/jobs")
                items = response.json().get("items", []) if response.status_code == 200 else []
                mine = [item for item in items if item["full_name"].startswith(f"{room}:")]
                if len(mine) == 2 and all(item.get("workers") for item in mine):
                    break
                await asyncio.sleep(0.2)
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), 30)
            except TimeoutError:
                process.kill()
                await process.wait()


def _moment(text: str) -> datetime:
    return datetime.fromisoformat(text)


async def _submit_and_wait(
    http: httpx.AsyncClient, room: str, job: str, payloads: list[dict[str, Any]], parallel: int
) -> list[dict[str, Any]]:
    """Submit every payload (``parallel`` at once), then long-poll each task to its end."""
    gate = asyncio.Semaphore(parallel)

    async def submit(payload: dict[str, Any]) -> str:
        async with gate:
            response = await http.post(
                f"{API}/rooms/{room}/tasks/{room}:modifiers:{job}", json={"payload": payload}
            )
            if response.status_code != 202:
                raise TargetError(f"submit answered {response.status_code}: {response.text}")
            return str(response.json()["id"])

    async def ended(task_id: str) -> dict[str, Any]:
        async with gate:
            async with asyncio.timeout(WAIT_SECONDS):
                while True:
                    response = await http.get(
                        f"{API}/tasks/{task_id}", headers={"Prefer": "wait=30"}
                    )
                    task: dict[str, Any] = response.json()
                    if task.get("status") in ("completed", "failed", "cancelled"):
                        return task

    ids = await asyncio.gather(*(submit(payload) for payload in payloads))
    tasks = await asyncio.gather(*(ended(task_id) for task_id in ids))
    failed = [task for task in tasks if task["status"] != "completed"]
    if failed:
        raise TargetError(f"{len(failed)} task(s) did not complete: {failed[0].get('error')}")
    return tasks


def _span(tasks: list[dict[str, Any]], start: str) -> float:
    first = min(_moment(task[start]) for task in tasks)
    last = max(_moment(task["completed_at"]) for task in tasks)
    return max((last - first).total_seconds(), 1e-6)


async def _stored(http: httpx.AsyncClient, task_id: str) -> tuple[int, int]:
    """Lines stored for the task and the drops marked on them."""
    stored = dropped = after = 0
    while True:
        response = await http.get(
            f"{API}/tasks/{task_id}/logs", params={"after": after, "limit": 1000}
        )
        page = response.json()
        if page["next"] is None:
            return stored, dropped
        stored += len(page["items"])
        dropped += sum(item["dropped"] for item in page["items"])
        after = page["next"]


async def flood(target: Target, room: str, sizes: Sizes, round_no: int) -> dict[str, Any]:
    async with _client(target) as http:
        payloads = [{"seconds": sizes.flood_seconds}] * sizes.concurrency
        tasks = await _submit_and_wait(http, room, "LogFlood", payloads, sizes.concurrency)
        logged = sum(int(task["result"]) for task in tasks)
        counts = await asyncio.gather(*(_stored(http, task["id"]) for task in tasks))
    stored = sum(count[0] for count in counts)
    dropped = sum(count[1] for count in counts)
    seconds = _span(tasks, "started_at")
    return {
        "scenario": "logs",
        "target": target.name,
        "round": round_no,
        "mode": "flood",
        "tasks": len(tasks),
        "logged": logged,
        "stored": stored,
        "dropped": dropped,
        "accounted": stored + dropped == logged,
        "logged_per_s": round(logged / seconds, 1),
        "stored_per_s": round(stored / seconds, 1),
        "seconds": round(seconds, 3),
        "load_avg_1m": load_average(),
        "error": None,
    }


async def noop(
    target: Target, room: str, sizes: Sizes, lines: int, round_no: int
) -> dict[str, Any]:
    mode = "noop-0" if lines == 0 else "noop-N"
    async with _client(target) as http:
        payloads = [{"lines": lines}] * sizes.tasks
        tasks = await _submit_and_wait(http, room, "Noop", payloads, sizes.submitters)
        sample = await _stored(http, tasks[-1]["id"])
    seconds = _span(tasks, "created_at")
    return {
        "scenario": "logs",
        "target": target.name,
        "round": round_no,
        "mode": mode,
        "lines_per_task": lines,
        "tasks": len(tasks),
        "tasks_per_s": round(len(tasks) / seconds, 1),
        "lines_of_last_task": sample[0],
        "seconds": round(seconds, 3),
        "load_avg_1m": load_average(),
        "error": None,
    }


async def run_target(target: Target, sizes: Sizes, workdir: Path) -> list[dict[str, Any]]:
    room = f"logs-{uuid.uuid4().hex[:8]}"
    results: list[dict[str, Any]] = []
    async with worker_process(target, room, sizes.concurrency, workdir):
        for round_no in range(1, sizes.rounds + 1):
            order = list(MODES) if round_no % 2 else list(reversed(MODES))
            for mode in order:
                if mode == "flood":
                    result = await flood(target, room, sizes, round_no)
                else:
                    lines = 0 if mode == "noop-0" else sizes.lines
                    result = await noop(target, room, sizes, lines, round_no)
                results.append(emit(result))
    return results


def error_line(target: str, error: str) -> dict[str, Any]:
    return {"scenario": "logs", "target": target, "mode": None, "error": error}


async def bench_logs(
    options: TargetOptions, targets: list[str], sizes: Sizes
) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    for name in targets:
        try:
            async with FACTORIES[name](options) as target:
                results += await run_target(target, sizes, options.workdir)
        except (*RUN_FAILURES, TimeoutError) as exc:
            error = f"{type(exc).__name__}: {exc}"
            log(f"[logs {name}] failed: {error}")
            results.append(emit(error_line(name, error)))
    return results


def _median(results: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in results if r.get(key) is not None]
    return round(statistics.median(values), 1) if values else None


def table(results: Results) -> str:
    ok = [r for r in results if not r.get("error")]
    rounds = markdown_table(
        ["target", "round", "mode", "tasks", "tasks/s", "logged", "stored", "dropped", "stored/s"],
        [
            [
                r["target"],
                r["round"],
                r["mode"] if r["mode"] != "noop-N" else f"noop-{r['lines_per_task']}",
                r["tasks"],
                r.get("tasks_per_s"),
                r.get("logged"),
                r.get("stored"),
                r.get("dropped"),
                r.get("stored_per_s"),
            ]
            for r in ok
        ],
        left=3,
    )
    medians = []
    for name in dict.fromkeys(r["target"] for r in ok):
        mine = [r for r in ok if r["target"] == name]
        silent = _median([r for r in mine if r["mode"] == "noop-0"], "tasks_per_s")
        logging_ = _median([r for r in mine if r["mode"] == "noop-N"], "tasks_per_s")
        lines = next((r["lines_per_task"] for r in mine if r["mode"] == "noop-N"), None)
        share = f"{100 * logging_ / silent:.0f}%" if silent and logging_ else None
        floods = [r for r in mine if r["mode"] == "flood"]
        medians.append(
            [
                name,
                len({r["round"] for r in mine}),
                silent,
                logging_,
                lines,
                share,
                _median(floods, "logged_per_s"),
                _median(floods, "stored_per_s"),
                _median(floods, "dropped"),
            ]
        )
    summary = markdown_table(
        [
            "target",
            "rounds",
            "no-op tasks/s, silent",
            "tasks/s, logging",
            "lines/task",
            "share",
            "flood logged/s",
            "flood stored/s",
            "flood dropped",
        ],
        medians,
    )
    failed = [f"- {r['target']}: {r['error']}" for r in results if r.get("error")]
    return "\n\n".join([rounds, "Medians over the rounds:", summary, *failed])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser("logs", __doc__)
    parser.add_argument(
        "--targets", type=choices(TARGETS, "targets"), default=["sqlite"], help="sqlite,postgres"
    )
    parser.add_argument("--tasks", type=int, default=1000, help="no-op tasks per measurement")
    parser.add_argument("--lines", type=int, default=10, help="lines per task when logging")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4, help="the worker's, and floods")
    parser.add_argument("--flood-seconds", type=float, default=5.0)
    parser.add_argument("--submitters", type=int, default=16, help="submits at once")
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes")
    args = parser.parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    if min(args.tasks, args.rounds, args.concurrency, args.submitters) < 1 or args.lines < 1:
        parser.error("--tasks, --lines, --rounds, --concurrency, --submitters must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = Sizes(
        args.tasks, args.lines, args.rounds, args.concurrency, args.flood_seconds, args.submitters
    )

    async def work(options: TargetOptions, results: Results) -> None:
        results += await bench_logs(options, args.targets, sizes)

    return run_command(args, "logs", work, table)


if __name__ == "__main__":
    sys.exit(main())
