"""Taskhub against the task queues users would pick instead: procrastinate and PgQueuer
(PostgreSQL), SAQ (Redis) and taskiq (Redis streams), each in a virtual environment of its
own (``--venvs``, outside the checkout) at the pinned versions the run records.

Every system gets the same work: one worker process running 16 no-op jobs at once, and one
client process of 16 concurrent enqueuers, each its own program
(``benchmarks/apps/peers/``). Taskhub is a ``taskhub worker`` process and the SDK's
``AsyncClient.submit`` against one hub on SQLite (``taskhub-sqlite``) or PostgreSQL
(``taskhub-postgres``). The job's only work is to append ``time.time()`` at its start to
a file; the enqueuer takes ``time.time()`` just before each enqueue call (one host clock).

Per system, in interleaved rounds (every system once a round, in turn, each on a fresh
database or queue): ``throughput``, ``--jobs`` jobs submitted as fast as the enqueuers go
(jobs/s from the first enqueue call to the last job's start); ``paced``, ``--paced-jobs``
jobs at ``--rate`` a second in all (start latency: the job's start minus the time before
its enqueue call, p50/p95/p99). For each phase, the CPU time of every process from
``/proc``: the client, the worker (and its children), the hub, the database server (the
PostgreSQL backends connected to the system's database, or the Redis server), and the rest
of the machine's busy time (``/proc/stat``, less those and this benchmark's own) as the
other load in CPUs, so that a noisy phase shows.

PostgreSQL is the server at ``--pg-admin-url`` (a database of its own per system and
round, dropped after); Redis a private ``redis-server`` the run starts (no AOF, no
snapshots). One JSON line per phase on stdout; the tables (every round, then medians over
the rounds) and the fairness notes on stderr.

    .venv/bin/python -m benchmarks peers                         # every system, 2 rounds
    .venv/bin/python -m benchmarks peers --systems taskhub-sqlite,saq --jobs 500 --rounds 1

Two versions of Taskhub side by side: ``--tree LABEL=DIR`` (given twice or more) runs each
Taskhub system once per tree in every round (``taskhub-sqlite@LABEL``), its hub, worker and
enqueuer importing ``taskhub`` from ``DIR`` (a directory holding a ``taskhub`` package,
put first on ``PYTHONPATH``); a last table gives each tree's medians over the first's.
The trees must share the database schema of the code running the benchmark (it migrates).

    .venv/bin/python -m benchmarks peers --systems taskhub-sqlite,taskhub-postgres \\
        --tree before=/tmp/before --tree after=/tmp/after --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from benchmarks.harness.cli import choices, run_command, scenario_parser
from benchmarks.harness.cpu import (
    machine_busy_seconds,
    process_cpu_seconds,
    process_tree_cpu_seconds,
)
from benchmarks.harness.report import (
    Results,
    emit,
    load_average,
    log,
    markdown_table,
    ms,
    percentile,
)
from benchmarks.harness.servers import RedisServer
from benchmarks.harness.targets import (
    REPO_ROOT,
    TargetError,
    TargetOptions,
    hub_target,
    require_local,
)
from benchmarks.harness.venvs import DEFAULT_ROOT, VenvError, ensure_venv, installed

APPS = "benchmarks.apps.peers"
SLOTS = 16  # the worker's jobs at once, and the client's enqueuers at once
READY_SECONDS = 90.0  # a worker started and taking jobs (a loaded machine imports slowly)
PROBE_SECONDS = 1.0  # a probe job not started by then is sent again
SETTLE_SECONDS = 0.25  # after the last job's start: its acknowledgement lands
POLL_SECONDS = 0.01  # the starts file read this often
STOP_SECONDS = 20.0
WARM_JOBS = 64


@dataclass(frozen=True)
class Peer:
    """A system installed from the package index into a venv of its own."""

    module: str
    requirements: tuple[str, ...]
    backend: str  # "postgres" or "redis"
    packages: tuple[str, ...]  # the distributions whose versions the table shows


PEERS = {
    "procrastinate": Peer(
        "procrastinate_peer",
        ("procrastinate==3.10.0", "psycopg[binary]==3.3.9", "psycopg-pool==3.3.3"),
        "postgres",
        ("procrastinate", "psycopg"),
    ),
    "pgqueuer": Peer(
        "pgqueuer_peer", ("pgqueuer==1.6.0", "asyncpg==0.32.0"), "postgres", ("pgqueuer", "asyncpg")
    ),
    "saq": Peer(
        "saq_peer",
        ("saq[redis]==0.26.4", "redis==7.4.1", "typing-extensions==4.16.0"),
        "redis",
        ("saq", "redis"),
    ),
    "taskiq": Peer(
        "taskiq_peer",
        ("taskiq==0.13.0", "taskiq-redis==1.2.4", "redis==8.2.0"),
        "redis",
        ("taskiq", "taskiq-redis", "redis"),
    ),
}
TASKHUB_SYSTEMS = {"taskhub-sqlite": "sqlite", "taskhub-postgres": "postgres"}
TREE_MARK = "@"  # taskhub-sqlite@before: the system with the code of tree ``before``
SYSTEMS = (*TASKHUB_SYSTEMS, *PEERS)
LABELS = {
    "taskhub-sqlite": "Taskhub, SQLite (`taskhub worker` + SDK `AsyncClient.submit`)",
    "taskhub-postgres": "Taskhub, PostgreSQL",
    "procrastinate": "procrastinate (PostgreSQL)",
    "pgqueuer": "PgQueuer (PostgreSQL)",
    "saq": "SAQ (Redis)",
    "taskiq": "taskiq (Redis streams)",
}


@dataclass(frozen=True)
class Sizes:
    jobs: int  # throughput phase
    paced_jobs: int
    rate: float  # paced phase, jobs/s in all
    rounds: int
    timeout: float  # per phase


def base_system(system: str) -> str:
    """``system`` without its tree: ``taskhub-sqlite@before`` is ``taskhub-sqlite``."""
    return system.partition(TREE_MARK)[0]


def with_trees(systems: Sequence[str], trees: dict[str, Path]) -> list[str]:
    """Each Taskhub system once per tree (all of them in a row), the peers as they are."""
    if not trees:
        return list(systems)
    return [
        f"{system}{TREE_MARK}{label}" if system in TASKHUB_SYSTEMS else system
        for system in systems
        for label in (trees if system in TASKHUB_SYSTEMS else [""])
    ]


def label_of(system: str) -> str:
    base, _, tree = system.partition(TREE_MARK)
    return LABELS[base] + (f" [{tree}]" if tree else "")


# -- readings --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reading:
    """CPU seconds so far of each process of a system, of this benchmark and of the whole
    machine, at one moment; ``database`` by PostgreSQL backend pid (or one Redis entry)."""

    wall: float
    machine: float | None
    own: float
    client: float | None
    worker: float | None
    hub: float | None
    database: dict[int, float]


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else max(after - before, 0.0)


def database_delta(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU the database processes spent between two readings: each process read at the end,
    less what it had at the start (nothing for one that connected meanwhile)."""
    return sum(max(seconds - before.get(pid, 0.0), 0.0) for pid, seconds in after.items())


