"""Workers at full speed: real worker processes serving a no-op job, side by side.

Systems, each measured at every layout (P worker processes x C tasks at once each; by
default 1x1, 1x16 and 4x4), in interleaved rounds (every system once per round, so that a
busy moment of a shared machine weighs on one round of each rather than on all of one):

- ``ceiling``: the in-memory ceiling app (``benchmarks/apps/ceiling.py``) driven by the raw
  four-request client of the ``throughput`` scenario (W = P x C workers);
- ``reference``: the zndraw-joblib 0.1.7 reference server (its router in a minimal host,
  SQLite; ``benchmarks/apps/sdk_servers.py``) served by that package's own ``JobManager``
  (one manager per slot, polling every ``--joblib-poll`` seconds when idle: it has no
  Socket.IO there), a fifth of ``--tasks`` at saturation (it is that much slower);
- ``taskhub-joblib``: Taskhub on SQLite served by the same unmodified ``JobManager``;
- ``taskhub-sdk``: Taskhub on SQLite served by ``taskhub worker`` processes (the SDK: claims
  that start their tasks, end reports that claim the next, tasks pushed into idle slots);
- ``postgres-sdk``: two Taskhub replicas on one PostgreSQL database with Redis, the worker
  processes and submitters spread over them;
- ``taskhub-sdk-claims``, ``postgres-sdk-claims``: the same with ``taskhub worker
  --no-push``: idle slots are not granted to the hub, so every task is claimed by its
  worker (the difference push makes, side by side);
- ``taskhub-sdk-patch``: the SQLite hub's SDK workers with ``--no-socket-updates``: run
  ends reported by ``PATCH`` instead of over the Socket.IO link (the difference that makes).

Tasks are submitted by the SDK's ``AsyncClient`` (``--submitters`` at once, 16 by default:
with 4, an SDK hub on SQLite sat a quarter idle at "saturation", each submitter waiting for
its answer before sending the next, so the figure was the submitters' round trip; the
ceiling's raw client gets the same number). Per system and
layout: the saturation rate (``--tasks`` submitted as fast as they go; tasks/s from the
hub's own timestamps, first ``created_at`` to last ``completed_at``), the requests per task
counted at the hub (an ASGI counter in front of every server, the benchmark's own submits
and reads counted apart), the CPU per task of every process (hub(s), database, workers,
this client), and submit → running latency (the hub's ``started_at - created_at``) at
saturation and at fixed offered rates below it: ``--rates`` (default 50 tasks/s) and half
the rate the same run measured at saturation, each for ``--rate-seconds``.

One JSON line per measurement on stdout; markdown tables (every round, then medians over
the rounds with each system's share of the same round's ceiling) on stderr.

    .venv/bin/python -m benchmarks sdk                       # the full run (a few minutes)
    .venv/bin/python -m benchmarks sdk --quick               # a smoke run
    .venv/bin/python -m benchmarks sdk --systems ceiling,taskhub-sdk --layouts 4x4
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import resource
import secrets
import statistics
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks.harness.cli import choices, run_command, scenario_parser
from benchmarks.harness.cpu import process_cpu_seconds, server_cpu_seconds
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
    REPO_ROOT,
    Target,
    TargetError,
    TargetOptions,
    free_port,
    fresh_database,
    pg_server_pid,
    served,
)
from benchmarks.scenarios import throughput

API = "/v1/joblib"
JOB_NAME = "Noop"
JOB = f"modifiers:{JOB_NAME}"
SYSTEMS = (
    "ceiling",
    "reference",
    "taskhub-joblib",
    "taskhub-sdk",
    "taskhub-sdk-claims",
    "postgres-sdk",
    "postgres-sdk-claims",
    "taskhub-sdk-patch",
)
# Served by ``taskhub worker`` processes; the ``-claims`` ones with ``--no-push``.
SDK_SYSTEMS = {
    "taskhub-sdk",
    "taskhub-sdk-claims",
    "postgres-sdk",
    "postgres-sdk-claims",
    "taskhub-sdk-patch",
}
# The server each system runs against (one per round, shared by the systems on it).
SERVERS = {
    "ceiling": "ceiling",
    "reference": "reference",
    "taskhub-joblib": "sqlite",
    "taskhub-sdk": "sqlite",
    "taskhub-sdk-claims": "sqlite",
    "postgres-sdk": "postgres",
    "postgres-sdk-claims": "postgres",
    "taskhub-sdk-patch": "sqlite",
}
REDIS_URL = "redis://127.0.0.1:6379/0"
SDK_WORKER = "benchmarks.apps.sdk_worker:Noop"  # served by ``taskhub worker``
JOBLIB_WORKER = "benchmarks.apps.sdk_joblib_worker"  # zndraw-joblib's JobManager, a module
DEFAULT_JOBLIB_POLL = 0.25  # seconds between an idle JobManager's claims
READY_SECONDS = 90.0  # worker processes start (a loaded machine imports slowly)
STOP_SECONDS = 20.0
# Requests the benchmark itself sends (submits, reads of the results): not the workers'.
OWN_KINDS = {"submit", "listing", "GET other", "worker_get"}


@dataclass(frozen=True)
class Layout:
    processes: int
    concurrency: int

    @property
    def name(self) -> str:
        return f"{self.processes}x{self.concurrency}"

    @property
    def slots(self) -> int:
        return self.processes * self.concurrency


def parse_layout(text: str) -> Layout:
    processes, _, concurrency = text.partition("x")
    try:
        layout = Layout(int(processes), int(concurrency))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a layout is PxC, e.g. 4x4, not {text!r}") from None
    if layout.processes < 1 or layout.concurrency < 1:
        raise argparse.ArgumentTypeError("P and C must be positive")
    return layout


@dataclass(frozen=True)
class Sizes:
    tasks: int  # per saturation run
    rate_seconds: float  # per fixed-rate run
    rates: list[float]  # fixed offered rates (half the saturation rate is added)
    submitters: int
    timeout: float  # per run


@dataclass
class Server:
    """A running server (two replicas for PostgreSQL) and its database process, if any."""

    name: str
    replicas: list[Target]
    database_pid: int | None = None

    @property
    def token(self) -> str:
        return self.replicas[0].token

    def url(self, index: int) -> str:
        return self.replicas[index % len(self.replicas)].base_url


# -- servers -------------------------------------------------------------------------------


def _app_argv(app: str, port: int, options: TargetOptions) -> list[str]:
    module = [sys.executable, "-m", "benchmarks.apps.sdk_servers", app, "--port", str(port)]
    return [*module, "--log-level", options.log_level]


def _taskhub_env(database_url: str, token: str, redis_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHUB_")}
    env.update(
        TASKHUB_DATABASE_URL=database_url,
        TASKHUB_ADMIN_TOKEN=token,
        TASKHUB_LOG_LEVEL="warning",
        # The first seconds of a run would otherwise see start-up sweeps and announcements.
        TASKHUB_WORKER_TIMEOUT_SECONDS="120",
    )
    if redis_url is not None:
        env.update(
            TASKHUB_REDIS_URL=redis_url, TASKHUB_REDIS_NAMESPACE=f"bench{secrets.token_hex(4)}"
        )
    return env


@asynccontextmanager
async def start_server(name: str, options: TargetOptions, redis_url: str) -> AsyncIterator[Server]:
    """One system's server, fresh (a fresh database too), stopped (and dropped) after."""
    token = "th_" + secrets.token_urlsafe(32)
    log_path = options.workdir / f"{name}.log"
    async with AsyncExitStack() as stack:
        if name == "ceiling":
            port = free_port()
            env = {**os.environ, "BENCH_CEILING_TOKEN": token}
            argv = _app_argv("ceiling", port, options)
            replica = await stack.enter_async_context(
                served(name, argv, env, port, token, log_path)
            )
            yield Server(name, [replica])
            return
        if name == "reference":
            port = free_port()
            path = options.workdir / f"reference-{secrets.token_hex(4)}.db"
            env = {**os.environ, "BENCH_REFERENCE_DATABASE_URL": f"sqlite+aiosqlite:///{path}"}
            argv = _app_argv("reference", port, options)
            replica = await stack.enter_async_context(
                served(name, argv, env, port, token, log_path)
            )
            yield Server(name, [replica])
            return
        engine = "sqlite" if name == "sqlite" else "postgres"
        url = await stack.enter_async_context(fresh_database(engine, options))
        count = 1 if engine == "sqlite" else 2
        env = _taskhub_env(url, token, None if engine == "sqlite" else redis_url)
        replicas = []
        for index in range(count):
            port = free_port()
            argv = _app_argv("taskhub", port, options)
            replicas.append(
                await stack.enter_async_context(
                    served(f"{name}{index}", argv, env, port, token, log_path, url)
                )
            )
        postmaster = await pg_server_pid(options.pg_admin_url) if engine == "postgres" else None
        yield Server(name, replicas, postmaster)


