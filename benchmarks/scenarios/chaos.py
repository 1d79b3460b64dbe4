"""Chaos: one fault on a steady load, and what it cost: tasks lost, outcomes accepted twice,
tasks left unfinished, recovery time, errors clients saw.

    .venv/bin/python -m benchmarks chaos                                  # every scenario
    .venv/bin/python -m benchmarks chaos --scenario hub-sigkill --engine sqlite
    .venv/bin/python -m benchmarks chaos --quick --json-out chaos.jsonl

Every run starts its own hub: real ``taskhub serve`` processes on an SQLite file or on a
database of a **private** PostgreSQL cluster (``benchmarks/harness/postgres_cluster.py``:
``initdb`` in a temporary directory, a free port, stopped and removed at the end: the faults
never reach another PostgreSQL), a private ``redis-server``
(``benchmarks/harness/servers.py``) and HAProxy (``benchmarks/harness/balancer.py``:
round-robin, sticky by cookie) where the scenario needs them. Then the load: submitters at a
fixed rate (httpx, ``POST /rooms/chaos/tasks/…``) and three ``taskhub worker
benchmarks.apps.chaos_jobs:ChaosWork`` processes, each writing a ledger of every execution
and of the answer to its terminal ``PATCH`` (``benchmarks/apps/chaos_jobs.py``). After a warm-up
and a measured stretch, one fault; the load goes on, stops, and everything drains (until
every task of the room is terminal, or the drain timeout). Figures, per run:

- ``lost``: tasks acknowledged (2xx to the submit) and absent, or not terminal, after the
  drain (must be 0); ``non_terminal``: tasks of the room not terminal after the drain;
- ``double_accepted``: tasks with two executions (two claim tokens) whose terminal
  ``PATCH`` was accepted (must be 0; a second execution after a lost lease is allowed and
  counted in ``re_executed``); ``refused_409``: terminal ``PATCH``es refused as stale;
- ``recovery_s``: from the fault to the end of the last 3-second window (before the load
  stops) in which completions fell under 90 % of the rate before the fault (0: they never
  did; null: still under at the end of the load);
- ``pickup_p50_ms_before``/``_after``: median wait from submit to start, of tasks
  submitted before the fault and from a second after its end (the workers' claim backstop
  is 2 s: shorter waits are ``task_available`` wake-ups);
- ``client_errors``: the submitters' failures by kind (``http-503``, ``ReadTimeout``, …).

One JSON line per run on stdout as soon as it ends, a markdown table on stderr at the end
(the layout of ``python -m benchmarks``). Not part of ``python -m benchmarks``: it takes
10 minutes or more and restarts databases; run it on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import asyncpg
import httpx

from benchmarks.apps.chaos_jobs import LEDGER_ENV
from benchmarks.harness.balancer import Balancer
from benchmarks.harness.cli import choices, run_main, scenario_parser
from benchmarks.harness.postgres_cluster import ClusterError, PostgresCluster, throwaway_cluster
from benchmarks.harness.report import (
    Results,
    emit,
    load_average,
    log,
    markdown_table,
    ms,
    percentile,
)
from benchmarks.harness.servers import (
    REPO_ROOT,
    HubServer,
    RedisServer,
    ServerError,
    TaskiqWorker,
    migrate,
    migrated_sqlite_template,
    new_admin_token,
    taskhub_command,
)
from benchmarks.harness.targets import TargetError

HOST = "127.0.0.1"
PREFIX = "/v1/joblib"
ROOM = "chaos"
JOB = f"{ROOM}:modifiers:ChaosWork"
INTERNAL_JOB = "@internal:modifiers:ChaosInternal"
TERMINAL = {"completed", "failed", "cancelled"}
ENGINES = ("sqlite", "postgresql")
PAGE = 500
RECOVERY_WINDOW_S = 3
RECOVERED_SHARE = 0.9
# Hub timings short enough that leases, silent workers and retries resolve within seconds.
WORKER_TIMEOUT_S = 3.0
HUB_TIMINGS = {
    "TASKHUB_WORKER_TIMEOUT_SECONDS": str(WORKER_TIMEOUT_S),
    "TASKHUB_TASK_LEASE_SECONDS": "6",
    "TASKHUB_SWEEPER_INTERVAL_SECONDS": "0.5",
    "TASKHUB_RETRY_BACKOFF_SECONDS": "0.2",
    "TASKHUB_RETRY_BACKOFF_MAX_SECONDS": "1",
    "TASKHUB_SOCKET_DISCONNECT_GRACE_SECONDS": "1",
    "TASKHUB_DB_POOL_TIMEOUT_SECONDS": "2",
    "TASKHUB_DB_STATEMENT_TIMEOUT_SECONDS": "5",
    "TASKHUB_GRACEFUL_SHUTDOWN_SECONDS": "2",
    "TASKHUB_INTERNAL_REDELIVERY_SECONDS": "3",
    "TASKHUB_INTERNAL_TASK_TIMEOUT_SECONDS": "20",
    "TASKHUB_INTERNAL_JOB_MODULES": "benchmarks.apps.chaos_jobs",
    "TASKHUB_LOG_LEVEL": "warning",
}
# No fsync (the machine does not crash, only PostgreSQL: what was written to the kernel
# survives), but synchronous_commit stays on: off, an immediate shutdown would lose commits
# the hub had acknowledged, a loss of the harness, not of the hub.
POSTGRES_SETTINGS = {
    "max_connections": "60",
    "superuser_reserved_connections": "0",
    "fsync": "off",
    "full_page_writes": "off",
    "timezone": "Etc/UTC",
}


class ChaosError(RuntimeError):
    """A part of the harness (not the hub under test) could not be set up."""


# What ends one run as an error line, the other runs still going.
RUN_FAILURES = (ChaosError, ClusterError, TargetError, ServerError, OSError, httpx.HTTPError)


@dataclass(frozen=True)
class Sizes:
    """How long and how hard each run is."""

    rate: float = 20.0  # tasks submitted per second
    task_seconds: float = 0.1  # each execution sleeps this long
    workers: int = 3  # SDK worker processes
    concurrency: int = 2  # tasks each runs at once
    warmup_s: float = 2.0  # load before the measured stretch
    before_s: float = 6.0  # measured stretch before the fault
    after_s: float = 15.0  # load after the fault has ended
    hold_s: float = 30.0  # pool exhaustion: how long the connections are held
    drain_s: float = 60.0  # bound on the drain
    internal_rate: float = 2.0  # @internal tasks per second (taskiq scenario)
    kills: int = 5  # hub-sigkill: how many times in a row


FULL = Sizes()
QUICK = Sizes(rate=10.0, warmup_s=1.0, before_s=3.0, after_s=6.0, hold_s=4.0, drain_s=45.0)


# --- private PostgreSQL ----------------------------------------------------------------


class PrivatePostgres:
    """The run's own PostgreSQL cluster (``private_postgres``): the hub's databases are made
    in it, and the database faults restart it, end its sessions and take its slots."""

    def __init__(self, cluster: PostgresCluster) -> None:
        self.cluster = cluster
        self._template: str | None = None

    def restart(self, mode: str) -> None:
        """``pg_ctl restart -m fast|immediate``, on the same port."""
        self.cluster.restart(mode)

    @property
    def admin_dsn(self) -> str:
        return self.cluster.url()

    def url(self, database: str) -> str:
        return self.cluster.url(database, "postgresql+asyncpg")

    async def new_database(self) -> str:
        """A fresh, migrated database (a copy of one ``taskhub migrate`` made, once)."""
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            if self._template is None:
                await conn.execute('CREATE DATABASE "chaos_template"')
                await asyncio.to_thread(migrate, self.url("chaos_template"))
                self._template = "chaos_template"
            name = f"chaos_{uuid.uuid4().hex[:12]}"
            await conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self._template}"')
        finally:
            await conn.close()
        return self.url(name)

    async def terminate(self, database: str) -> int:
        """``pg_terminate_backend`` on every session of ``database``; how many went."""
        conn = await asyncpg.connect(self.admin_dsn)
        try:
            return int(
                await conn.fetchval(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))"
                    " FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()",
                    database,
                )
            )
        finally:
            await conn.close()


# --- the hub and its workers -----------------------------------------------------------


class PinnedHub(HubServer):
    """A ``HubServer`` that, restarted, listens on the port it first had: clients and
    workers keep one address across a crash."""

    pinned: int | None = None

    def _spawn(self) -> None:
        if self.pinned is not None:
            self.port = self.pinned
        super()._spawn()

    def start(self, attempts: int = 3) -> HubServer:
        super().start(attempts)
        self.pinned = self.port
        return self


class WorkerProcesses:
    """``taskhub worker benchmarks.apps.chaos_jobs:ChaosWork`` processes, each in a session
    of its own, each writing its ledger into ``ledgers``."""

    def __init__(
        self, directory: Path, url: str, token: str, sizes: Sizes, *, sockets: bool
    ) -> None:
        self.directory = directory
        self.ledgers = directory / "ledgers"
        self.ledgers.mkdir(parents=True, exist_ok=True)
        self.url = url
        self.token = token
        self.sizes = sizes
        self.sockets = sockets
        self.processes: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    def spawn(self) -> subprocess.Popen[bytes]:
        argv = taskhub_command(
            "worker",
            "benchmarks.apps.chaos_jobs:ChaosWork",
            *("--url", self.url, "--token", self.token, "--room", ROOM),
            *("--concurrency", str(self.sizes.concurrency)),
            # The SDK's own claim backstop (2 s): a task is picked up within it by a wake-up
            # (``task_available``), so the pick-up wait shows whether wake-ups work.
            *("--server-timeout", str(WORKER_TIMEOUT_S), "--poll-interval", "2"),
            *("--drain-timeout", "3", "--log-level", "warning"),
            *(() if self.sockets else ("--no-sockets",)),
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("TASKHUB_")}
        env |= {LEDGER_ENV: str(self.ledgers), "PYTHONUNBUFFERED": "1"}
        out = (self.directory / f"worker-{len(self.processes)}.log").open("ab")
        self._logs.append(out)
        process = subprocess.Popen(
            argv,
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def live(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.processes if p.poll() is None]

    def busy(self) -> list[subprocess.Popen[bytes]]:
        """Live workers with an execution begun and not yet ended, per their ledgers."""
        entries = read_ledgers(self.ledgers)
        begun = {(e["pid"], e["task"], e["attempt"]) for e in entries if e["kind"] == "run"}
        ended = {(e["pid"], e["task"], e["attempt"]) for e in entries if e["kind"] == "end"}
        pids = {pid for pid, *_ in begun - ended}
        return [p for p in self.live() if p.pid in pids]

    def stop(self) -> None:
        for process in self.live():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGCONT)
                process.terminate()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)
        for out in self._logs:
            out.close()

    def output(self) -> str:
        return "\n".join(
            f"--- {path.name} ---\n{path.read_text(errors='replace')[-1500:]}"
            for path in sorted(self.directory.glob("worker-*.log"))
        )


def read_ledgers(directory: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for path in sorted(directory.glob("ledger-*.jsonl")):
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):  # a line cut by SIGKILL
                entries.append(json.loads(line))
    return entries


@dataclass
class Deployment:
    """What one run started: the address clients use, the hub processes and services."""

    url: str
    token: str
    servers: list[PinnedHub]
    database: str | None = None  # the PostgreSQL database's name
    redis: RedisServer | None = None
    proxy: Balancer | None = None
    taskiq: TaskiqWorker | None = None
    workers: WorkerProcesses | None = None

    def logs(self) -> str:
        parts = [f"--- {s.log_path.name} ---\n{s.output()[-3000:]}" for s in self.servers]
        if self.taskiq is not None:
            parts.append(f"--- taskiq ---\n{self.taskiq.output()[-2000:]}")
        if self.workers is not None:
            parts.append(self.workers.output())
        return "\n".join(parts)


@contextlib.asynccontextmanager
async def deployment(
    kind: str, engine: str, directory: Path, sizes: Sizes, postgres: PrivatePostgres | None
) -> AsyncIterator[Deployment]:
    """``kind`` ``single`` (one hub), ``replicas`` (two hubs on PostgreSQL and a private
    Redis behind HAProxy) or ``internal`` (one hub, a private Redis, a taskiq worker); the
    SDK workers started, the job registered. Everything stopped after."""
    with contextlib.ExitStack() as stack:
        env = dict(HUB_TIMINGS)
        redis: RedisServer | None = None
        if kind in ("replicas", "internal"):
            redis = stack.enter_context(RedisServer(directory / "redis"))
            env["TASKHUB_REDIS_URL"] = redis.url
        if engine == "sqlite":
            path = directory / "hub.db"
            shutil.copyfile(migrated_sqlite_template(), path)
            url, database = f"sqlite+aiosqlite:///{path}", None
        else:
            if postgres is None:
                raise ChaosError("PostgreSQL runs need the private cluster")
            url = await postgres.new_database()
            database = url.rsplit("/", 1)[1]
        token = new_admin_token()
        count = 2 if kind == "replicas" else 1
        servers = [
            PinnedHub(url, admin_token=token, log_dir=directory, env=env, log_name=f"hub-{i}.log")
            for i in range(count)
        ]
        for server in servers:
            await asyncio.to_thread(server.start)
            stack.callback(server.stop)
        proxy: Balancer | None = None
        address = worker_address = servers[0].base_url
        if kind == "replicas":
            proxy = Balancer([s.port for s in servers])
            await asyncio.to_thread(proxy.start)
            stack.callback(proxy.__exit__, None, None, None)
            # The SDK's Socket.IO client (aiohttp) keeps the balancer's stickiness cookie
            # only under a host name, not an IP address.
            address, worker_address = proxy.base_url, proxy.url_on("localhost")
        taskiq: TaskiqWorker | None = None
        if kind == "internal":
            taskiq = TaskiqWorker(
                url, env={**env, LEDGER_ENV: str(directory / "ledgers")}, log_dir=directory
            )
            (directory / "ledgers").mkdir(parents=True, exist_ok=True)
            await asyncio.to_thread(taskiq.start)
            stack.callback(taskiq.stop)
        workers = WorkerProcesses(directory, worker_address, token, sizes, sockets=True)
        stack.callback(workers.stop)
        hub = Deployment(address, token, servers, database, redis, proxy, taskiq, workers)
        for _ in range(sizes.workers):
            workers.spawn()
        try:
            await until_workers_serve(hub, sizes.workers)
        except ChaosError as exc:
            raise ChaosError(f"{exc}\n{hub.logs()}") from None
        yield hub


async def until_workers_serve(hub: Deployment, count: int, within: float = 60.0) -> None:
    """Until ``count`` workers serve the room's job."""
    deadline = time.monotonic() + within
    async with client(hub) as http:
        while True:
            with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                page = (await http.get(f"{PREFIX}/rooms/{ROOM}/workers")).json()
                if page["total"] >= count:
                    return
            if time.monotonic() > deadline:
                raise ChaosError(f"{count} workers did not register within {within}s")
            await asyncio.sleep(0.2)