def cpu_figures(before: Reading, after: Reading, jobs: int) -> dict[str, float | None]:
    """Per job: each process's CPU milliseconds (the client's per submit); the other load on
    the machine in CPUs (its busy time less every measured process's and this benchmark's,
    over the wall time)."""
    seconds = max(after.wall - before.wall, 1e-9)
    spent = {
        "client": _delta(before.client, after.client),
        "worker": _delta(before.worker, after.worker),
        "hub": _delta(before.hub, after.hub),
        "database": database_delta(before.database, after.database),
    }
    figures: dict[str, float | None] = {
        f"cpu_ms_{name}": None if value is None else round(1000 * value / jobs, 3)
        for name, value in spent.items()
    }
    server_side = [spent["worker"], spent["hub"], spent["database"]]
    figures["cpu_ms_per_job"] = round(1000 * sum(v or 0.0 for v in server_side) / jobs, 3)
    busy = _delta(before.machine, after.machine)
    measured = sum(v or 0.0 for v in spent.values()) + (after.own - before.own)
    figures["other_load_cpus"] = None if busy is None else round((busy - measured) / seconds, 2)
    figures["bench_cpus"] = round((after.own - before.own) / seconds, 2)
    return figures


def start_figures(
    sent: Sequence[float], starts: dict[int, float], rate: float | None
) -> dict[str, float | int | None]:
    """What the enqueue times (``sent``, by job) and the jobs' start times give: jobs/s from
    the first enqueue call to the last start, and start latencies (start - enqueue call)."""
    latencies = [starts[seq] - at for seq, at in enumerate(sent) if seq in starts]
    span = max(starts.values(), default=0.0) - min(sent, default=0.0)
    return {
        "jobs": len(sent),
        "started": len(latencies),
        "offered_per_s": rate,
        "jobs_per_s": round(len(latencies) / span, 1) if span > 0 and latencies else None,
        "p50_ms": ms(percentile(latencies, 50)),
        "p95_ms": ms(percentile(latencies, 95)),
        "p99_ms": ms(percentile(latencies, 99)),
        "max_ms": ms(max(latencies, default=None)),
    }