# -- worker processes ----------------------------------------------------------------------


async def _spawn(
    argv: list[str], env: dict[str, str], log_path: Path
) -> asyncio.subprocess.Process:
    with log_path.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            *argv,
            cwd=REPO_ROOT,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=out,
        )


def _worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHUB_")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@asynccontextmanager
async def worker_processes(
    system: str, server: Server, room: str, layout: Layout, poll: float, workdir: Path
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """The system's worker processes, registered and ready; stopped after (SDK workers by
    SIGTERM, which drains and leaves; ``JobManager`` processes by closing their stdin)."""
    processes: list[asyncio.subprocess.Process] = []
    log_path = workdir / f"workers-{system}-{layout.name}.log"
    try:
        for index in range(layout.processes):
            url = server.url(index)
            if system in SDK_SYSTEMS:
                argv = [
                    sys.executable,
                    "-m",
                    "taskhub.cli",
                    "worker",
                    "benchmarks.apps.sdk_worker:Noop",
                ]
                argv += ["--room", room, "--concurrency", str(layout.concurrency)]
                if system.endswith("-claims"):
                    argv.append("--no-push")
                if system.endswith("-patch"):
                    argv.append("--no-socket-updates")
                env = {**_worker_env(), "TASKHUB_URL": url, "TASKHUB_TOKEN": server.token}
            else:
                argv = [
                    sys.executable,
                    "-m",
                    "benchmarks.apps.sdk_joblib_worker",
                    url,
                    server.token,
                ]
                argv += [room, str(layout.concurrency), str(poll)]
                env = _worker_env()
            processes.append(await _spawn(argv, env, log_path))
        await _until_ready(system, server, room, layout, processes, log_path)
        yield processes
    finally:
        await _stop_workers(system, processes)


async def _until_ready(
    system: str,
    server: Server,
    room: str,
    layout: Layout,
    processes: list[asyncio.subprocess.Process],
    log_path: Path,
) -> None:
    async with asyncio.timeout(READY_SECONDS):
        if system not in SDK_SYSTEMS:
            for process in processes:
                assert process.stdout is not None
                line = await process.stdout.readline()
                if line.strip() != b"ready":
                    raise TargetError(f"a JobManager process did not start:\n{_tail(log_path)}")
            return
        async with _client(server.url(0), server.token) as http:
            while True:
                if any(p.returncode is not None for p in processes):
                    raise TargetError(f"a worker process exited:\n{_tail(log_path)}")
                response = await http.get(f"{API}/rooms/{room}/jobs")
                items = response.json().get("items", []) if response.status_code == 200 else []
                workers = sum(_count(item.get("workers")) for item in items)
                if workers >= layout.processes:
                    return
                await asyncio.sleep(0.2)


def _count(workers: Any) -> int:
    return len(workers) if isinstance(workers, list) else int(workers or 0)


def _tail(path: Path, lines: int = 15) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


async def _stop_workers(system: str, processes: list[asyncio.subprocess.Process]) -> None:
    for process in processes:
        if process.returncode is not None:
            continue
        if system in SDK_SYSTEMS:
            process.terminate()
        elif process.stdin is not None:
            process.stdin.close()
    for process in processes:
        try:
            await asyncio.wait_for(process.wait(), STOP_SECONDS)
        except TimeoutError:
            process.kill()
            await process.wait()


# -- measuring -----------------------------------------------------------------------------


def _client(url: str, token: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30.0, trust_env=False
    )


async def request_counts(server: Server) -> Counter[str]:
    """The requests every replica of ``server`` has answered so far, by kind."""
    counts: Counter[str] = Counter()
    for replica in server.replicas:
        async with _client(replica.base_url, replica.token) as http:
            counts.update((await http.get("/bench/requests")).json())
    return counts


def cpu_readings(server: Server, workers: list[asyncio.subprocess.Process]) -> dict[str, float]:
    """CPU seconds so far: the hub (all replicas), its database server (PostgreSQL), the
    worker processes, and this client."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    hub = [process_cpu_seconds(replica.pid) for replica in server.replicas]
    worker = [process_cpu_seconds(process.pid) for process in workers]
    return {
        "hub": sum(v for v in hub if v is not None),
        "database": server_cpu_seconds(server.database_pid) or 0.0,
        "workers": sum(v for v in worker if v is not None),
        "client": usage.ru_utime + usage.ru_stime,
    }


async def submit_tasks(
    server: Server, room: str, count: int, submitters: int, rate: float | None
) -> list[str]:
    """Submit ``count`` tasks with the SDK's ``AsyncClient``, ``submitters`` at once (spread
    over the replicas): as fast as they go, or paced to ``rate`` a second in all. The clock
    starts once every submitter has connected (a read of an unknown task each), so that no
    connection set-up delays the first tasks into a burst."""
    from taskhub.sdk import AsyncClient, NotFound

    ids: list[str] = []
    connected, all_connected = 0, asyncio.Event()
    start = 0.0
    next_index = iter(range(count))

    async def submitter(index: int) -> None:
        nonlocal connected, start
        async with AsyncClient(server.url(index), server.token, timeout=30.0) as client:
            with contextlib.suppress(NotFound):
                await client.get(str(uuid.uuid4()))
            connected += 1
            if connected == submitters:
                start = time.perf_counter()
                all_connected.set()
            await all_connected.wait()
            for i in next_index:
                if rate is not None:
                    delay = start + i / rate - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                handle = await client.submit(f"{room}:{JOB}", {}, room=room)
                ids.append(handle.id)

    await asyncio.gather(*(submitter(index) for index in range(submitters)))
    return ids


async def room_tasks(server: Server, room: str) -> list[dict[str, Any]]:
    """Every task of the room, as listed (500 a page)."""
    tasks: list[dict[str, Any]] = []
    async with _client(server.url(0), server.token) as http:
        while True:
            params: dict[str, Any] = {"limit": 500, "offset": len(tasks)}
            page = (await http.get(f"{API}/rooms/{room}/tasks", params=params)).json()
            tasks += page["items"]
            if not page["items"] or len(tasks) >= page["total"]:
                return tasks


async def until_completed(server: Server, room: str, total: int) -> None:
    """Until ``total`` tasks of the room are completed (a cheap count, every 0.1 s)."""
    async with _client(server.url(0), server.token) as http:
        while True:
            params: dict[str, str | int] = {"status": "completed", "limit": 1}
            page = (await http.get(f"{API}/rooms/{room}/tasks", params=params)).json()
            if page["total"] >= total:
                return
            await asyncio.sleep(0.1)


def _moment(text: str | None) -> datetime | None:
    if text is None:
        return None
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # the reference's are naive


def timings(tasks: list[dict[str, Any]], ids: set[str]) -> tuple[list[float], float | None]:
    """Submit → running seconds of the tasks ``ids``, and their rate from the first one's
    submission to the last one's completion (the hub's own clock)."""
    mine = [task for task in tasks if task["id"] in ids]
    waits, created, completed = [], [], []
    for task in mine:
        start, begun, end = (_moment(task[k]) for k in ("created_at", "started_at", "completed_at"))
        if start is None or begun is None or end is None:
            continue
        waits.append((begun - start).total_seconds())
        created.append(start)
        completed.append(end)
    if not created:
        return waits, None
    span = (max(completed) - min(created)).total_seconds()
    return waits, (len(created) / span if span > 0 else None)


def latency(waits: list[float]) -> dict[str, float | None]:
    return {
        "p50_ms": ms(percentile(waits, 50)),
        "p95_ms": ms(percentile(waits, 95)),
        "p99_ms": ms(percentile(waits, 99)),
    }


async def phase(
    server: Server,
    room: str,
    count: int,
    sizes: Sizes,
    rate: float | None,
    already: int,
) -> tuple[list[float], float | None, list[str]]:
    """Submit ``count`` tasks (paced to ``rate`` or as fast as they go) and wait until they
    are done; their submit → running waits, their rate, and their ids."""
    ids = await submit_tasks(server, room, count, sizes.submitters, rate)
    await until_completed(server, room, already + count)
    waits, measured = timings(await room_tasks(server, room), set(ids))
    return waits, measured, ids


async def measure(
    system: str,
    server: Server,
    layout: Layout,
    sizes: Sizes,
    poll: float,
    workdir: Path,
) -> list[dict[str, Any]]:
    """One system at one layout: saturation, then the fixed offered rates."""
    room = f"bench-{layout.name}-{uuid.uuid4().hex[:8]}"
    base = {"scenario": "sdk", "system": system, "layout": layout.name}
    async with worker_processes(system, server, room, layout, poll, workdir) as workers:
        async with asyncio.timeout(sizes.timeout):
            done = 0
            warm = max(layout.slots, 10)
            await phase(server, room, warm, sizes, None, done)  # connections, caches, JIT
            done += warm
            counts = await request_counts(server)
            cpu = cpu_readings(server, workers)
            tasks = sizes.tasks // 5 if system == "reference" else sizes.tasks
            waits, saturated, _ids = await phase(server, room, tasks, sizes, None, done)
            done += tasks
            cpu_after = cpu_readings(server, workers)
            counted = await request_counts(server) - counts
            results = [
                {
                    **base,
                    "phase": "saturation",
                    "offered_per_s": None,
                    "tasks": tasks,
                    "tasks_per_s": None if saturated is None else round(saturated, 1),
                    **latency(waits),
                    **requests_per_task(counted, tasks),
                    **cpu_per_task(cpu, cpu_after, tasks),
                    "load_avg_1m": load_average(),
                    "error": None,
                }
            ]
            rates = [(rate, f"{rate:g}/s") for rate in sizes.rates]
            if saturated:
                rates.append((saturated / 2, "half saturation"))
            for rate, label in rates:
                count = max(int(rate * sizes.rate_seconds), 10)
                waits, achieved, _ids = await phase(server, room, count, sizes, rate, done)
                done += count
                results.append(
                    {
                        **base,
                        "phase": label,
                        "offered_per_s": round(rate, 1),
                        "tasks": count,
                        "tasks_per_s": None if achieved is None else round(achieved, 1),
                        **latency(waits),
                        "load_avg_1m": load_average(),
                        "error": None,
                    }
                )
    return results


def requests_per_task(counted: Counter[str], tasks: int) -> dict[str, Any]:
    """The workers' requests per task (all but the benchmark's own), and each kind's."""
    workers = {kind: n for kind, n in counted.items() if kind not in OWN_KINDS and n > 0}
    return {
        "requests_per_task": round(sum(workers.values()) / tasks, 2),
        "hub_requests_per_task": round(sum(counted.values()) / tasks, 2),
        "requests": {kind: round(n / tasks, 3) for kind, n in sorted(workers.items())},
    }