def client(hub: Deployment, timeout: float = 10.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=hub.url,
        headers={"Authorization": f"Bearer {hub.token}"},
        timeout=timeout,
        trust_env=False,
        limits=httpx.Limits(max_connections=64),
    )


# --- the load --------------------------------------------------------------------------


@dataclass
class Load:
    """What the submitters did: acknowledged task ids and their failures by kind."""

    acknowledged: set[str] = field(default_factory=set)
    internal: set[str] = field(default_factory=set)
    errors: Counter[str] = field(default_factory=Counter)
    sent: int = 0


async def submit_at_rate(
    hub: Deployment,
    load: Load,
    rate: float,
    stop: asyncio.Event,
    body: Callable[[int], dict[str, Any]],
    job: str,
    acknowledged: set[str],
) -> None:
    """One submit every ``1/rate`` seconds until ``stop`` is set, each on its own (a slow
    answer does not slow the rate down); returns once every submit has its answer."""
    pending: set[asyncio.Task[None]] = set()

    async def one(n: int) -> None:
        try:
            response = await http.post(f"{PREFIX}/rooms/{ROOM}/tasks/{job}", json=body(n))
        except httpx.HTTPError as exc:
            load.errors[type(exc).__name__] += 1
            return
        http.cookies.clear()  # no stickiness: submits spread over the replicas
        if response.is_success:
            acknowledged.add(response.json()["id"])
        else:
            load.errors[f"http-{response.status_code}"] += 1

    async with client(hub) as http:
        n = 0
        start = time.monotonic()
        while True:
            wait = start + n / rate - time.monotonic()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, wait))
            if stop.is_set():
                break
            load.sent += 1
            task = asyncio.create_task(one(n))
            pending.add(task)
            task.add_done_callback(pending.discard)
            n += 1
        if pending:
            await asyncio.wait(pending)