# -- the processes of one system ---------------------------------------------------------------


@dataclass
class Deployment:
    """One system ready to run: its programs, their environment, and what to read the CPU
    of its hub and database from."""

    system: str
    python: str
    module: str
    worker_argv: list[str]
    env: dict[str, str]
    hub_pid: int | None = None
    read_database: Callable[[], Awaitable[dict[int, float]]] | None = None


def _asyncpg_url(url: str, database: str | None = None) -> str:
    parts = urlsplit(url)
    path = parts.path if database is None else f"/{database}"
    return urlunsplit(("postgresql", parts.netloc, path, "", ""))


async def _pg_admin(admin_url: str, sql: str) -> None:
    connection = await asyncpg.connect(_asyncpg_url(admin_url), timeout=10)
    try:
        await connection.execute(sql)
    finally:
        await connection.close()


def backends_reader(admin_url: str, database: str) -> Callable[[], Awaitable[dict[int, float]]]:
    """CPU seconds so far of each PostgreSQL backend connected to ``database`` (the server
    must run on this machine); the reading's own backend is on another database."""

    async def read() -> dict[int, float]:
        connection = await asyncpg.connect(_asyncpg_url(admin_url), timeout=10)
        try:
            rows = await connection.fetch(
                "SELECT pid FROM pg_stat_activity WHERE datname = $1", database
            )
        finally:
            await connection.close()
        seconds = {row["pid"]: process_cpu_seconds(row["pid"]) for row in rows}
        return {pid: value for pid, value in seconds.items() if value is not None}

    return read


async def pg_settings(admin_url: str) -> dict[str, str]:
    """The PostgreSQL server's durability settings (and version)."""
    connection = await asyncpg.connect(_asyncpg_url(admin_url), timeout=10)
    try:
        names = ("synchronous_commit", "fsync", "server_version")
        return {name: await connection.fetchval(f"SHOW {name}") for name in names}
    finally:
        await connection.close()


