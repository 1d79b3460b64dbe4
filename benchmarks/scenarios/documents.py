"""Requests that carry big payloads, results and schemas, and what they cost the hub's other
clients.

For each target (SQLite, PostgreSQL), a fresh hub, one job (schema ``{}``) and its worker.
``--samples`` times, one after another: submit a task whose payload is ``--points`` 3-D
points (36,000: about 0.8 MB of JSON), claim it, PATCH it to running, report progress,
PATCH it to completed with a result as big, and GET it. Then GET the room's page of those
tasks (limit 500) ``--samples`` times. Then ``--schemas`` registrations of a schema of about
250 kB (some 1.7 s of checking each here) at once. Meanwhile a bystander client submits
small tasks to another job, one after another, from a process of its own
(``benchmarks/apps/bystander.py``): its latency in each phase is what the big requests cost
everyone else (the hub's event loop is shared).

One JSON line per (target, request) on stdout; a markdown table on stderr.

    .venv/bin/python -m benchmarks documents
    .venv/bin/python -m benchmarks documents --targets sqlite --samples 5 --points 10000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson

from benchmarks.apps.bystander import TOKEN_ENV
from benchmarks.harness.cli import choices, run_command, scenario_parser
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
from benchmarks.harness.targets import FACTORIES, Target, TargetOptions

TARGETS = ("sqlite", "postgres")
TASK_REQUESTS = ("submit", "claim", "running", "progress", "completed", "get")
PHASES = ("tasks", "page", "schemas")
REQUESTS = (*TASK_REQUESTS, "page", "register", *(f"bystander during {p}" for p in PHASES))
SCHEMA_PROPERTIES = 3_300  # about 250 kB as compact JSON, within the 256 KiB limit


def points(count: int, seed: int = 0) -> dict[str, Any]:
    return {"points": [[seed + i, i + 0.5, -i] for i in range(count)]}


def big_schema(seed: int) -> dict[str, Any]:
    properties = {
        f"p{seed}_{i}": {"type": "number", "minimum": 0, "description": "x" * 20}
        for i in range(SCHEMA_PROPERTIES)
    }
    return {"type": "object", "properties": properties}


@dataclass(frozen=True)
class Sizes:
    """How big a run is."""

    samples: int  # big tasks, and reads of their page
    points: int  # 3-D points in each payload and result
    schemas: int  # big schemas registered at once


@dataclass
class Measured:
    """Latencies by request, and the size of each request's answers."""

    seconds: dict[str, list[float]] = field(default_factory=lambda: {r: [] for r in REQUESTS})
    answer_bytes: dict[str, list[int]] = field(default_factory=dict)

    async def timed(
        self, client: httpx.AsyncClient, kind: str, method: str, path: str, body: Any = None
    ) -> Any:
        """One request, its body encoded before the clock starts (by orjson: this process's
        own JSON work is not what is measured)."""
        content = None if body is None else orjson.dumps(body)
        headers = {} if body is None else {"Content-Type": "application/json"}
        start = time.perf_counter()
        response = await client.request(method, path, content=content, headers=headers)
        self.seconds[kind].append(time.perf_counter() - start)
        if response.is_error:
            raise BenchError(f"{method} {path} -> {response.status_code}: {response.text[:300]}")
        self.answer_bytes.setdefault(kind, []).append(len(response.content))
        return orjson.loads(response.content) if response.content else None


@dataclass
class Phases:
    """When each phase of the run began (``time.monotonic``, which every process of this
    machine shares), to sort the bystander's latencies by what ran meanwhile."""

    began: list[tuple[float, str]] = field(default_factory=list)

    def enter(self, phase: str) -> None:
        self.began.append((time.monotonic(), phase))

    def of(self, moment: float) -> str | None:
        current = None
        for began, phase in self.began:
            if moment >= began:
                current = phase
        return current


@contextlib.asynccontextmanager
async def bystander(target: Target, room: str, measured: Measured) -> AsyncIterator[Phases]:
    """Small submits one after another, from a process of its own (a client in this one
    would stall with this process's work on the big answers), while the block runs."""
    room = f"{room}-bystander"  # its tasks stay out of the measured room's page
    async with new_client(target) as client:
        job, _elapsed = await call(client, "PUT", f"{API}/rooms/{room}/jobs", JOB)
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "benchmarks.apps.bystander",
        f"{target.base_url}{API}/rooms/{room}/tasks/{job['full_name']}",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, TOKEN_ENV: target.token},
    )
    assert process.stdin is not None and process.stdout is not None
    await process.stdout.readline()  # started
    phases = Phases()
    try:
        yield phases
    finally:
        process.stdin.close()  # stop
        samples = orjson.loads(await process.stdout.read())
        await process.wait()
    for moment, seconds in samples:
        phase = phases.of(moment)
        if phase is not None:
            measured.seconds[f"bystander during {phase}"].append(seconds)