async def room_tasks(hub: Deployment) -> list[dict[str, Any]]:
    """Every task of the room (pages of ``PAGE``)."""
    items: list[dict[str, Any]] = []
    async with client(hub, timeout=30.0) as http:
        offset = 0
        while True:
            response = await http.get(
                f"{PREFIX}/rooms/{ROOM}/tasks", params={"limit": PAGE, "offset": offset}
            )
            response.raise_for_status()
            page = response.json()["items"]
            items.extend(page)
            if len(page) < PAGE:
                return items
            offset += PAGE


async def drain(hub: Deployment, wanted: set[str], within: float) -> list[dict[str, Any]]:
    """Until every ``wanted`` task, and every other task of the room (those whose submit
    got no answer but was stored), is terminal, or ``within`` seconds; the room's tasks."""
    deadline = time.monotonic() + within
    tasks: list[dict[str, Any]] = []
    while True:
        with contextlib.suppress(httpx.HTTPError):
            tasks = await room_tasks(hub)
            done = {t["id"] for t in tasks if t["status"] in TERMINAL}
            if wanted <= done and len(done) == len(tasks):
                return tasks
        if time.monotonic() > deadline:
            return tasks
        await asyncio.sleep(0.5)


# --- the faults ------------------------------------------------------------------------


@dataclass
class Context:
    hub: Deployment
    sizes: Sizes
    postgres: PrivatePostgres | None
    notes: dict[str, Any] = field(default_factory=dict)