@asynccontextmanager
async def empty_database(admin_url: str) -> AsyncIterator[str]:
    """A new empty PostgreSQL database on ``admin_url``'s server, dropped afterwards;
    yields its name."""
    require_local(admin_url)
    name = f"bench_peers_{secrets.token_hex(6)}"
    await _pg_admin(admin_url, f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        await _pg_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _base_env(starts: Path, queue: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TASKHUB_", "BENCH_"))}
    env.update(
        PYTHONUNBUFFERED="1",
        BENCH_PEERS_STARTS=str(starts),
        BENCH_PEERS_QUEUE=queue,
        BENCH_PEERS_CONCURRENCY=str(SLOTS),
    )
    return env


@asynccontextmanager
async def deployed(
    system: str,
    options: TargetOptions,
    redis: RedisServer,
    pythons: dict[str, Path],
    starts: Path,
    trees: dict[str, Path] | None = None,
) -> AsyncIterator[Deployment]:
    """``system`` on a fresh database (or queue), its setup done; torn down after. A
    Taskhub system of a tree (``taskhub-sqlite@LABEL``) imports ``taskhub`` from
    ``trees[LABEL]`` in its hub, worker and enqueuer."""
    queue = f"bench-{secrets.token_hex(4)}"
    env = _base_env(starts, queue)
    base, _, tree = system.partition(TREE_MARK)
    if base in TASKHUB_SYSTEMS:
        engine = TASKHUB_SYSTEMS[base]
        tree_env = {}
        if tree:
            path = str((trees or {})[tree])
            tree_env["PYTHONPATH"] = os.pathsep.join(filter(None, [path, env.get("PYTHONPATH")]))
            env.update(tree_env)
        async with hub_target(engine, options, extra_env=tree_env) as target:
            env.update(BENCH_PEERS_URL=target.base_url, BENCH_PEERS_TOKEN=target.token)
            env.update(TASKHUB_URL=target.base_url, TASKHUB_TOKEN=target.token)
            worker = [sys.executable, "-m", "taskhub.cli", "worker", f"{APPS}.taskhub_peer:Noop"]
            worker += ["--room", queue, "--concurrency", str(SLOTS)]
            reader = None
            if engine == "postgres" and target.database_url is not None:
                database = urlsplit(target.database_url).path.lstrip("/")
                reader = backends_reader(options.pg_admin_url, database)
            yield Deployment(
                system, sys.executable, f"{APPS}.taskhub_peer", worker, env, target.pid, reader
            )
        return
    peer = PEERS[system]
    python = str(pythons[system])
    module = f"{APPS}.{peer.module}"
    if peer.backend == "redis":
        env["BENCH_PEERS_URL"] = redis.url
        assert redis.process is not None
        pid = redis.process.pid

        async def read_redis() -> dict[int, float]:
            seconds = process_cpu_seconds(pid)
            return {} if seconds is None else {pid: seconds}

        yield Deployment(
            system, python, module, [python, "-m", module, "work"], env, None, read_redis
        )
        return
    async with empty_database(options.pg_admin_url) as database:
        env["BENCH_PEERS_URL"] = _asyncpg_url(options.pg_admin_url, database)
        await _run_setup([python, "-m", module, "setup"], env, options.workdir / f"{system}.log")
        reader = backends_reader(options.pg_admin_url, database)
        yield Deployment(system, python, module, [python, "-m", module, "work"], env, None, reader)


async def _run_setup(argv: list[str], env: dict[str, str], log_path: Path) -> None:
    with log_path.open("ab") as out:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    if await asyncio.wait_for(process.wait(), READY_SECONDS) != 0:
        raise TargetError(f"{' '.join(argv[2:])} failed:\n{_tail(log_path)}")


def _tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


class Starts:
    """The starts file the jobs append ``tag seq time`` lines to, read as it grows."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.rest = b""
        self.by_tag: dict[str, dict[int, float]] = defaultdict(dict)

    def read(self) -> None:
        with suppress(FileNotFoundError), self.path.open("rb") as file:
            file.seek(self.offset)
            data = file.read()
            self.offset += len(data)
            lines = (self.rest + data).split(b"\n")
            self.rest = lines.pop()
            for line in lines:
                tag, seq, moment = line.decode().split()
                self.by_tag[tag].setdefault(int(seq), float(moment))

    async def wait(self, tag: str, count: int, seconds: float) -> dict[int, float]:
        """The start times of ``tag``'s jobs once ``count`` of them have started (at most
        ``seconds`` from now)."""
        async with asyncio.timeout(seconds):
            while True:
                self.read()
                if len(self.by_tag[tag]) >= count:
                    return self.by_tag[tag]
                await asyncio.sleep(POLL_SECONDS)


class Enqueuer:
    """The client process of a system (``… enqueue``): one command a line, one answer."""

    def __init__(self, process: asyncio.subprocess.Process, log_path: Path) -> None:
        self.process = process
        self.log_path = log_path

    async def answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        if not line:
            raise TargetError(f"the enqueuer exited:\n{_tail(self.log_path)}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    async def submit(
        self, tag: str, count: int, rate: float | None = None, *, retry: bool = False
    ) -> list[float]:
        assert self.process.stdin is not None
        command = {"tag": tag, "count": count, "rate": rate, "retry": retry}
        self.process.stdin.write(json.dumps(command).encode() + b"\n")
        await self.process.stdin.drain()
        sent: list[float] = (await self.answer())["sent"]
        return sent


async def _spawn(argv: list[str], env: dict[str, str], out: IO[bytes], *, pipes: bool) -> Any:
    pipe = asyncio.subprocess.PIPE if pipes else asyncio.subprocess.DEVNULL
    return await asyncio.create_subprocess_exec(
        *argv, cwd=REPO_ROOT, env=env, stdin=pipe, stdout=pipe if pipes else out, stderr=out
    )


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        if process.stdin is not None:
            process.stdin.close()
        with suppress(ProcessLookupError):
            process.terminate()
    try:
        await asyncio.wait_for(process.wait(), STOP_SECONDS)
    except TimeoutError:
        process.kill()
        await process.wait()


@asynccontextmanager
async def running(deployment: Deployment, log_path: Path) -> AsyncIterator[tuple[Any, Enqueuer]]:
    """The system's worker and enqueuer processes, the enqueuer connected; stopped after."""
    async with AsyncExitStack() as stack:
        out = stack.enter_context(log_path.open("ab"))
        worker = await _spawn(deployment.worker_argv, deployment.env, out, pipes=False)
        stack.push_async_callback(_stop, worker)
        argv = [deployment.python, "-m", deployment.module, "enqueue"]
        process = await _spawn(argv, deployment.env, out, pipes=True)
        stack.push_async_callback(_stop, process)
        enqueuer = Enqueuer(process, log_path)
        async with asyncio.timeout(READY_SECONDS):
            if not (await enqueuer.answer()).get("ready"):
                raise TargetError(f"the enqueuer did not start:\n{_tail(log_path)}")
        yield worker, enqueuer


async def until_taking_jobs(enqueuer: Enqueuer, starts: Starts, worker: Any) -> None:
    """Probe jobs (retried until enqueued) until one starts: the worker is up."""
    async with asyncio.timeout(READY_SECONDS):
        for attempt in range(10**6):
            if worker.returncode is not None:
                raise TargetError(f"the worker exited with {worker.returncode}")
            await enqueuer.submit(f"probe{attempt}", 1, retry=True)
            with suppress(TimeoutError):
                await starts.wait(f"probe{attempt}", 1, PROBE_SECONDS)
                return


async def reading(deployment: Deployment, enqueuer: Enqueuer, worker: Any) -> Reading:
    database = {} if deployment.read_database is None else await deployment.read_database()
    return Reading(
        wall=time.monotonic(),
        machine=machine_busy_seconds(),
        own=_own_cpu(),
        client=process_tree_cpu_seconds(enqueuer.process.pid),
        worker=process_tree_cpu_seconds(worker.pid),
        hub=None if deployment.hub_pid is None else process_cpu_seconds(deployment.hub_pid),
        database=database,
    )


async def measured_phase(
    deployment: Deployment,
    enqueuer: Enqueuer,
    worker: Any,
    starts: Starts,
    tag: str,
    count: int,
    rate: float | None,
    seconds: float,
) -> dict[str, Any]:
    """One measured phase: ``count`` jobs tagged ``tag`` (paced to ``rate`` a second, or
    as fast as they go), started within ``seconds``; their figures."""
    before = await reading(deployment, enqueuer, worker)
    async with asyncio.timeout(seconds):
        sent = await enqueuer.submit(tag, count, rate)
        started = await starts.wait(tag, count, seconds)
    await asyncio.sleep(SETTLE_SECONDS)
    after = await reading(deployment, enqueuer, worker)
    return {**start_figures(sent, started, rate), **cpu_figures(before, after, count)}


async def measure(
    deployment: Deployment, sizes: Sizes, starts: Starts, workdir: Path
) -> list[dict[str, Any]]:
    """One system: ready, warmed, then the throughput and the paced phase."""
    log_path = workdir / f"{deployment.system}.log"
    async with running(deployment, log_path) as (worker, enqueuer):
        await until_taking_jobs(enqueuer, starts, worker)
        await enqueuer.submit("warm", WARM_JOBS)
        await starts.wait("warm", WARM_JOBS, sizes.timeout)
        phases = [("throughput", sizes.jobs, None), ("paced", sizes.paced_jobs, sizes.rate)]
        results = []
        for phase, count, rate in phases:
            figures = await measured_phase(
                deployment, enqueuer, worker, starts, phase, count, rate, sizes.timeout
            )
            results.append({"phase": phase, **figures, "load_avg_1m": load_average()})
        return results


# -- the run ---------------------------------------------------------------------------------


async def prepare_venvs(systems: Sequence[str], root: Path) -> tuple[dict[str, Path], dict]:
    """Each peer's venv (made once, in ``root``) and the versions it holds."""
    pythons: dict[str, Path] = {}
    versions: dict[str, dict[str, str]] = {}
    for system in systems:
        if system in PEERS:
            log(f"{system}: venv in {root / system} ...")
            pythons[system] = await ensure_venv(root / system, PEERS[system].requirements)
            held = await installed(pythons[system])
            versions[system] = {name: held.get(name, "?") for name in PEERS[system].packages}
    return pythons, versions


def taskhub_versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    try:
        taskhub = version("taskhub")
    except PackageNotFoundError:
        taskhub = "?"
    return {"taskhub": taskhub, "commit": commit or "?"}


async def run_peers(
    options: TargetOptions,
    systems: list[str],
    sizes: Sizes,
    venvs: Path,
    results: Results,
    trees: dict[str, Path] | None = None,
) -> None:
    """The peers' venvs made, then every round: each system in turn (the order reversed
    every other round), on a fresh database or queue; the private Redis serves them all.
    With ``trees``, each Taskhub system once per tree."""
    trees = trees or {}
    pythons, versions = await prepare_venvs(systems, venvs)
    systems = with_trees(systems, trees)
    for system in systems:
        base, _, tree = system.partition(TREE_MARK)
        if base in TASKHUB_SYSTEMS:
            versions[system] = {
                **taskhub_versions(),
                **({"tree": str(trees[tree])} if tree else {}),
            }
    redis = RedisServer(options.workdir / "redis")
    await asyncio.to_thread(redis.start)
    try:
        settings = durability(await pg_settings(options.pg_admin_url), await redis_settings(redis))
        results.append(
            emit({"scenario": "peers", "kind": "setup", "versions": versions, **settings})
        )
        for round_number in range(1, sizes.rounds + 1):
            order = systems if round_number % 2 else list(reversed(systems))
            for system in order:
                base = {
                    "scenario": "peers",
                    "kind": "phase",
                    "system": system,
                    "round": round_number,
                }
                for line in await measure_system(
                    system, options, redis, pythons, sizes, round_number, trees
                ):
                    results.append(emit({**base, **line}))
                    if not line["error"]:
                        _progress(results[-1])
    finally:
        await asyncio.to_thread(redis.stop)


MEASURE_FAILURES = (TargetError, VenvError, OSError, TimeoutError, asyncpg.PostgresError)


async def measure_system(
    system: str,
    options: TargetOptions,
    redis: RedisServer,
    pythons: dict[str, Path],
    sizes: Sizes,
    round_number: int,
    trees: dict[str, Path] | None = None,
) -> list[dict[str, Any]]:
    """One system's phases in one round, or the error that stopped them."""
    starts = Starts(options.workdir / f"starts-{system}-{round_number}.txt")
    try:
        async with deployed(system, options, redis, pythons, starts.path, trees) as deployment:
            lines = await measure(deployment, sizes, starts, options.workdir)
    except MEASURE_FAILURES as exc:
        error = f"{type(exc).__name__}: {exc}"
        log(f"{system} round {round_number} failed: {error}")
        return [{"phase": None, "error": error}]
    return [{**line, "error": None} for line in lines]


async def redis_settings(redis: RedisServer) -> dict[str, str]:
    """The private Redis server's persistence: AOF and snapshots."""
    from redis.asyncio import Redis

    client = Redis.from_url(redis.url, decode_responses=True)
    try:
        config = {**await client.config_get("appendonly"), **await client.config_get("save")}
    finally:
        await client.aclose()
    return {str(key): str(value) for key, value in config.items()}


def durability(pg: dict[str, str], redis: dict[str, str]) -> dict[str, Any]:
    """The durability settings each backend ran with: the hub's SQLite pragmas, the
    PostgreSQL server's, the Redis server's."""
    from taskhub.settings import Settings

    default = Settings.model_fields["sqlite_synchronous"].default
    synchronous = os.environ.get("TASKHUB_SQLITE_SYNCHRONOUS", default).upper()
    return {
        "sqlite": {"journal_mode": "WAL", "synchronous": synchronous},
        "postgres": pg,
        "redis": redis,
        "slots": SLOTS,
        "enqueuers": SLOTS,
    }


def _progress(result: dict[str, Any]) -> None:
    log(
        f"{result['system']} round {result['round']} {result['phase']}: "
        f"{result['jobs_per_s']} jobs/s, p50 {result['p50_ms']} / p95 {result['p95_ms']} ms, "
        f"{result['cpu_ms_per_job']} CPU ms/job, client {result['cpu_ms_client']} ms/submit, "
        f"other load {result['other_load_cpus']} CPUs"
    )


# -- tables ----------------------------------------------------------------------------------


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def _fmt(value: float | None, digits: int = 1) -> str:
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.{digits}f}"