async def big_tasks(
    client: httpx.AsyncClient,
    measured: Measured,
    room: str,
    worker_id: str,
    sizes: Sizes,
) -> None:
    job_name = f"{room}:{JOB['category']}:{JOB['name']}"
    submit = f"{API}/rooms/{room}/tasks/{job_name}"
    for seed in range(sizes.samples):
        payload = points(sizes.points, seed)
        task = await measured.timed(client, "submit", "POST", submit, {"payload": payload})
        claimed = await measured.timed(
            client, "claim", "POST", f"{API}/tasks/claim", {"worker_id": worker_id}
        )
        token = claimed["task"]["claim_token"]
        path = f"{API}/tasks/{task['id']}"
        await measured.timed(
            client, "running", "PATCH", path, {"status": "running", "claim_token": token}
        )
        await measured.timed(
            client, "progress", "PATCH", path, {"progress": 0.5, "claim_token": token}
        )
        done = {"status": "completed", "claim_token": token, "result": payload}
        await measured.timed(client, "completed", "PATCH", path, done)
        await measured.timed(client, "get", "GET", path)


async def run_documents(target: Target, sizes: Sizes) -> list[dict[str, Any]]:
    room = f"documents-{uuid.uuid4().hex[:8]}"
    measured = Measured()
    async with new_client(target) as client, new_client(target) as beats:
        job, _elapsed = await call(client, "PUT", f"{API}/rooms/{room}/jobs", JOB)
        beat = asyncio.create_task(heartbeat(beats, [job["worker_id"]]))
        try:
            async with bystander(target, room, measured) as phases:
                log(f"[documents {target.name}] {sizes.samples} tasks of {sizes.points} points ...")
                phases.enter("tasks")
                await big_tasks(client, measured, room, job["worker_id"], sizes)
                phases.enter("page")
                for _ in range(sizes.samples):
                    await measured.timed(
                        client, "page", "GET", f"{API}/rooms/{room}/tasks?limit=500"
                    )
                log(f"[documents {target.name}] {sizes.schemas} schemas of ~250 kB at once ...")
                phases.enter("schemas")
                await asyncio.gather(
                    *(register(target, measured, room, seed) for seed in range(sizes.schemas))
                )
        finally:
            beat.cancel()
    return [emit(result_line(target.name, kind, measured)) for kind in REQUESTS]


async def register(target: Target, measured: Measured, room: str, seed: int) -> None:
    """One registration on a connection of its own, as a separate worker's would be."""
    body = {**JOB, "name": f"Schema{seed}", "schema": big_schema(seed)}
    async with new_client(target) as client:
        await measured.timed(client, "register", "PUT", f"{API}/rooms/{room}/jobs", body)


def result_line(
    target: str, kind: str, measured: Measured | None, error: str | None = None
) -> dict[str, Any]:
    sizes = [] if measured is None else measured.answer_bytes.get(kind, [])
    return {
        "scenario": "documents",
        "target": target,
        "request": kind,
        **latency_summary([] if measured is None else measured.seconds[kind]),
        "answer_bytes": int(statistics.median(sizes)) if sizes else None,
        "load_avg_1m": load_average(),
        "error": error,
    }


async def bench_documents(
    options: TargetOptions, targets: list[str], sizes: Sizes
) -> list[dict[str, Any]]:
    """Every target on a freshly started hub; a failure becomes error lines."""
    results: list[dict[str, Any]] = []
    for name in targets:
        try:
            async with FACTORIES[name](options) as target:
                results += await run_documents(target, sizes)
        except RUN_FAILURES as exc:
            error = f"{type(exc).__name__}: {exc}"
            log(f"[documents {name}] failed: {error}")
            results += [emit(result_line(name, kind, None, error)) for kind in REQUESTS]
    return results


def table(results: list[dict[str, Any]]) -> str:
    headers = [
        "target",
        "request",
        "samples",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "answer bytes",
    ]
    rows = [
        [
            r["target"],
            r["request"] + (" (failed)" if r["error"] else ""),
            r["samples"],
            r["p50_ms"],
            r["p90_ms"],
            r["p99_ms"],
            r["max_ms"],
            r["answer_bytes"],
        ]
        for r in results
    ]
    return markdown_table(headers, rows, left=2)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser("documents", __doc__)
    parser.add_argument(
        "--targets", type=choices(TARGETS, "targets"), default=list(TARGETS), help="sqlite,postgres"
    )
    parser.add_argument("--samples", type=int, default=10, help="big tasks, and page reads")
    parser.add_argument("--points", type=int, default=36_000, help="3-D points a document")
    parser.add_argument("--schemas", type=int, default=6, help="big schemas registered at once")
    args = parser.parse_args(argv)
    if min(args.samples, args.points, args.schemas) < 1:
        parser.error("--samples, --points and --schemas must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = Sizes(args.samples, args.points, args.schemas)

    async def work(options: TargetOptions, results: Results) -> None:
        results += await bench_documents(options, args.targets, sizes)

    return run_command(args, "documents", work, table)


if __name__ == "__main__":
    sys.exit(main())