def cpu_per_task(before: dict[str, float], after: dict[str, float], tasks: int) -> dict[str, Any]:
    return {f"cpu_ms_{key}": round(1000 * (after[key] - before[key]) / tasks, 3) for key in before}


async def measure_ceiling(server: Server, layout: Layout, sizes: Sizes) -> dict[str, Any]:
    """The ceiling app with the raw four-request client at W = P x C workers."""
    target = server.replicas[0]
    scenario = throughput.Scenario(sizes.tasks, sizes.submitters, 0.005, sizes.timeout)
    counts = await request_counts(server)
    hub_cpu = process_cpu_seconds(target.pid) or 0.0
    result = await throughput.run_scenario(target, layout.slots, scenario)
    counted = await request_counts(server) - counts
    hub_used = (process_cpu_seconds(target.pid) or 0.0) - hub_cpu
    completed = result["completed"] or 1
    return {
        "scenario": "sdk",
        "system": "ceiling",
        "layout": layout.name,
        "phase": "saturation",
        "offered_per_s": None,
        "tasks": sizes.tasks,
        "tasks_per_s": result["tasks_per_s"],
        "p50_ms": None,
        "p95_ms": None,
        "p99_ms": None,
        **requests_per_task(counted, completed),
        "cpu_ms_hub": round(1000 * hub_used / completed, 3),
        "cpu_ms_database": 0.0,
        "cpu_ms_workers": None,
        "cpu_ms_client": None
        if result["client_cpu_s"] is None
        else round(1000 * result["client_cpu_s"] / completed, 3),
        "load_avg_1m": load_average(),
        "error": result["error"],
    }