def medians(results: Results) -> dict[str, dict[str, dict[str, float | None]]]:
    """Per system and phase, the median of each figure over the rounds."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in results:
        if r.get("kind") == "phase" and not r.get("error"):
            grouped[(r["system"], r["phase"])].append(r)
    keys = (
        "jobs_per_s",
        "p50_ms",
        "p95_ms",
        "cpu_ms_per_job",
        "cpu_ms_worker",
        "cpu_ms_hub",
        "cpu_ms_database",
        "cpu_ms_client",
        "other_load_cpus",
    )
    table: dict[str, dict[str, dict[str, float | None]]] = defaultdict(dict)
    for (system, phase), runs in grouped.items():
        table[system][phase] = {k: _median([r.get(k) for r in runs]) for k in keys}
        table[system][phase]["rounds"] = len(runs)
    return table


def summary_table(results: Results, rate: float | None) -> str:
    figures = medians(results)
    rows = []
    for system in sorted(figures, key=lambda name: SYSTEMS.index(base_system(name))):
        tp = figures[system].get("throughput", {})
        paced = figures[system].get("paced", {})
        parts = [
            f"{name} {_fmt(tp.get(f'cpu_ms_{name}'))}"
            for name in ("worker", "hub", "database")
            if tp.get(f"cpu_ms_{name}") is not None and (name != "hub" or tp[f"cpu_ms_{name}"])
        ]
        rows.append(
            [
                label_of(system),
                _fmt(tp.get("jobs_per_s"), 0),
                f"{_fmt(paced.get('p50_ms'))} / {_fmt(paced.get('p95_ms'))} ms",
                f"{_fmt(tp.get('cpu_ms_per_job'))} ({', '.join(parts)})",
                _fmt(tp.get("cpu_ms_client")),
                f"{_fmt(tp.get('other_load_cpus'), 2)} / {_fmt(paced.get('other_load_cpus'), 2)}",
                int(tp.get("rounds") or 0),
            ]
        )
    at = "" if rate is None else f" at {rate:g}/s"
    headers = [
        "system",
        "jobs/s",
        f"start p50 / p95{at}",
        "CPU ms per job: worker + hub + database",
        "client CPU ms per submit",
        "other load, CPUs (throughput / paced)",
        "rounds",
    ]
    return markdown_table(headers, rows)


RATIO_FIGURES = (
    ("throughput", "jobs_per_s", "jobs/s"),
    ("throughput", "cpu_ms_worker", "worker CPU/job"),
    ("throughput", "cpu_ms_hub", "hub CPU/job"),
    ("throughput", "cpu_ms_database", "db CPU/job"),
    ("throughput", "cpu_ms_client", "client CPU/submit"),
    ("paced", "p50_ms", "paced p50"),
    ("paced", "p95_ms", "paced p95"),
    ("paced", "cpu_ms_worker", "paced worker CPU/job"),
    ("paced", "cpu_ms_hub", "paced hub CPU/job"),
    ("paced", "cpu_ms_client", "paced client CPU/submit"),
)


def trees_table(results: Results) -> str | None:
    """Per Taskhub system run in several trees: each tree's median figures over the first
    tree's (the one given first, so the first to run), or None when none ran in two."""
    figures = medians(results)
    by_base: dict[str, list[str]] = defaultdict(list)
    for system in dict.fromkeys(r.get("system") for r in results if r.get("kind") == "phase"):
        if system in figures and TREE_MARK in system:
            by_base[base_system(system)].append(system)
    rows = []
    for systems in by_base.values():
        first, *others = systems
        for other in others:
            row: list[Any] = [f"{other} / {first.partition(TREE_MARK)[2]}"]
            for phase, key, _ in RATIO_FIGURES:
                mine = figures[other].get(phase, {}).get(key)
                theirs = figures[first].get(phase, {}).get(key)
                row.append(f"{mine / theirs:.2f}" if mine is not None and theirs else None)
            rows.append(row)
    if not rows:
        return None
    return markdown_table(["system", *(name for _, _, name in RATIO_FIGURES)], rows)