Fault = Callable[[Context], Awaitable[None]]


def pg_restart(mode: str) -> Fault:
    async def fault(ctx: Context) -> None:
        assert ctx.postgres is not None
        started = time.monotonic()
        await asyncio.to_thread(ctx.postgres.restart, mode)
        ctx.notes["restart_s"] = round(time.monotonic() - started, 2)

    return fault


async def pg_backends_killed(ctx: Context) -> None:
    assert ctx.postgres is not None and ctx.hub.database is not None
    ctx.notes["backends_killed"] = await ctx.postgres.terminate(ctx.hub.database)


async def pool_exhausted(ctx: Context) -> None:
    """Another client takes every connection the cluster allows, ends the hub's sessions
    and keeps taking every slot that frees up, for ``hold_s``; then lets them all go."""
    assert ctx.postgres is not None and ctx.hub.database is not None
    held: list[asyncpg.Connection] = []
    refused = 0

    async def grab() -> bool:
        nonlocal refused
        try:
            held.append(await asyncpg.connect(ctx.postgres.admin_dsn, timeout=2))  # type: ignore[union-attr]
            return True
        except (asyncpg.PostgresError, OSError, TimeoutError):
            refused += 1
            return False

    try:
        while await grab():
            pass
        killer = held.pop()  # one of ours ends the hub's sessions, then holds its slot again
        killed = await killer.fetchval(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))"
            " FROM pg_stat_activity WHERE datname = $1",
            ctx.hub.database,
        )
        held.append(killer)
        ctx.notes["backends_killed"] = killed
        deadline = time.monotonic() + ctx.sizes.hold_s
        while time.monotonic() < deadline:
            if not await grab():
                await asyncio.sleep(0.05)
        ctx.notes["connections_held"] = len(held)
    finally:
        await asyncio.gather(*(c.close(timeout=5) for c in held), return_exceptions=True)


