"""The scale benchmark's *sockets* dimension (``python -m benchmarks scale --dimensions
sockets``): thousands of browser-like sockets on one hub, or on two replicas sharing Redis.

Per engine, replica count and layout, a fresh hub (``taskhub serve``; several replicas on
one PostgreSQL database with Redis between them): ``--warmup`` sessions opened and closed
again, the hub's RSS read, then ``--clients`` processes (``benchmarks/apps/scale_sockets.py``)
open N raw websocket Socket.IO sessions in all, each signed in with the admin token (a
superuser, not held to the per-user socket cap) and joined to a room (``room_join``): N
spread over ``--rooms`` rooms (``--sockets``), and N in one room (``--one-room``). A room's
sockets alternate between the replicas. Then the RSS again (KiB per socket, over every
replica), the hub's CPU while the sockets idle, and ``--events`` tasks submitted one after
another through REST into the first room: each one's ``task_status_event`` is timed at
every socket of that room, from just before the submit was sent (the client's clock; the
processes share the machine's monotonic clock), at the first socket, the last one and
every one; the hub's CPU (and PostgreSQL's) per published event, the submit included.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from benchmarks.harness.cli import csv_ints
from benchmarks.harness.cpu import process_cpu_seconds, rss_kib, server_cpu_seconds
from benchmarks.harness.report import emit, load_average, log, markdown_table, ms, percentile
from benchmarks.harness.scale_clients import ClientProcesses, split
from benchmarks.harness.sockets import close_sessions, open_sessions, websocket_url
from benchmarks.harness.targets import (
    Target,
    TargetOptions,
    hub_target,
    pg_server_pid,
    postgres_replicas,
)

API = "/v1/joblib"
REDIS_URL = "redis://127.0.0.1:6379/0"
JOB_NAME = "Scale"
SETTLE_SECONDS = 1.0  # after the last socket opened, before RSS is read
EVENT_GAP_SECONDS = 0.02  # between one event's last arrival and the next submit
GOAL_BYTES_PER_SOCKET = 30_000  # an idle connected socket: at most 30 KB of hub RSS
GOAL_LAST_P95_MS = 100.0  # an event to 1,000 watchers of one room, last delivered, p95
GOAL_WATCHERS = 1000  # the room size the latency goal is set for (one replica)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("sockets dimension")
    group.add_argument(
        "--sockets", type=csv_ints, default=[1000, 5000, 10000], help="spread over --rooms"
    )
    group.add_argument("--rooms", type=int, default=100)
    group.add_argument(
        "--one-room", type=counts, default=[1000], help="sockets all in one room (0: none)"
    )
    group.add_argument("--events", type=int, default=50, help="task events published a row")
    group.add_argument("--clients", type=int, default=4, help="client processes")
    group.add_argument("--warmup", type=int, default=100, help="sessions opened and closed first")
    group.add_argument(
        "--idle-seconds", type=float, default=5.0, help="the hub's CPU read while sockets idle"
    )
    group.add_argument(
        "--replicas",
        type=csv_ints,
        default=[1, 2],
        help="hub replicas (more than 1: PostgreSQL only, sharing Redis)",
    )
    group.add_argument(
        "--no-deflate",
        dest="deflate",
        action="store_false",
        help="clients do not offer permessage-deflate (browsers do)",
    )
    group.add_argument("--redis-url", default=REDIS_URL, help="what the replicas share")


def counts(text: str) -> list[int]:
    """``argparse`` type: ``csv_ints``, where ``0`` alone means none."""
    return [] if text.strip() == "0" else csv_ints(text)


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if min(args.rooms, args.events, args.clients) < 1 or args.warmup < 0:
        parser.error("--rooms, --events and --clients must be at least 1, --warmup 0")
    if args.idle_seconds <= 0:
        parser.error("--idle-seconds must be positive")


def largest(args: argparse.Namespace) -> int:
    """The most sockets one hub holds in a run (the fd limit is raised for it)."""
    return max(args.sockets + args.one_room) + args.warmup


def hub_env(sockets: int) -> dict[str, str]:
    """The hub's settings for ``sockets`` sessions opened in parallel batches by a few
    processes of one address: sign-in time and the per-address cap of sessions before
    sign-in raised, workers kept however long the sockets take to open."""
    return {
        "TASKHUB_SOCKET_CONNECT_TIMEOUT_SECONDS": "120",
        "TASKHUB_MAX_UNAUTHENTICATED_PER_ADDRESS": str(max(sockets, 64)),
        "TASKHUB_WORKER_TIMEOUT_SECONDS": "3600",
    }


@asynccontextmanager
async def hubs(
    engine: str, replicas: int, options: TargetOptions, env: dict[str, str], redis_url: str
) -> AsyncIterator[list[Target]]:
    """One hub of ``engine``, or ``replicas`` PostgreSQL replicas sharing Redis (a
    namespace of their own on it)."""
    if replicas == 1:
        async with hub_target(engine, options, extra_env=env) as target:
            yield [target]
        return
    env = {**env, "TASKHUB_REDIS_NAMESPACE": f"bench-scale-{secrets.token_hex(4)}"}
    async with postgres_replicas(options, replicas, redis_url, extra_env=env) as targets:
        yield targets


def http_client(target: Target) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=target.base_url + API,
        headers={"Authorization": f"Bearer {target.token}"},
        timeout=60,
        trust_env=False,
    )


def spread(prefix: str, seconds: list[float]) -> dict[str, float | None]:
    """p50, p95 and max in milliseconds, their keys prefixed."""
    return {
        f"{prefix}_p50_ms": ms(percentile(seconds, 50)),
        f"{prefix}_p95_ms": ms(percentile(seconds, 95)),
        f"{prefix}_max_ms": ms(max(seconds, default=None)),
    }


def per_event(used: float | None, events: int) -> float | None:
    return None if used is None else round(used * 1000 / events, 2)


def delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def hubs_cpu(targets: list[Target]) -> float | None:
    readings = [process_cpu_seconds(target.pid) for target in targets]
    return None if None in readings else sum(r for r in readings if r is not None)


def cpu_readings(
    targets: list[Target], database_pid: int | None, clients: ClientProcesses
) -> tuple[float | None, float | None, float | None]:
    """CPU time so far of the hubs, of PostgreSQL (its postmaster and backends) and of the
    client processes."""
    return hubs_cpu(targets), server_cpu_seconds(database_pid), clients.cpu_seconds()


def hubs_rss(targets: list[Target]) -> int:
    return sum(rss_kib(target.pid) for target in targets if target.pid is not None)


async def warm_up(targets: list[Target], count: int, deflate: bool) -> None:
    """Sessions opened and closed on each hub first: what the first ones allocate once is
    not charged to the measured ones."""
    for target in targets:
        url = websocket_url(target.base_url)
        await close_sessions(await open_sessions(url, count, target.token, "warm-up", deflate))


def watcher_plans(
    targets: list[Target], sockets: int, rooms: list[str], clients: int, deflate: bool
) -> list[dict[str, Any]]:
    urls = [websocket_url(target.base_url) for target in targets]
    return [
        {
            "mode": "watchers",
            "first": first,
            "count": count,
            "rooms": rooms,
            "urls": urls,
            "watch": rooms[0],
            "deflate": deflate,
        }
        for first, count in split(sockets, clients)
    ]


async def publish(
    http: httpx.AsyncClient, clients: ClientProcesses, room: str, events: int
) -> dict[str, list[float]]:
    """Submit ``events`` tasks into the watched ``room`` one after another; each one's
    arrival times after the moment before its submit: at the first, the last, and every
    watching socket."""
    response = await http.put(
        f"/rooms/{room}/jobs", json={"category": "modifiers", "name": JOB_NAME, "schema": {}}
    )
    response.raise_for_status()
    job = response.json()["full_name"]
    latencies: dict[str, list[float]] = {"first": [], "last": [], "every": []}
    for _ in range(events):
        sent = time.monotonic()
        response = await http.post(f"/rooms/{room}/tasks/{job}", json={"payload": {}})
        response.raise_for_status()
        times = [at - sent for at in await clients.arrivals(response.json()["id"])]
        latencies["first"].append(min(times))
        latencies["last"].append(max(times))
        latencies["every"] += times
        await asyncio.sleep(EVENT_GAP_SECONDS)
    return latencies


async def measure(
    args: argparse.Namespace,
    options: TargetOptions,
    engine: str,
    replicas: int,
    sockets: int,
    rooms: int,
) -> dict[str, Any]:
    """One row: a fresh hub (or replicas), ``sockets`` sockets over ``rooms`` rooms."""
    names = [f"scale-{index:03d}" for index in range(rooms)]
    env = hub_env(sockets + args.warmup)
    async with hubs(engine, replicas, options, env, args.redis_url) as targets:
        database_pid = targets[0].database_pid
        if engine == "postgres" and database_pid is None:
            database_pid = await pg_server_pid(options.pg_admin_url)
        await warm_up(targets, args.warmup, args.deflate)
        await asyncio.sleep(SETTLE_SECONDS)
        rss_before = hubs_rss(targets)
        plans = watcher_plans(targets, sockets, names, args.clients, args.deflate)
        opened = time.monotonic()
        async with ClientProcesses(plans, targets[0].token, options.workdir) as clients:
            connect_s = time.monotonic() - opened
            await asyncio.sleep(SETTLE_SECONDS)
            rss_after = hubs_rss(targets)
            idle_before = hubs_cpu(targets)
            await asyncio.sleep(args.idle_seconds)
            idle_cpu = delta(idle_before, hubs_cpu(targets))
            readings = cpu_readings(targets, database_pid, clients)
            async with http_client(targets[0]) as http:
                latencies = await publish(http, clients, names[0], args.events)
            after = cpu_readings(targets, database_pid, clients)
            await clients.close()
    hub_used, database_used, clients_used = (
        delta(start, end) for start, end in zip(readings, after, strict=True)
    )
    kib = (rss_after - rss_before) / sockets
    last_p95 = ms(percentile(latencies["last"], 95))
    latency_goal = replicas == 1 and rooms == 1 and sockets >= GOAL_WATCHERS
    return {
        "connect_s": round(connect_s, 2),
        "rss_before_kib": rss_before,
        "rss_after_kib": rss_after,
        "kib_per_socket": round(kib, 1),
        "memory_goal_met": kib * 1024 <= GOAL_BYTES_PER_SOCKET,
        "idle_hub_cpu_pct": None
        if idle_cpu is None
        else round(100 * idle_cpu / args.idle_seconds, 1),
        "events": args.events,
        **spread("first", latencies["first"]),
        **spread("last", latencies["last"]),
        **spread("every", latencies["every"]),
        "latency_goal_met": None
        if not latency_goal or last_p95 is None
        else last_p95 <= GOAL_LAST_P95_MS,
        "hub_cpu_ms_per_event": per_event(hub_used, args.events),
        "database_cpu_ms_per_event": per_event(database_used, args.events),
        "clients_cpu_ms_per_event": per_event(clients_used, args.events),
    }


def layouts(args: argparse.Namespace) -> list[tuple[int, int]]:
    """(sockets, rooms) of each row: the spread sizes, then those in one room."""
    return [(count, args.rooms) for count in args.sockets] + [(c, 1) for c in args.one_room]


async def run(
    args: argparse.Namespace, options: TargetOptions, results: list[dict[str, Any]]
) -> None:
    """Every (engine, replicas, layout) row, each emitted as soon as it is measured; a
    failed row carries its ``error`` and the others still run."""
    for engine in args.engines:
        for replicas in [r for r in args.replicas if r == 1 or engine == "postgres"]:
            for sockets, rooms in layouts(args):
                row: dict[str, Any] = {
                    "scenario": "scale",
                    "dimension": "sockets",
                    "engine": engine,
                    "replicas": replicas,
                    "sockets": sockets,
                    "rooms": rooms,
                    "watchers": math.ceil(sockets / rooms),
                    "clients": min(args.clients, sockets),
                    "deflate": args.deflate,
                }
                log(f"scale sockets: {engine} x{replicas}, {sockets} sockets in {rooms} rooms")
                try:
                    row |= await measure(args, options, engine, replicas, sockets, rooms)
                    row |= {"load_avg_1m": load_average(), "error": None}
                except Exception as exc:  # reported; the other rows still run
                    row["error"] = repr(exc)
                results.append(emit(row))


def table(rows: list[dict[str, Any]]) -> str:
    headers = (
        "engine",
        "replicas",
        "sockets",
        "rooms",
        "watchers",
        "KiB/socket",
        "idle hub CPU %",
        "first p50/p95 ms",
        "last p50/p95 ms",
        "every p95 ms",
        "hub CPU ms/event",
        "db CPU ms/event",
    )
    lines = [
        (
            r["engine"],
            r["replicas"],
            r["sockets"],
            r["rooms"],
            r["watchers"],
            r["kib_per_socket"],
            r["idle_hub_cpu_pct"],
            f"{r['first_p50_ms']} / {r['first_p95_ms']}",
            f"{r['last_p50_ms']} / {r['last_p95_ms']}",
            r["every_p95_ms"],
            r["hub_cpu_ms_per_event"],
            r["database_cpu_ms_per_event"],
        )
        for r in rows
        if r["dimension"] == "sockets" and not r.get("error")
    ]
    return markdown_table(headers, lines)