def failed(system: str, layout: Layout, error: str) -> dict[str, Any]:
    return {
        "scenario": "sdk",
        "system": system,
        "layout": layout.name,
        "phase": "saturation",
        "tasks_per_s": None,
        "error": error,
    }


RUN_FAILURES = (TargetError, httpx.HTTPError, OSError, TimeoutError, KeyError, ValueError)


async def start_servers(
    stack: AsyncExitStack, names: list[str], options: TargetOptions, redis_url: str
) -> dict[str, Server | str]:
    """The round's servers, started side by side (their start-ups overlap), each stopped
    when ``stack`` closes; one that could not start is the message of its error."""

    async def start(name: str) -> Server | str:
        own = AsyncExitStack()
        try:
            server = await own.enter_async_context(start_server(name, options, redis_url))
        except RUN_FAILURES as exc:
            await own.aclose()
            return f"{type(exc).__name__}: {exc}"
        stack.push_async_callback(own.aclose)
        return server

    started = await asyncio.gather(*(start(name) for name in names))
    return dict(zip(names, started, strict=True))


async def bench_sdk(
    options: TargetOptions,
    systems: list[str],
    layouts: list[Layout],
    sizes: Sizes,
    rounds: int,
    poll: float,
    redis_url: str,
    results: Results,
) -> None:
    """Every round: each server started once; every system on it measured at each layout,
    the systems interleaved per layout."""
    for round_number in range(1, rounds + 1):
        names = list(dict.fromkeys(SERVERS[system] for system in systems))
        log(f"round {round_number}: starting {', '.join(names)} ...")
        async with AsyncExitStack() as stack:
            servers = await start_servers(stack, names, options, redis_url)
            for layout in layouts:
                for system in systems:
                    server = servers[SERVERS[system]]
                    lines = await _measured(system, server, layout, sizes, poll, options)
                    for line in lines:
                        results.append(emit({**line, "round": round_number}))
                        _progress(results[-1])