async def hub_sigkill(ctx: Context) -> None:
    """SIGKILL the hub, start it again on the same port and database; ``kills`` times in
    a row (five)."""
    server = ctx.hub.servers[0]
    ctx.notes["kills"] = ctx.sizes.kills
    for _ in range(ctx.sizes.kills):
        await asyncio.to_thread(server.kill)
        await asyncio.to_thread(server.start)
        await asyncio.sleep(0.5)


async def replica_sigkill(ctx: Context) -> None:
    """SIGKILL the first replica; it stays down (HAProxy sends its clients to the other)."""
    await asyncio.to_thread(ctx.hub.servers[0].kill)


async def redis_restart(ctx: Context) -> None:
    assert ctx.hub.redis is not None
    await asyncio.to_thread(ctx.hub.redis.restart)


async def taskiq_sigkill(ctx: Context) -> None:
    """SIGKILL the taskiq worker's process group while it runs ``@internal`` tasks, and
    start a new one a second later."""
    taskiq = ctx.hub.taskiq
    assert taskiq is not None
    await asyncio.to_thread(taskiq.kill)
    await asyncio.sleep(1.0)
    await asyncio.to_thread(taskiq.start)


async def workers_sigkill(ctx: Context) -> None:
    """SIGKILL two of the SDK worker processes mid-task; two new ones a second later."""
    workers = ctx.hub.workers
    assert workers is not None
    mid_task = await _stopped_mid_task(workers, 2, ctx.sizes.task_seconds)
    others = [p for p in workers.live() if p not in mid_task]
    victims = (mid_task + others)[:2]
    for process in victims:
        os.killpg(process.pid, signal.SIGKILL)
    ctx.notes["killed_mid_task"] = len(mid_task)
    for process in victims:
        await asyncio.to_thread(process.wait, 10)
    await asyncio.sleep(1.0)
    for _ in victims:
        workers.spawn()


async def worker_sigstop(ctx: Context) -> None:
    """SIGSTOP one worker mid-task (its network as good as gone), past the worker timeout
    and a sweep; then SIGCONT. The worker's own late result meets the fence, unless the SDK
    drops it first (the hub's ``task_cancelled`` or a heartbeat's 404 reaching it before
    its run ends); so the harness also sends, a second later, the late ``PATCH`` a slower
    worker would: ``completed`` with the stopped execution's claim token (``late_patch``:
    its answers by status, all 409 when the fence holds)."""
    workers = ctx.hub.workers
    assert workers is not None
    stopped = await _stopped_mid_task(workers, 1, ctx.sizes.task_seconds)
    if stopped:
        (victim,) = stopped
    else:  # none was caught mid-task: stop one anyway (``stopped_mid_task`` says so)
        victim = workers.live()[0]
        os.killpg(victim.pid, signal.SIGSTOP)
    stale = _in_flight(workers, victim.pid)
    ctx.notes["stopped_mid_task"] = bool(stale)
    await asyncio.sleep(WORKER_TIMEOUT_S * 2 + 1.0)
    os.killpg(victim.pid, signal.SIGCONT)
    await asyncio.sleep(1.0)
    answers: Counter[str] = Counter()
    async with client(ctx.hub) as http:
        for task_id, token in stale:
            body = {"status": "completed", "result": {"late": True}, "claim_token": token}
            answers[
                str((await http.patch(f"{PREFIX}/tasks/{task_id}", json=body)).status_code)
            ] += 1
    ctx.notes["late_patch"] = dict(answers)


def _in_flight(workers: WorkerProcesses, pid: int) -> list[tuple[str, str | None]]:
    """The executions ``pid`` has begun and not ended: (task id, claim token)."""
    entries = [e for e in read_ledgers(workers.ledgers) if e["pid"] == pid]
    ended = {(e["task"], e["attempt"]) for e in entries if e["kind"] == "end"}
    return [
        (e["task"], e["token"])
        for e in entries
        if e["kind"] == "run" and (e["task"], e["attempt"]) not in ended
    ]


