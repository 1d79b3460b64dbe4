"""Provider reads (docs/protocol.md, "Providers"), Taskhub against the zndraw-joblib 0.1.7
reference server in the same run.

Systems:

- ``reference``: zndraw-joblib's own router in a minimal host as ZnDraw hosts it, with
  ZnDraw's Redis result backend (``benchmarks/apps/provider_reference.py``), SQLite, one
  process;
- ``taskhub``: ``taskhub serve`` on SQLite, one process (results in the process);
- ``replicas``: three ``taskhub serve`` replicas on one PostgreSQL database with Redis: the
  provider's socket on B, the reads on A (cached ones alternately on A and C).

The provider is the unmodified zndraw-joblib ``JobManager`` in a process of its own
(``benchmarks/apps/provider_joblib.py``), the same for every system; the reader an
``httpx.AsyncClient`` with keep-alive, one read at a time. Per system and answer (a small
JSON listing; ``--frame-bytes`` of bytes):

- ``cached``: a read whose answer is cached (the same parameters again), p50/p95;
- ``round trip``: a read of new parameters: the hub sends ``provider_request``, the
  provider reads and posts its answer, the waiting reader is woken and answered, p50/p95.

Rounds interleave the systems (each once per round), so that a busy moment of a shared
machine weighs on one round of each. One JSON line per measurement on stdout; a markdown
table on stderr.

    .venv/bin/python -m benchmarks.scenarios.providers              # a few minutes
    .venv/bin/python -m benchmarks.scenarios.providers --quick      # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import asyncpg
import httpx
import redis

from benchmarks.harness.servers import (
    REPO_ROOT,
    HubServer,
    ServerError,
    create_user,
    free_port,
    migrate,
    new_admin_token,
    run_async,
)

PG_ADMIN_URL = os.environ.get("BENCH_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
PREFIX = "/v1/joblib"
ROOM = "bench"
LISTING = f"{ROOM}:filesystem:listing"
FRAMES = f"{ROOM}:frames:frames"
WAIT = {"Prefer": "wait=30"}


@dataclass
class System:
    """A running system: where the provider connects, where reads go (in turn)."""

    name: str
    provider_url: str
    token: str
    read_urls: list[str]
    processes: list[subprocess.Popen[bytes] | HubServer] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@contextmanager
def reference_system(workdir: Path, namespace: str) -> Iterator[System]:
    port = free_port()
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "BENCH_REFERENCE_DATABASE_URL": f"sqlite+aiosqlite:///{workdir / 'reference.db'}",
        "BENCH_REDIS_URL": REDIS_URL,
        "BENCH_REDIS_PREFIX": f"{namespace}:reference",
    }
    log = (workdir / "reference.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.apps.provider_reference", "--port", str(port)],
        cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, process, workdir / "reference.log")
        yield System("reference", url, "unused", [url], [process])
    finally:
        process.terminate()
        process.wait(15)
        log.close()


def _wait_healthy(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerError(f"{url} exited:\n{log.read_text(errors='replace')}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0, trust_env=False).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise ServerError(f"{url} did not start")


@contextmanager
def taskhub_system(workdir: Path) -> Iterator[System]:
    url = f"sqlite+aiosqlite:///{workdir / 'taskhub.db'}"
    with HubServer(url, log_dir=workdir, log_name="taskhub.log") as server:
        token = create_user(url, "provider")
        yield System("taskhub", server.base_url, token, [server.base_url], [server])


@contextmanager
def replicas_system(workdir: Path, namespace: str) -> Iterator[System]:
    database = f"bench_providers_{uuid.uuid4().hex[:8]}"
    run_async(_admin(f'CREATE DATABASE "{database}"'))
    url = PG_ADMIN_URL.replace("postgresql://", "postgresql+asyncpg://").rsplit("/", 1)[0]
    url = f"{url}/{database}"
    try:
        migrate(url)
        env = {"TASKHUB_REDIS_URL": REDIS_URL, "TASKHUB_REDIS_NAMESPACE": f"{namespace}-hub"}
        token = new_admin_token()
        with ExitStack() as stack:
            servers = [
                stack.enter_context(
                    HubServer(url, admin_token=token, log_dir=workdir, env=env,
                              log_name=f"replica-{i}.log")
                )
                for i in range(3)
            ]  # fmt: skip
            a, b, c = servers
            user = create_user(url, "provider")
            yield System("replicas", b.base_url, user, [a.base_url, c.base_url], list(servers))
    finally:
        run_async(_admin(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)'))


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(PG_ADMIN_URL)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextmanager
def provider_process(system: System, workdir: Path) -> Iterator[None]:
    """The ``JobManager`` serving ``listing`` and ``frames`` in ``ROOM`` of ``system``."""
    log: IO[bytes] = (workdir / f"provider-{system.name}.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.apps.provider_joblib", system.provider_url,
         system.token, ROOM],
        cwd=REPO_ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if line.strip() != b"ready":
            raise ServerError(f"provider did not start: {line!r}")
        yield
    finally:
        if process.stdin is not None:
            process.stdin.close()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


async def measure(system: System, reads: int, frame_bytes: int, round_no: int) -> list[dict]:
    """Cached reads and round trips of the listing and of a frame, one at a time."""
    headers = {"Authorization": f"Bearer {system.token}"}
    clients = [
        httpx.AsyncClient(base_url=url + PREFIX, headers=headers, timeout=60.0, trust_env=False)
        for url in system.read_urls
    ]
    results = []
    try:
        for answer, name, params in (
            ("json", LISTING, lambda i: {"path": f"/r{round_no}/{i}"}),
            ("bytes", FRAMES, lambda i: {"index": str(round_no * 100_000 + i),
                                         "size": str(frame_bytes)}),
        ):  # fmt: skip
            path = f"/rooms/{ROOM}/providers/{name}"
            trips: list[float] = []
            for i in range(reads):
                started = time.perf_counter()
                response = await clients[0].get(path, params=params(i), headers=WAIT)
                trips.append(time.perf_counter() - started)
                response.raise_for_status()
            cached: list[float] = []
            for i in range(reads):
                client = clients[i % len(clients)]
                started = time.perf_counter()
                response = await client.get(path, params=params(i % 10))
                cached.append(time.perf_counter() - started)
                response.raise_for_status()
            for kind, values in (("round trip", trips), ("cached", cached)):
                results.append({
                    "system": system.name, "answer": answer, "kind": kind, "round": round_no,
                    "reads": len(values), "p50_ms": percentile(values, 0.5) * 1000,
                    "p95_ms": percentile(values, 0.95) * 1000,
                })  # fmt: skip
    finally:
        for client in clients:
            await client.aclose()
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=200, help="reads per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--frame-bytes", type=int, default=1024 * 1024)
    parser.add_argument("--systems", default="reference,taskhub,replicas")
    parser.add_argument("--quick", action="store_true", help="20 reads, one round")
    args = parser.parse_args(argv)
    if args.quick:
        args.reads, args.rounds = 20, 1
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    factories = {
        "reference": lambda w: reference_system(w, namespace),
        "taskhub": taskhub_system,
        "replicas": lambda w: replicas_system(w, namespace),
    }
    rows: list[dict] = []
    workdir = Path(tempfile.mkdtemp(prefix="bench-providers-"))
    try:
        with ExitStack() as stack:
            systems = []
            for name in args.systems.split(","):
                system = stack.enter_context(factories[name](workdir))
                stack.enter_context(provider_process(system, workdir))
                systems.append(system)
            for round_no in range(args.rounds):
                for system in systems:
                    for row in asyncio.run(measure(system, args.reads, args.frame_bytes, round_no)):
                        print(json.dumps(row), flush=True)
                        rows.append(row)
    finally:
        with redis.Redis.from_url(REDIS_URL) as client:
            keys = [*client.scan_iter(f"{namespace}:*"), *client.scan_iter(f"{namespace}-*")]
            if keys:
                client.delete(*keys)
    print(table(rows, args), file=sys.stderr)
    return 0


def table(rows: list[dict], args: argparse.Namespace) -> str:
    """Medians over the rounds of each system's p50 and p95, per answer and kind."""
    lines = [
        f"Provider reads: {args.reads} reads per measurement, {args.rounds} rounds "
        f"(medians of the rounds' percentiles), frames of {args.frame_bytes} bytes.",
        "",
        "| system | answer | kind | p50 ms | p95 ms |",
        "|---|---|---|---|---|",
    ]
    keys = sorted({(r["answer"], r["kind"], r["system"]) for r in rows})
    for answer, kind, system in keys:
        same = [r for r in rows if (r["answer"], r["kind"], r["system"]) == (answer, kind, system)]
        p50 = statistics.median(r["p50_ms"] for r in same)
        p95 = statistics.median(r["p95_ms"] for r in same)
        lines.append(f"| {system} | {answer} | {kind} | {p50:.2f} | {p95:.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
