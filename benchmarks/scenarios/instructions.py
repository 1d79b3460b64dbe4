"""Instructions per task cycle in the hub's own process, counted by valgrind's callgrind.

Wall time and CPU time on a shared machine swing with the host; an instruction count does
not. Each cycle is the throughput scenario's four requests — submit, claim, PATCH running,
PATCH completed — sent to the ASGI app in-process (no HTTP server, no client, no network),
so the count is Taskhub's own work per task: routing, authentication, validation, the
statements and their driver, events, the answer. With SQLite that includes the database's
work (it runs in the process); with PostgreSQL it is the hub's side only.

Per engine, two runs of a fresh process under callgrind on a fresh migrated database: one
of ``--cycles`` cycles, one of twice as many. The difference of their totals over
``--cycles`` is one cycle's count: start-up, imports and warm-up are in both and cancel out.
Python's hash seed is fixed so that both runs hash alike. Under callgrind a run is some 50 times
slower (importing the app alone takes about 40 s here).

With PostgreSQL each run also reads how much CPU time the database's backends spent on the
measured cycles (``/proc/<pid>/schedstat``, in nanoseconds; the server must run on this
machine): ``database_us_per_cycle``, the longer run's figure. That is time, not a count, so
it moves with the host (±15 % between runs here), though less than a throughput run.
``--count-postgres`` counts the database's side instead: a private PostgreSQL server runs
under callgrind (``benchmarks/harness/callgrind.py``), and the instructions of the backends
that served each run give ``database_instructions_per_cycle`` by the same difference of two
runs (within ±1.5 % between runs here; its background processes are not counted).

Without valgrind (``--no-valgrind``) it times the same cycles instead, for a quick check.

    .venv/bin/python -m benchmarks instructions --engines sqlite,postgres --cycles 200
    .venv/bin/python -m benchmarks instructions --no-valgrind --cycles 50
    .venv/bin/python -m benchmarks instructions --engines postgres --no-valgrind --count-postgres
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Coroutine
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import orjson

from benchmarks.harness.callgrind import (
    CountedServer,
    backends_total,
    callgrind_postgres,
    callgrind_total,
)
from benchmarks.harness.cli import choices, run_command, scenario_parser
from benchmarks.harness.client import API, JOB
from benchmarks.harness.postgres_cluster import ClusterError
from benchmarks.harness.report import Results, emit, log, markdown_table
from benchmarks.harness.targets import (
    REPO_ROOT,
    TargetError,
    TargetOptions,
    database_env,
    fresh_database,
)

ROOM = "bench"
INNER_RUN = "benchmarks.scenarios.instructions"  # this module, run in the measured process
WARM_UP_CYCLES = 20
ENGINES = ("sqlite", "postgres")
RUN_TIMEOUT_SECONDS = 1800
Measured = TypeVar("Measured")


class CycleError(RuntimeError):
    """A request of a cycle was not answered as the scenario expects."""


class InProcessClient:
    """Sends requests straight to an ASGI app, as uvicorn would hand them over."""

    def __init__(self, app: Any, token: str) -> None:
        self._app = app
        self._authorization = f"Bearer {token}".encode()

    async def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        raw = orjson.dumps(body) if body is not None else b""
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [
                (b"host", b"127.0.0.1:8000"),
                (b"authorization", self._authorization),
                (b"content-type", b"application/json"),
                (b"content-length", str(len(raw)).encode()),
            ],
            "client": ("127.0.0.1", 50000),
            "server": ("127.0.0.1", 8000),
        }
        pending = [{"type": "http.request", "body": raw, "more_body": False}]
        status, chunks = 0, []

        async def receive() -> dict[str, Any]:
            return pending.pop() if pending else {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self._app(scope, receive, send)
        if status >= 400:
            raise CycleError(f"{method} {path} -> {status}: {b''.join(chunks)[:300]!r}")
        return orjson.loads(b"".join(chunks)) if chunks else None


async def cycle(client: InProcessClient, submit_path: str, claim: dict[str, str]) -> None:
    """One task from submit to completed."""
    await client.call("POST", submit_path, {"payload": {}})
    reply = await client.call("POST", f"{API}/tasks/claim", claim)
    if reply["task"] is None:
        raise CycleError("a claim came back empty with a task pending")
    for status in ("running", "completed"):
        await client.call("PATCH", f"{API}/tasks/{reply['task']['id']}", {"status": status})


def cpu_ns(pid: int) -> int:
    """Nanoseconds a process has run on a CPU so far (0 once it is gone)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