async def _stopped_mid_task(
    workers: WorkerProcesses, count: int, task_seconds: float, within: float = 10.0
) -> list[subprocess.Popen[bytes]]:
    """Up to ``count`` workers SIGSTOPped in the middle of a run: by their ledgers, read
    once they are stopped (a stopped process writes nothing more), an execution of theirs
    began less than ``task_seconds`` (its sleep) before the stop, so its job is still
    sleeping and no end report has left. (An execution begun longer ago may have ended at
    the hub with its ledger line not yet written.) A worker not caught so is let go again;
    fewer than ``count`` if no more were caught within ``within`` seconds."""
    deadline = time.monotonic() + within
    stopped: list[subprocess.Popen[bytes]] = []
    while len(stopped) < count and time.monotonic() < deadline:
        for process in workers.busy():
            if process in stopped:
                continue
            os.killpg(process.pid, signal.SIGSTOP)
            began = time.time() - 0.8 * task_seconds
            if any(t > began for t in _run_starts(workers, process.pid)):
                stopped.append(process)
                if len(stopped) == count:
                    break
            else:
                os.killpg(process.pid, signal.SIGCONT)
        await asyncio.sleep(0.005)
    return stopped


def _run_starts(workers: WorkerProcesses, pid: int) -> list[float]:
    """When ``pid``'s executions in flight began (``time.time()``, by its ledger)."""
    entries = [e for e in read_ledgers(workers.ledgers) if e["pid"] == pid]
    ended = {(e["task"], e["attempt"]) for e in entries if e["kind"] == "end"}
    return [
        e["t"] for e in entries if e["kind"] == "run" and (e["task"], e["attempt"]) not in ended
    ]


@dataclass(frozen=True)
class Scenario:
    name: str
    engines: tuple[str, ...]
    deployment: str  # single, replicas or internal
    fault: Fault
    what: str
    max_attempts: int = 3


SCENARIOS = {
    s.name: s
    for s in (
        Scenario(
            "pg-restart-fast",
            ("postgresql",),
            "single",
            pg_restart("fast"),
            "pg_ctl restart -m fast",
        ),
        Scenario(
            "pg-restart-immediate",
            ("postgresql",),
            "single",
            pg_restart("immediate"),
            "pg_ctl restart -m immediate",
        ),
        Scenario(
            "pg-backends-killed",
            ("postgresql",),
            "single",
            pg_backends_killed,
            "pg_terminate_backend on the hub's sessions",
        ),
        Scenario(
            "pool-exhausted",
            ("postgresql",),
            "single",
            pool_exhausted,
            "every connection slot held by another client",
        ),
        Scenario(
            "hub-sigkill",
            ENGINES,
            "single",
            hub_sigkill,
            "hub SIGKILLed and restarted on its port, `kills` times in a row",
        ),
        Scenario(
            "replica-sigkill",
            ("postgresql",),
            "replicas",
            replica_sigkill,
            "1 of 2 replicas (behind HAProxy) SIGKILLed",
        ),
        Scenario(
            "redis-restart",
            ("postgresql",),
            "replicas",
            redis_restart,
            "Redis restarted under 2 replicas",
        ),
        Scenario(
            "taskiq-sigkill",
            ("postgresql",),
            "internal",
            taskiq_sigkill,
            "taskiq worker SIGKILLed during @internal tasks",
        ),
        Scenario(
            "worker-sigkill-1",
            ENGINES,
            "single",
            workers_sigkill,
            "2 of 3 SDK workers SIGKILLed mid-task, max_attempts 1",
            max_attempts=1,
        ),
        Scenario(
            "worker-sigkill-3",
            ENGINES,
            "single",
            workers_sigkill,
            "2 of 3 SDK workers SIGKILLed mid-task, max_attempts 3",
        ),
        Scenario(
            "worker-sigstop",
            ENGINES,
            "single",
            worker_sigstop,
            "1 worker SIGSTOPped past its timeout, then SIGCONT",
        ),
    )
}


# --- one run ---------------------------------------------------------------------------


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def recovery_seconds(
    completions: list[float],
    before: tuple[float, float],
    fault_at: float,
    load_end: float,
    offered: float,
) -> tuple[float | None, float]:
    """The recovery time (see the module's docstring) and the rate before the fault, from
    completion times (epoch seconds). The rate before is capped at the ``offered`` rate
    (tasks submitted per second): a short stretch may complete a little more (the
    warm-up's tail), which no steady state sustains."""
    start, end = before
    measured = sum(1 for t in completions if start <= t < end) / max(end - start, 1e-9)
    rate = min(measured, offered)
    last_low: float | None = None
    t = fault_at
    while t + RECOVERY_WINDOW_S <= load_end:
        count = sum(1 for c in completions if t <= c < t + RECOVERY_WINDOW_S)
        if count < RECOVERED_SHARE * rate * RECOVERY_WINDOW_S:
            last_low = t + RECOVERY_WINDOW_S
        t += 0.5
    if last_low is None:
        return 0.0, rate
    if last_low + 0.5 > load_end:
        return None, rate
    return round(last_low - fault_at, 1), rate