def rounds_table(results: Results) -> str:
    rows = [
        [
            r["round"],
            r["system"],
            r["phase"],
            r["jobs_per_s"],
            r["p50_ms"],
            r["p95_ms"],
            r["cpu_ms_worker"],
            r["cpu_ms_hub"],
            r["cpu_ms_database"],
            r["cpu_ms_client"],
            r["other_load_cpus"],
        ]
        for r in results
        if r.get("kind") == "phase" and not r.get("error")
    ]
    headers = ["round", "system", "phase", "jobs/s", "p50 ms", "p95 ms", "worker ms/job"]
    headers += ["hub ms/job", "db ms/job", "client ms/submit", "other CPUs"]
    return markdown_table(headers, rows, left=3)


def fairness_notes(setup: dict[str, Any]) -> str:
    """What each system does per job, and how durable it is, as this run set them up."""
    sqlite = setup.get("sqlite", {})
    pg = setup.get("postgres", {})
    versions = setup.get("versions", {})

    def pinned(system: str) -> str:
        return ", ".join(f"{k} {v}" for k, v in versions.get(system, {}).items())

    notes = [
        f"- Versions: {'; '.join(f'{s}: {pinned(s)}' for s in versions)}.",
        f"- Every system: one worker process with {setup.get('slots')} jobs at once, one client "
        f"process of {setup.get('enqueuers')} concurrent enqueuers, a no-op job that writes its "
        "start time to a file.",
        "- Taskhub: clients and workers never touch the database; every submit is an HTTP "
        "request to the hub (bearer token checked, payload validated against the job's JSON "
        "Schema, idempotency key), which writes a full task record and emits room events; the "
        "worker's claims are fenced by claim tokens; the task and its result stay stored. "
        f"SQLite in WAL with synchronous={sqlite.get('synchronous')} (the hub's default); "
        f"PostgreSQL with synchronous_commit={pg.get('synchronous_commit')}, "
        f"fsync={pg.get('fsync')}.",
        "- procrastinate: client and worker talk to PostgreSQL directly (a job row inserted by "
        "a stored procedure, LISTEN/NOTIFY wakes the worker); arguments are JSON, not "
        "validated; finished jobs stay in the table. PgQueuer: client and worker talk to "
        "PostgreSQL directly; the payload is opaque bytes; finished jobs move to a log table. "
        "Both durable as the server is (same settings as above).",
        "- SAQ and taskiq: client and worker talk to Redis directly; SAQ keeps a job hash "
        "per job (kwargs not validated), taskiq a stream entry (arguments checked against "
        "the task's type hints in the worker, no result backend here). The run's Redis has "
        "no AOF and no snapshots: an acknowledged job is lost if Redis stops.",
        "- CPU of the database: the PostgreSQL backends connected to the system's database "
        "(not the WAL writer, checkpointer or autovacuum, which count as other load), or the "
        "whole private redis-server. Other load: the machine's busy CPU time less every "
        "measured process and this benchmark's own, over the phase's wall time.",
    ]
    return "\n".join(notes)