async def _measured(
    system: str,
    server: Server | str,
    layout: Layout,
    sizes: Sizes,
    poll: float,
    options: TargetOptions,
) -> list[dict[str, Any]]:
    if isinstance(server, str):
        return [failed(system, layout, server)]
    try:
        if system == "ceiling":
            return [await measure_ceiling(server, layout, sizes)]
        return await measure(system, server, layout, sizes, poll, options.workdir)
    except RUN_FAILURES as exc:
        log(f"{system} {layout.name} failed: {type(exc).__name__}: {exc}")
        return [failed(system, layout, f"{type(exc).__name__}: {exc}")]


def _progress(result: dict[str, Any]) -> None:
    shown = f"{result['system']} {result['layout']} {result['phase']}"
    if result.get("offered_per_s"):
        shown += f" @{result['offered_per_s']}/s"
    shown += f": {result.get('tasks_per_s')} tasks/s, p95 {result.get('p95_ms')} ms"
    if result.get("requests_per_task") is not None:
        shown += f", {result['requests_per_task']} worker requests/task"
    log(shown + (f", ERROR: {result['error']}" if result.get("error") else ""))


# -- tables ----------------------------------------------------------------------------------


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 2) if values else None


def table(results: Results) -> str:
    """Medians over the rounds, per system and layout: saturation rate and its share of the
    same round's ceiling, requests and CPU per task, and submit → running latencies."""
    ok = [r for r in results if r.get("scenario") == "sdk" and not r.get("error")]
    ceiling = {
        (r["round"], r["layout"]): r["tasks_per_s"]
        for r in ok
        if r["system"] == "ceiling" and r["tasks_per_s"]
    }
    grouped: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in ok:
        grouped[(r["system"], r["layout"], r["phase"])].append(r)
    rows = []
    for (system, layout, kind), runs in grouped.items():
        rates = [r["tasks_per_s"] for r in runs if r["tasks_per_s"] is not None]
        shares = [
            r["tasks_per_s"] / ceiling[(r["round"], layout)]
            for r in runs
            if r["tasks_per_s"] and ceiling.get((r["round"], layout))
        ]
        saturation = kind == "saturation"
        cpu = (
            " / ".join(
                "-"
                if (m := _median([r[k] for r in runs if r.get(k) is not None])) is None
                else f"{m:.2f}"
                for k in ("cpu_ms_hub", "cpu_ms_database", "cpu_ms_workers", "cpu_ms_client")
            )
            if saturation
            else ""
        )
        rows.append(
            [
                system,
                layout,
                kind,
                len(runs),
                _median(rates),
                f"{_median(shares):.2f}" if saturation and shares else "",
                _median(
                    [r["requests_per_task"] for r in runs if r.get("requests_per_task") is not None]
                )
                if saturation
                else "",
                cpu,
                *(
                    _median([r[k] for r in runs if r.get(k) is not None])
                    for k in ("p50_ms", "p95_ms", "p99_ms")
                ),
            ]
        )
    headers = ["system", "layout", "phase", "rounds", "tasks/s", "share of ceiling"]
    headers.append("worker req/task")
    headers += ["CPU ms/task hub / db / workers / client", "p50 ms", "p95 ms", "p99 ms"]
    failures = [f"- {r['system']} {r['layout']}: {r['error']}" for r in results if r.get("error")]
    text = markdown_table(headers, rows, left=3)
    return text + ("\n\nFailed:\n" + "\n".join(failures) if failures else "")