def pickup_waits(tasks: list[dict[str, Any]], job: str) -> Callable[[float, float], list[float]]:
    """Seconds from submit to start of ``job``'s tasks that started, by submit time: the
    function gives those submitted within [start, end)."""
    waits = [
        (_epoch(t["created_at"]), _epoch(t["started_at"]) - _epoch(t["created_at"]))
        for t in tasks
        if t["job_name"] == job and t.get("started_at")
    ]
    return lambda start, end: [wait for created, wait in waits if start <= created < end]


def ledger_figures(entries: list[dict[str, Any]]) -> dict[str, Any]:
    runs = [e for e in entries if e["kind"] == "run"]
    ends = [e for e in entries if e["kind"] == "end"]
    accepted: dict[str, set[Any]] = {}
    for end in ends:
        if end["outcome"] == "accepted":
            accepted.setdefault(end["task"], set()).add((end["attempt"], end["token"]))
    executions = Counter(e["task"] for e in runs)
    internal = Counter(e["task"] for e in entries if e["kind"] == "internal")
    outcomes = Counter(e["outcome"] for e in ends)
    return {
        "executions": len(runs),
        "re_executed": sum(1 for n in executions.values() if n > 1),
        "double_accepted": sum(1 for tokens in accepted.values() if len(tokens) > 1),
        "refused_409": outcomes.get("refused-409", 0),
        "end_outcomes": dict(outcomes),
        "internal_executions": sum(internal.values()),
        "internal_re_executed": sum(1 for n in internal.values() if n > 1),
    }


async def run_scenario(
    scenario: Scenario,
    engine: str,
    sizes: Sizes,
    workdir: Path,
    postgres: PrivatePostgres | None,
) -> dict[str, Any]:
    """Deploy, load, fault, drain; the run's figures (see the module's docstring)."""
    directory = Path(tempfile.mkdtemp(prefix=f"{scenario.name}-{engine}-", dir=workdir))
    async with deployment(scenario.deployment, engine, directory, sizes, postgres) as hub:
        ctx = Context(hub, sizes, postgres)
        load = Load()
        wall0 = time.time()
        fault_delay = sizes.warmup_s + sizes.before_s
        # The load runs until ``stop``: after_s past the fault's end.
        stop = asyncio.Event()

        def body(n: int) -> dict[str, Any]:
            payload = {"seconds": sizes.task_seconds, "n": n}
            return {"payload": payload, "max_attempts": scenario.max_attempts}

        def internal_body(n: int) -> dict[str, Any]:
            return {"payload": {"seconds": 0.3}, "max_attempts": 1}

        def submitter(
            rate: float, make: Callable[[int], dict[str, Any]], job: str, into: set[str]
        ) -> asyncio.Task[None]:
            return asyncio.create_task(submit_at_rate(hub, load, rate, stop, make, job, into))

        submitters = [submitter(sizes.rate, body, JOB, load.acknowledged)]
        if scenario.deployment == "internal":
            submitters.append(
                submitter(sizes.internal_rate, internal_body, INTERNAL_JOB, load.internal)
            )
        await asyncio.sleep(fault_delay)
        fault_at = time.time()
        try:
            await scenario.fault(ctx)
        except Exception as exc:
            ctx.notes["fault_error"] = f"{type(exc).__name__}: {exc}"
        fault_end = time.time()
        await asyncio.sleep(sizes.after_s)
        stop.set()
        load_end = time.time()
        await asyncio.gather(*submitters)  # every submit answered (or failed)
        wanted = load.acknowledged | load.internal
        tasks = await drain(hub, wanted, sizes.drain_s)
        drained_s = round(time.time() - load_end, 1)
        entries = read_ledgers(directory / "ledgers")
        logs_tail = hub.logs()

    offered = sizes.rate + (sizes.internal_rate if scenario.deployment == "internal" else 0)
    by_id = {t["id"]: t for t in tasks}
    lost = [i for i in wanted if by_id.get(i, {}).get("status") not in TERMINAL]
    completions = [_epoch(t["completed_at"]) for t in tasks if t["status"] == "completed"]
    recovery, rate = recovery_seconds(
        completions, (wall0 + sizes.warmup_s, fault_at), fault_at, load_end, offered
    )
    statuses = Counter(t["status"] for t in tasks)
    waits = pickup_waits(tasks, JOB)
    errors = Counter(
        f"{t['job_name'].rsplit(':', 1)[-1]}: {t['error']}"
        for t in tasks
        if t["status"] == "failed"
    )
    result: dict[str, Any] = {
        "scenario": "chaos",
        "fault": scenario.name,
        "engine": engine,
        "what": scenario.what,
        "submitted": load.sent,
        "acknowledged": len(wanted),
        "lost": len(lost),
        "non_terminal": sum(1 for t in tasks if t["status"] not in TERMINAL),
        "completed": statuses.get("completed", 0),
        "failed": statuses.get("failed", 0),
        "completed_after_fault": sum(1 for t in completions if t > fault_end),
        "rate_before": round(rate, 1),
        "pickup_p50_ms_before": ms(percentile(waits(wall0 + sizes.warmup_s, fault_at), 50)),
        "pickup_p50_ms_after": ms(percentile(waits(fault_end + 1.0, load_end), 50)),
        "recovery_s": recovery,
        "fault_s": round(fault_end - fault_at, 1),
        "drain_s": drained_s,
        "client_errors": dict(load.errors),
        "load_avg_1m": load_average(),
        "failed_errors": dict(errors),
        "internal_completed": sum(
            1 for t in tasks if t["job_name"] == INTERNAL_JOB and t["status"] == "completed"
        ),
        **ledger_figures(entries),
        **ctx.notes,
    }
    if lost:
        result["lost_ids"] = sorted(lost)[:10]
        log(f"{scenario.name}/{engine}: {len(lost)} lost; hub logs:\n{logs_tail[-4000:]}")
    return result


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    """A started private cluster (``POSTGRES_SETTINGS``), stopped and removed after."""
    root = Path(tempfile.mkdtemp(prefix="taskhub-chaos-pg-"))
    with throwaway_cluster(root, settings=POSTGRES_SETTINGS) as cluster:
        yield PrivatePostgres(cluster)


