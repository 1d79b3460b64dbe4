"""Real-time latency benchmarks.

- ``longpoll``: from the completing ``PATCH`` returning to a waiting ``GET /tasks/{id}``
  (``Prefer: wait=N``) returning; on one replica (SQLite, embedded) and across two replicas
  (PostgreSQL + Redis: the long-poll waits on replica A, the task completes on replica B).
- ``notify``: from a submit's response to ``task_available`` arriving at the worker socket
  that joined the job's room, with 1 and with 200 connected sockets (the others are
  browser-like sockets in the task's room, so every submit also fans a
  ``task_status_event`` out to them).
- ``fanout``: the same, with every socket joined to the job's room: ``task_available``
  reaches all of them.
- ``roomfanout``: from a submit's response to its ``task_status_event`` (status
  ``pending``) arriving at each of 500 browser-like sockets joined to the task's room
  (``room_join``).

Fan-out figures are given at the first socket, at the last one (every socket has it), and
over every arrival. One client process receives every copy, so they also measure the client.

Prints one JSON line per result on stdout as it comes and a markdown table on stderr.

    .venv/bin/python -m benchmarks realtime
    .venv/bin/python -m benchmarks realtime --runs 50 --sockets 1,200 --scenarios notify
    .venv/bin/python -m benchmarks realtime --scenarios roomfanout --room-sockets 100,500
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import socketio

from benchmarks.harness.cli import choices, csv_ints, raise_fd_limit, run_command, scenario_parser
from benchmarks.harness.report import Results, emit, latency_summary, markdown_table
from benchmarks.harness.targets import Target, TargetOptions, postgres_replicas, sqlite_target

API = "/v1/joblib"
ROOM = "bench"
JOB = f"{ROOM}:modifiers:Rt"
REDIS_URL = "redis://127.0.0.1:6379/0"
SCENARIOS = ("longpoll", "notify", "fanout", "roomfanout")
CONNECT_BATCH = 25  # sockets connecting (and joining) at once
ARRIVAL_TIMEOUT_SECONDS = 30.0
FAN_OUT_MEASURES = ("first", "last", "every")


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


def _join_request(worker_id: str | None) -> tuple[str, dict[str, str]]:
    """The join event of a worker socket (``worker_id`` given) or of a room watcher."""
    if worker_id is not None:
        return "join_job_room", {"job_name": JOB, "worker_id": worker_id}
    return "room_join", {"room_id": ROOM}


async def _connect_and_join(
    target: Target, sock: socketio.AsyncClient, worker_id: str | None
) -> None:
    await sock.connect(target.base_url, auth={"token": target.token}, transports=["websocket"])
    event, data = _join_request(worker_id)
    ack = await sock.call(event, data, timeout=10)
    if "type" in ack:
        raise RuntimeError(f"{event} refused: {ack}")


@asynccontextmanager
async def connected_sockets(
    target: Target, worker_id: str, workers: int, watchers: int
) -> AsyncIterator[tuple[list[socketio.AsyncClient], list[socketio.AsyncClient]]]:
    """``workers`` sockets joined to the job room for ``worker_id`` and ``watchers`` sockets
    joined to the task's room, like browsers watching it; yields ``(workers, watchers)``."""
    count = workers + watchers
    sockets = [socketio.AsyncClient(reconnection=False) for _ in range(count)]
    try:
        for start in range(0, count, CONNECT_BATCH):
            await asyncio.gather(
                *(
                    _connect_and_join(target, sock, worker_id if index < workers else None)
                    for index, sock in enumerate(sockets[start : start + CONNECT_BATCH], start)
                )
            )
        yield sockets[:workers], sockets[workers:]
    finally:
        await asyncio.gather(*(sock.disconnect() for sock in sockets), return_exceptions=True)


async def arrival_latencies(
    http: httpx.AsyncClient,
    receivers: list[socketio.AsyncClient],
    event: str,
    task_of: Callable[[dict[str, Any]], str | None],
    runs: int,
) -> dict[str, list[float]]:
    """Seconds from each submit's response to ``event`` about that task (``task_of`` reads its
    id, None to ignore the event) at each receiver: at the first, at the last, and every."""
    arrivals: dict[str, list[float]] = defaultdict(list)
    complete: dict[str, asyncio.Event] = defaultdict(asyncio.Event)

    def on_event(data: dict[str, Any]) -> None:
        task_id = task_of(data)
        if task_id is not None:
            arrivals[task_id].append(time.perf_counter())
            if len(arrivals[task_id]) == len(receivers):
                complete[task_id].set()

    for sock in receivers:
        sock.on(event, on_event)
    latencies: dict[str, list[float]] = {measure: [] for measure in FAN_OUT_MEASURES}
    for _ in range(runs):
        response = await http.post(f"/rooms/{ROOM}/tasks/{JOB}", json={"payload": {}})
        answered = time.perf_counter()
        response.raise_for_status()
        task_id = response.json()["id"]
        try:
            await asyncio.wait_for(complete[task_id].wait(), ARRIVAL_TIMEOUT_SECONDS)
        except TimeoutError:
            got = len(arrivals[task_id])
            raise RuntimeError(f"only {got}/{len(receivers)} sockets got {task_id}") from None
        times = [t - answered for t in arrivals.pop(task_id)]
        latencies["first"].append(min(times))
        latencies["last"].append(max(times))
        latencies["every"].extend(times)
        await asyncio.sleep(0.02)
    return latencies


def _available_task(data: dict[str, Any]) -> str | None:
    return data.get("task_id")