# -- command line ------------------------------------------------------------------------------

FULL = Sizes(tasks=1000, rate_seconds=3.0, rates=[50.0], submitters=16, timeout=240.0)
# A smoke run: every phase, with as few tasks as still give each system's requests per task.
QUICK = Sizes(tasks=30, rate_seconds=0.5, rates=[20.0], submitters=2, timeout=120.0)
DEFAULT_LAYOUTS = [Layout(1, 1), Layout(1, 16), Layout(4, 4)]
QUICK_LAYOUTS = [Layout(1, 2)]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser("sdk", __doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--systems",
        type=choices(SYSTEMS, "systems"),
        default=list(SYSTEMS),
        help="comma-separated: " + ", ".join(SYSTEMS),
    )
    parser.add_argument(
        "--layouts",
        type=lambda text: [parse_layout(part) for part in text.split(",") if part.strip()],
        help="PxC worker processes x concurrency, e.g. 1x1,1x16,4x4",
    )
    parser.add_argument("--tasks", type=int, help="tasks per saturation run")
    parser.add_argument(
        "--rates", type=csv_rates, help="fixed offered rates, tasks/s (half saturation is added)"
    )
    parser.add_argument("--rate-seconds", type=float, help="seconds per fixed-rate run")
    parser.add_argument("--submitters", type=int, help="submitting clients at once")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds")
    parser.add_argument(
        "--joblib-poll", type=float, default=DEFAULT_JOBLIB_POLL, help="JobManager poll s"
    )
    parser.add_argument("--redis-url", default=REDIS_URL)
    return parser.parse_args(argv)


def csv_rates(text: str) -> list[float]:
    """``argparse`` type: comma-separated positive rates."""
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        rates = []
    if not rates or min(rates) <= 0:
        raise argparse.ArgumentTypeError("expected positive rates, e.g. 50 or 20,50")
    return rates


def sizes_of(args: argparse.Namespace) -> tuple[Sizes, list[Layout], int]:
    sizes = QUICK if args.quick else FULL
    changes = {
        name: value
        for name, value in (
            ("tasks", args.tasks),
            ("rates", args.rates),
            ("rate_seconds", args.rate_seconds),
            ("submitters", args.submitters),
        )
        if value is not None
    }
    layouts = args.layouts or (QUICK_LAYOUTS if args.quick else DEFAULT_LAYOUTS)
    rounds = args.rounds or (1 if args.quick else 2)
    return replace(sizes, **changes), layouts, rounds


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes, layouts, rounds = sizes_of(args)

    async def work(options: TargetOptions, results: Results) -> None:
        await bench_sdk(
            options, args.systems, layouts, sizes, rounds, args.joblib_poll, args.redis_url, results
        )

    return run_command(args, "sdk", work, table)


if __name__ == "__main__":
    sys.exit(main())