# --- command line ----------------------------------------------------------------------


def table(results: Results) -> str:
    headers = ["fault", "engine", "acked", "lost", "double-accepted", "non-terminal"]
    headers += ["re-executed", "409s", "failed", "recovery (s)", "pick-up p50 (ms)"]
    headers += ["client errors"]
    rows = []
    for r in results:
        if "error" in r:
            continue
        errors = ", ".join(f"{k} {v}" for k, v in sorted(r["client_errors"].items())) or "none"
        recovery = "not within the load" if r["recovery_s"] is None else r["recovery_s"]
        rows.append(
            [
                r["fault"],
                r["engine"],
                r["acknowledged"],
                r["lost"],
                r["double_accepted"],
                r["non_terminal"],
                r["re_executed"] + r["internal_re_executed"],
                r["refused_409"],
                r["failed"],
                recovery,
                f"{r['pickup_p50_ms_before']} → {r['pickup_p50_ms_after']}",
                errors,
            ]
        )
    text = markdown_table(headers, rows, left=2)
    failed = [r for r in results if "error" in r]
    if failed:
        text += "\n\n" + "\n".join(f"- {r['fault']}/{r['engine']}: {r['error']}" for r in failed)
    return text


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser("chaos", __doc__, servers=False)
    parser.add_argument(
        "--scenario",
        type=choices(SCENARIOS, "scenarios"),
        default=list(SCENARIOS),
        help="comma-separated faults (default: all)",
    )
    parser.add_argument(
        "--engine",
        type=choices(ENGINES, "engines"),
        default=list(ENGINES),
        help="sqlite, postgresql or both (each scenario runs on those it applies to)",
    )
    parser.add_argument("--quick", action="store_true", help="short runs (as the tests do)")
    parser.add_argument("--rate", type=float, help="tasks submitted per second")
    parser.add_argument("--before", type=float, help="seconds of load before the fault")
    parser.add_argument("--after", type=float, help="seconds of load after the fault")
    parser.add_argument("--hold", type=float, help="pool-exhausted: seconds held")
    parser.add_argument("--drain", type=float, help="bound on the drain (s)")
    parser.add_argument("--kills", type=int, help="hub-sigkill: kills in a row (5)")
    return parser.parse_args(argv)


def sizes_of(args: argparse.Namespace) -> Sizes:
    sizes = QUICK if args.quick else FULL
    changes = {
        name: value
        for name, value in (
            ("rate", args.rate),
            ("before_s", args.before),
            ("after_s", args.after),
            ("hold_s", args.hold),
            ("drain_s", args.drain),
            ("kills", args.kills),
        )
        if value is not None
    }
    return replace(sizes, **changes)


async def run_all(names: list[str], engines: list[str], sizes: Sizes, results: Results) -> None:
    with tempfile.TemporaryDirectory(prefix="taskhub-chaos-") as tmp:
        workdir = Path(tmp)
        runs = [(SCENARIOS[n], e) for n in names for e in engines if e in SCENARIOS[n].engines]
        with contextlib.ExitStack() as stack:
            postgres = None
            if any(engine == "postgresql" for _, engine in runs):
                postgres = stack.enter_context(private_postgres())
            for scenario, engine in runs:
                log(f"== {scenario.name} on {engine} ==")
                try:
                    results.append(
                        emit(await run_scenario(scenario, engine, sizes, workdir, postgres))
                    )
                except RUN_FAILURES as exc:
                    log(f"{scenario.name}/{engine} failed: {type(exc).__name__}: {exc}")
                    failure = {"scenario": "chaos", "fault": scenario.name, "engine": engine}
                    results.append(emit({**failure, "error": f"{type(exc).__name__}: {exc}"}))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = sizes_of(args)
    return run_main(
        lambda results: run_all(args.scenario, args.engine, sizes, results),
        table,
        args.json_out,
    )


if __name__ == "__main__":
    sys.exit(main())