class BackendClock:
    """CPU time spent by the PostgreSQL backends of one database, other than the one this
    clock reads through (None elsewhere). Backends that appear between readings count from
    zero; the hub keeps its pooled connections, so none should end in between."""

    def __init__(self, database_url: str) -> None:
        self._url = database_url
        self._conn: Any = None

    async def __aenter__(self) -> BackendClock:
        if self._url.startswith("postgresql"):
            import asyncpg

            self._conn = await asyncpg.connect(self._url.replace("+asyncpg", "", 1))
        return self

    async def __aexit__(self, *_exc: object) -> None:
        if self._conn is not None:
            await self._conn.close()

    async def read(self) -> dict[int, int] | None:
        if self._conn is None:
            return None
        pids = await self._conn.fetch(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return {row["pid"]: cpu_ns(row["pid"]) for row in pids}

    @staticmethod
    def seconds_between(before: dict[int, int] | None, after: dict[int, int] | None) -> float:
        if before is None or after is None:
            return float("nan")
        return sum(ns - before.get(pid, 0) for pid, ns in after.items()) / 1e9


async def run_cycles(database_url: str, cycles: int) -> tuple[float, float, list[int]]:
    """Start the app on a migrated database, warm it up, then run ``cycles`` cycles; the
    seconds those took, the CPU seconds the PostgreSQL backends spent on them (NaN with
    SQLite) and those backends' process ids."""
    from taskhub.main import create_app
    from taskhub.services.users import create_user
    from taskhub.settings import Settings
    from taskhub.store.database import Database

    settings = Settings(database_url=database_url, sweeper_enabled=False, log_level="warning")
    setup = Database(settings)
    _user_id, token = await create_user(setup, "bench", superuser=True)
    await setup.dispose()
    app = create_app(settings)
    async with app.lifespan_context():
        client = InProcessClient(app, token)
        job = await client.call("PUT", f"{API}/rooms/{ROOM}/jobs", JOB)
        submit_path = f"{API}/rooms/{ROOM}/tasks/{job['full_name']}"
        claim = {"worker_id": job["worker_id"]}
        for _ in range(WARM_UP_CYCLES):
            await cycle(client, submit_path, claim)
        # Start-up's objects out of the collector's way: a full pass over them, which thread
        # timing may or may not bring inside the measured cycles, would swamp the count.
        gc.collect()
        gc.freeze()
        async with BackendClock(database_url) as clock:
            backends_before = await clock.read()
            start = time.perf_counter()
            for _ in range(cycles):
                await cycle(client, submit_path, claim)
            seconds = time.perf_counter() - start
            backends_after = await clock.read()
            database = clock.seconds_between(backends_before, backends_after)
        return seconds, database, sorted(backends_after or {})


def run_on_servers_loop(work: Coroutine[Any, Any, Measured]) -> Measured:
    """Run ``work`` on the event loop ``taskhub serve`` uses (uvicorn picks uvloop when it
    is installed, as ``uvicorn[standard]`` does)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(work)
    return uvloop.run(work)


@dataclass(frozen=True)
class RunFigures:
    hub: float  # instructions under callgrind, else seconds
    database_seconds: float  # NaN with SQLite
    backends: list[int]  # the PostgreSQL backends that served the run


async def counted_run(database_url: str, cycles: int, workdir: Path, valgrind: bool) -> RunFigures:
    """One fresh process running ``cycles`` cycles: its instruction count under callgrind,
    else the seconds the cycles took; and what it read of the database's backends."""
    out = workdir / f"callgrind-{cycles}.out"
    argv = [sys.executable, "-m", INNER_RUN, "--run-cycles", str(cycles)]
    argv += ["--database-url", database_url]
    if valgrind:
        argv = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *argv]
    env = database_env(database_url) | {"PYTHONHASHSEED": "0"}
    done = await asyncio.to_thread(
        subprocess.run,
        argv,
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_SECONDS,
        check=False,
    )
    if done.returncode != 0:
        raise CycleError(f"{' '.join(argv[:4])} … exited {done.returncode}: {done.stderr[-2000:]}")
    seconds, database, backends = done.stdout.split()[-3:]
    hub = float(callgrind_total(out)) if valgrind else float(seconds)
    pids = [int(pid) for pid in backends.split(",") if pid]
    return RunFigures(hub, float(database), pids)