def render(results: Results) -> str:
    setup = next((r for r in results if r.get("kind") == "setup"), {})
    failures = [
        f"- {r['system']} round {r['round']}: {r['error']}"
        for r in results
        if r.get("kind") == "phase" and r.get("error")
    ]
    rate = next((r["offered_per_s"] for r in results if r.get("phase") == "paced"), None)
    text = "Every round:\n\n" + rounds_table(results)
    text += "\n\nMedians over the rounds:\n\n" + summary_table(results, rate)
    if (ratios := trees_table(results)) is not None:
        text += "\n\nEach tree's medians over the first tree's:\n\n" + ratios
    text += "\n\n" + fairness_notes(setup)
    return text + ("\n\nFailed:\n" + "\n".join(failures) if failures else "")


# -- command line ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser("peers", __doc__)
    parser.add_argument(
        "--systems",
        type=choices(SYSTEMS, "systems"),
        default=list(SYSTEMS),
        help="comma-separated: " + ", ".join(SYSTEMS),
    )
    parser.add_argument("--jobs", type=int, default=2000, help="jobs of the throughput phase")
    parser.add_argument("--paced-jobs", type=int, default=400, help="jobs of the paced phase")
    parser.add_argument("--rate", type=float, default=40.0, help="paced jobs/s, in all")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per phase")
    parser.add_argument(
        "--venvs",
        type=Path,
        default=DEFAULT_ROOT,
        help=f"the peers' venvs (default {DEFAULT_ROOT})",
    )
    parser.add_argument(
        "--tree",
        dest="trees",
        action="append",
        type=_tree,
        default=[],
        metavar="LABEL=DIR",
        help="run each Taskhub system with the taskhub package in DIR too (repeatable)",
    )
    args = parser.parse_args(argv)
    if len({label for label, _ in args.trees}) != len(args.trees):
        parser.error("each --tree needs a label of its own")
    if min(args.jobs, args.paced_jobs, args.rounds) < 1 or args.rate <= 0:
        parser.error("--jobs, --paced-jobs, --rounds and --rate must be positive")
    return args


def _tree(text: str) -> tuple[str, Path]:
    label, sep, path = text.partition("=")
    if not sep or not label or TREE_MARK in label or not (Path(path) / "taskhub").is_dir():
        raise argparse.ArgumentTypeError(
            f"{text!r}: expected LABEL=DIR, DIR holding a taskhub package"
        )
    return label, Path(path).resolve()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = Sizes(args.jobs, args.paced_jobs, args.rate, args.rounds, args.timeout)

    async def work(options: TargetOptions, results: Results) -> None:
        await run_peers(options, args.systems, sizes, args.venvs, results, dict(args.trees))

    return run_command(args, "peers", work, render)


if __name__ == "__main__":
    sys.exit(main())
