"""Real-time latency benchmarks.

- ``longpoll``: from the completing ``PATCH`` returning to a waiting ``GET /tasks/{id}``
  (``Prefer: wait=N``) returning; on one replica (SQLite, embedded) and across two replicas
  (PostgreSQL + Redis: the long-poll waits on replica A, the task completes on replica B).
- ``notify``: from a submit's response to ``task_available`` arriving at the worker socket
  that joined the job's room, with 1 and with 200 connected sockets (the others are
  browser-like sockets in the task's room, so every submit also fans a
  ``task_status_event`` out to them).
- ``fanout``: the same, with every socket joined to the job's room: ``task_available``
  reaches all of them (one client process receives every copy, so this also measures the
  client).

Prints one JSON line per scenario on stdout and a markdown table on stderr.

    .venv/bin/python -m benchmarks.realtime
    .venv/bin/python -m benchmarks.realtime --runs 50 --sockets 1,200 --scenarios notify
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import socketio

from benchmarks.targets import (
    Target,
    TargetOptions,
    postgres_replicas,
    sqlite_target,
)
from benchmarks.throughput import fail_fast_sniffio_import, ms, percentile

API = "/v1/joblib"
ROOM = "bench"
JOB = f"{ROOM}:modifiers:Rt"
REDIS_URL = "redis://127.0.0.1:6379/0"


def client(target: Target) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=target.base_url + API,
        headers={"Authorization": f"Bearer {target.token}"},
        timeout=30,
    )


async def register(http: httpx.AsyncClient) -> str:
    response = await http.put(
        f"/rooms/{ROOM}/jobs", json={"category": "modifiers", "name": "Rt", "schema": {}}
    )
    response.raise_for_status()
    return response.json()["worker_id"]


async def running_task(http: httpx.AsyncClient, worker_id: str) -> str:
    task = (await http.post(f"/rooms/{ROOM}/tasks/{JOB}", json={"payload": {}})).json()
    await http.post("/tasks/claim", json={"worker_id": worker_id})
    await http.patch(f"/tasks/{task['id']}", json={"status": "running"})
    return task["id"]


async def longpoll_latencies(waiter: Target, completer: Target, runs: int) -> list[float]:
    """Seconds from the completing PATCH's response to the long-poll's response."""
    latencies: list[float] = []
    async with client(waiter) as wait_http, client(completer) as done_http:
        worker_id = await register(done_http)
        for _ in range(runs):
            task_id = await running_task(done_http, worker_id)
            returned: dict[str, float] = {}

            async def poll(task_id: str = task_id, returned: dict[str, float] = returned) -> None:
                await wait_http.get(f"/tasks/{task_id}", headers={"Prefer": "wait=10"})
                returned["at"] = time.perf_counter()

            poller = asyncio.create_task(poll())
            await asyncio.sleep(0.05)  # the poll is waiting on the server now
            await done_http.patch(f"/tasks/{task_id}", json={"status": "completed"})
            completed_at = time.perf_counter()
            await asyncio.wait_for(poller, 15)
            latencies.append(returned["at"] - completed_at)
    return latencies


@asynccontextmanager
async def connected_sockets(
    target: Target, worker_id: str, workers: int, watchers: int
) -> AsyncIterator[list[socketio.AsyncClient]]:
    """``workers`` sockets joined to the job room for ``worker_id`` (returned), plus
    ``watchers`` sockets joined to the task's room, like browsers watching it."""
    count = workers + watchers
    sockets = [socketio.AsyncClient(reconnection=False) for _ in range(count)]
    try:
        for batch_start in range(0, count, 25):
            batch = sockets[batch_start : batch_start + 25]
            await asyncio.gather(
                *(
                    sock.connect(
                        target.base_url, auth={"token": target.token}, transports=["websocket"]
                    )
                    for sock in batch
                )
            )
        for index, sock in enumerate(sockets):
            if index < workers:
                event, data = "join_job_room", {"job_name": JOB, "worker_id": worker_id}
            else:
                event, data = "room_join", {"room_id": ROOM}
            ack = await sock.call(event, data, timeout=10)
            if "type" in ack:
                raise RuntimeError(f"join refused: {ack}")
        yield sockets[:workers]
    finally:
        await asyncio.gather(*(sock.disconnect() for sock in sockets), return_exceptions=True)