async def measure(
    engine: str,
    cycles: int,
    options: TargetOptions,
    valgrind: bool,
    counted: CountedServer | None = None,
) -> dict:
    """The engine's per-cycle figure from a run of ``cycles`` and one of twice as many;
    with ``counted`` (PostgreSQL under callgrind), also the database's instructions."""
    if engine == "postgres" and counted is not None:
        options = replace(options, pg_admin_url=counted.admin_url)
    else:
        counted = None
    totals, database_totals, figures = [], [], None
    for count in (cycles, 2 * cycles):
        async with fresh_database(engine, options) as url:
            log(f"[{engine}] {count} cycles{' under callgrind' if valgrind else ''} ...")
            figures = await counted_run(url, count, options.workdir, valgrind)
            totals.append(figures.hub)
        if counted is not None:  # the database is gone, so are its backends: all counted
            database_totals.append(await backends_total(counted.out_dir, figures.backends))
    result: dict[str, Any] = {"scenario": "instructions", "engine": engine, "cycles": cycles}
    if figures is not None and counted is None and not math.isnan(figures.database_seconds):
        # the longer run's: warm-up is outside the reading
        result["database_us_per_cycle"] = round(1e6 * figures.database_seconds / (2 * cycles), 1)
    if database_totals:
        per_cycle = (database_totals[1] - database_totals[0]) / cycles
        result["database_instructions_per_cycle"] = round(per_cycle)
        result["database_totals"] = database_totals
    if valgrind:
        result["instructions_per_cycle"] = round((totals[1] - totals[0]) / cycles)
    else:  # each run timed only its own cycles: the longer run is the steadier figure
        result["ms_per_cycle"] = round(1000 * totals[1] / (2 * cycles), 3)
    return result | {"totals": totals}


def table(results: Results) -> str:
    rows = [
        [
            r["engine"],
            r["cycles"],
            r.get("instructions_per_cycle", "n/a"),
            r.get("ms_per_cycle", "n/a"),
            r.get("database_us_per_cycle", "n/a"),
            r.get("database_instructions_per_cycle", "n/a"),
            r.get("error") or "",
        ]
        for r in results
    ]
    headers = ["engine", "cycles", "instructions per cycle", "ms per cycle"]
    headers += ["database µs per cycle", "database instructions per cycle", "error"]
    return markdown_table(headers, rows)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser("instructions", __doc__)
    parser.add_argument(
        "--engines", type=choices(ENGINES, "engines"), default=list(ENGINES), help="sqlite,postgres"
    )
    parser.add_argument("--cycles", type=int, default=200, help="cycles of the shorter run")
    parser.add_argument("--no-valgrind", action="store_true", help="time the cycles instead")
    parser.add_argument(
        "--count-postgres",
        action="store_true",
        help="run PostgreSQL privately under callgrind and count its backends' instructions "
        "too (instead of using --pg-admin-url)",
    )
    parser.add_argument("--run-cycles", type=int, help=argparse.SUPPRESS)  # the inner run
    parser.add_argument("--database-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cycles < 1:
        parser.error("--cycles must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.run_cycles is not None:  # inside the measured process: print what it measured
        seconds, database, pids = run_on_servers_loop(
            run_cycles(args.database_url, args.run_cycles)
        )
        print(seconds, database, ",".join(map(str, pids)) or ",")
        return 0
    valgrind = not args.no_valgrind
    if (valgrind or args.count_postgres) and shutil.which("valgrind") is None:
        log("valgrind is not installed (Debian: apt-get install valgrind); or use --no-valgrind")
        return 2

    async def work(options: TargetOptions, results: Results) -> None:
        async with AsyncExitStack() as stack:
            counted = None
            if args.count_postgres and "postgres" in args.engines:
                counted = await stack.enter_async_context(callgrind_postgres())
            for engine in args.engines:
                await measure_into(results, engine, args.cycles, options, valgrind, counted)

    return run_command(args, "instructions", work, table)


async def measure_into(results: Results, engine: str, cycles: int, *args: Any) -> None:
    """``measure`` one engine and emit its line, or a line with the error."""
    try:
        results.append(emit(await measure(engine, cycles, *args)))
    except (CycleError, TargetError, ClusterError, OSError, subprocess.SubprocessError) as exc:
        failure = {"scenario": "instructions", "engine": engine, "cycles": cycles}
        results.append(emit(failure | {"error": f"{type(exc).__name__}: {exc}"}))


if __name__ == "__main__":
    sys.exit(main())