def _pending_task(data: dict[str, Any]) -> str | None:
    return data.get("id") if data.get("status") == "pending" else None


async def notify_latencies(
    target: Target, sockets: int, runs: int, *, all_workers: bool
) -> dict[str, list[float]]:
    """``task_available`` at the worker socket(s) after each submit; the other sockets
    watch the room."""
    workers = sockets if all_workers else 1
    async with client(target) as http:
        worker_id = await register(http)
        async with connected_sockets(target, worker_id, workers, sockets - workers) as joined:
            return await arrival_latencies(http, joined[0], "task_available", _available_task, runs)


async def room_fanout_latencies(target: Target, sockets: int, runs: int) -> dict[str, list[float]]:
    """The submitted task's ``task_status_event`` at ``sockets`` sockets watching its room."""
    async with client(target) as http:
        worker_id = await register(http)
        async with connected_sockets(target, worker_id, 0, sockets) as (_workers, watchers):
            return await arrival_latencies(http, watchers, "task_status_event", _pending_task, runs)


def summary(name: str, latencies: list[float], **extra: Any) -> dict[str, Any]:
    return {"scenario": name, **extra, **latency_summary(latencies)}


async def bench_longpoll(
    options: TargetOptions, runs: int, redis_url: str = REDIS_URL
) -> list[dict[str, Any]]:
    results = []
    async with sqlite_target(options) as hub:
        lat = await longpoll_latencies(hub, hub, runs)
        results.append(emit(summary("longpoll", lat, topology="1 replica (SQLite)")))
    async with postgres_replicas(options, 2, redis_url) as (first, second):
        lat = await longpoll_latencies(first, second, runs)
        topology = "2 replicas (PostgreSQL + Redis)"
        results.append(emit(summary("longpoll", lat, topology=topology)))
    return results


def _socket_budget(socket_counts: list[int]) -> None:
    """Enough open files for the client and for the server started next (it inherits the
    limit): one per socket each, plus headroom."""
    raise_fd_limit(max(socket_counts) + 1024)


async def bench_notify(
    options: TargetOptions, runs: int, socket_counts: list[int], *, fanout: bool
) -> list[dict[str, Any]]:
    _socket_budget(socket_counts)
    results = []
    async with sqlite_target(options) as hub:
        for count in socket_counts:
            lat = await notify_latencies(hub, count, runs, all_workers=fanout)
            if fanout:
                for measure in FAN_OUT_MEASURES:
                    result = summary("fanout", lat[measure], sockets=count, measured=measure)
                    results.append(emit(result))
            else:
                result = summary("notify", lat["first"], sockets=count, measured="worker")
                results.append(emit(result))
    return results


async def bench_room_fanout(
    options: TargetOptions, runs: int, socket_counts: list[int]
) -> list[dict[str, Any]]:
    _socket_budget(socket_counts)
    results = []
    async with sqlite_target(options) as hub:
        for count in socket_counts:
            lat = await room_fanout_latencies(hub, count, runs)
            for measure in FAN_OUT_MEASURES:
                result = summary("roomfanout", lat[measure], sockets=count, measured=measure)
                results.append(emit(result))
    return results


def _setup(result: dict[str, Any]) -> str:
    if "topology" in result:
        return result["topology"]
    if result["scenario"] == "notify":
        return f"{result['sockets']} sockets, at the worker socket"
    kind = "room sockets" if result["scenario"] == "roomfanout" else "worker sockets"
    return f"{result['sockets']} {kind}, arrival at {result['measured']} socket"


def table(results: list[dict[str, Any]]) -> str:
    headers = ["scenario", "setup", "samples", "p50 ms", "p90 ms", "p99 ms", "max ms"]
    rows = [
        [r["scenario"], _setup(r), r["samples"], r["p50_ms"], r["p90_ms"], r["p99_ms"], r["max_ms"]]
        for r in results
    ]
    return markdown_table(headers, rows, left=2)


async def bench_realtime(
    options: TargetOptions,
    scenarios: list[str],
    runs: int,
    notify_sockets: list[int],
    room_sockets: list[int],
    redis_url: str = REDIS_URL,
) -> list[dict[str, Any]]:
    """The chosen real-time scenarios, in the order of ``SCENARIOS``."""
    results: list[dict[str, Any]] = []
    if "longpoll" in scenarios:
        results += await bench_longpoll(options, runs, redis_url)
    if "notify" in scenarios:
        results += await bench_notify(options, runs, notify_sockets, fanout=False)
    if "fanout" in scenarios:
        results += await bench_notify(options, runs, notify_sockets[-1:], fanout=True)
    if "roomfanout" in scenarios:
        results += await bench_room_fanout(options, runs, room_sockets)
    return results


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser("realtime", __doc__)
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--sockets", type=csv_ints, default=[1, 200], help="notify; fanout: last")
    parser.add_argument("--room-sockets", type=csv_ints, default=[500], help="roomfanout")
    parser.add_argument(
        "--scenarios",
        type=choices(SCENARIOS, "scenarios"),
        default=list(SCENARIOS),
        help="comma-separated: " + ", ".join(SCENARIOS),
    )
    parser.add_argument("--redis-url", default=REDIS_URL, help="longpoll's two replicas share it")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    async def work(options: TargetOptions, results: Results) -> None:
        results += await bench_realtime(
            options, args.scenarios, args.runs, args.sockets, args.room_sockets, args.redis_url
        )

    return run_command(args, "realtime", work, table)


if __name__ == "__main__":
    sys.exit(main())