async def notify_latencies(
    target: Target, sockets: int, runs: int, *, all_workers: bool
) -> dict[str, list[float]]:
    """Seconds from each submit's response to ``task_available`` at the worker socket(s)."""
    first: list[float] = []
    every: list[float] = []
    workers = sockets if all_workers else 1
    async with client(target) as http:
        worker_id = await register(http)
        async with connected_sockets(target, worker_id, workers, sockets - workers) as clients:
            arrivals: dict[str, list[float]] = {}
            all_arrived: dict[str, asyncio.Event] = {}

            def on_available(data: dict[str, Any]) -> None:
                times = arrivals.setdefault(data["task_id"], [])
                times.append(time.perf_counter())
                if len(times) == workers:
                    all_arrived.setdefault(data["task_id"], asyncio.Event()).set()

            for sock in clients:
                sock.on("task_available", on_available)
            for _ in range(runs):
                response = await http.post(f"/rooms/{ROOM}/tasks/{JOB}", json={"payload": {}})
                answered = time.perf_counter()
                task_id = response.json()["id"]
                done = all_arrived.setdefault(task_id, asyncio.Event())
                try:
                    await asyncio.wait_for(done.wait(), 10)
                except TimeoutError:
                    got = len(arrivals.get(task_id, ()))
                    raise RuntimeError(f"only {got}/{workers} sockets got {task_id}") from None
                times = arrivals[task_id]
                every.extend(t - answered for t in times)
                first.append(min(times) - answered)
                await asyncio.sleep(0.02)
    return {"first": first, "every": every}


def summary(name: str, latencies: list[float], **extra: Any) -> dict[str, Any]:
    return {
        "scenario": name,
        **extra,
        "samples": len(latencies),
        "p50_ms": ms(percentile(latencies, 50)),
        "p99_ms": ms(percentile(latencies, 99)),
        "max_ms": ms(max(latencies)),
    }


async def bench_longpoll(options: TargetOptions, runs: int) -> list[dict[str, Any]]:
    results = []
    async with sqlite_target(options) as hub:
        lat = await longpoll_latencies(hub, hub, runs)
        results.append(summary("longpoll", lat, topology="1 replica (SQLite)"))
    async with postgres_replicas(options, 2, REDIS_URL) as (first, second):
        lat = await longpoll_latencies(first, second, runs)
        results.append(summary("longpoll", lat, topology="2 replicas (PostgreSQL + Redis)"))
    return results


async def bench_notify(
    options: TargetOptions, runs: int, socket_counts: list[int], *, fanout: bool
) -> list[dict[str, Any]]:
    results = []
    async with sqlite_target(options) as hub:
        for count in socket_counts:
            lat = await notify_latencies(hub, count, runs, all_workers=fanout)
            if fanout:
                results.append(summary("fanout", lat["first"], sockets=count, measured="first"))
                results.append(summary("fanout", lat["every"], sockets=count, measured="every"))
            else:
                results.append(summary("notify", lat["first"], sockets=count, measured="worker"))
    return results


def table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| scenario | setup | samples | p50 ms | p99 ms | max ms |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for r in results:
        setup = r.get("topology") or f"{r['sockets']} sockets, at {r['measured']} socket(s)"
        lines.append(
            f"| {r['scenario']} | {setup} | {r['samples']} | {r['p50_ms']} | {r['p99_ms']} "
            f"| {r['max_ms']} |"
        )
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--sockets", default="1,200", help="socket counts for notify")
    parser.add_argument("--scenarios", default="longpoll,notify,fanout")
    parser.add_argument("--pg-admin-url", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args(argv)
    fail_fast_sniffio_import()
    scenarios = args.scenarios.split(",")
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="taskhub-rt-") as workdir:
        options = TargetOptions(
            workdir=Path(workdir),
            log_level="warning",
            access_log=False,
            pg_admin_url=args.pg_admin_url,
        )
        if "longpoll" in scenarios:
            results += await bench_longpoll(options, args.runs)
        counts = [int(c) for c in args.sockets.split(",")]
        if "notify" in scenarios:
            results += await bench_notify(options, args.runs, counts, fanout=False)
        if "fanout" in scenarios:
            results += await bench_notify(options, args.runs, counts[-1:], fanout=True)
    for result in results:
        print(json.dumps(result), flush=True)
    print(table(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
