"""The servers the scenarios run against, each started in a subprocess on a free 127.0.0.1
port and always stopped (SIGTERM, then SIGKILL) when its context exits: the ceiling app,
``taskhub serve`` on a fresh migrated database of either engine (and the throughput
benchmark's ablations of it), replicas sharing Redis."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import socket
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx

from benchmarks.harness.cpu import proc_stat

LOCALHOST = "127.0.0.1"
REPO_ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_SECONDS = 60.0
STOP_TIMEOUT_SECONDS = 15.0
MIGRATE_TIMEOUT_SECONDS = 120.0
DEFAULT_PG_ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"


class TargetError(RuntimeError):
    """A target server could not be prepared or started."""


@dataclass(frozen=True)
class Target:
    """A running server the benchmark talks to."""

    name: str
    base_url: str
    token: str
    pid: int | None = None  # the server process, when this script started it
    database_url: str | None = None  # SQLAlchemy URL of the hub's database, when known
    database_pid: int | None = None  # PostgreSQL's postmaster, when it runs on this machine


@dataclass(frozen=True)
class TargetOptions:
    """What the target factories need to know. ``templates``: where a run keeps the
    databases it migrated once to copy (``fresh_database``; ``drop_templates`` at its end);
    None: every database is migrated on its own."""

    workdir: Path
    log_level: str
    access_log: bool
    pg_admin_url: str
    templates: dict[str, str] | None = field(default=None, compare=False)
    template_locks: dict[str, asyncio.Lock] = field(default_factory=dict, compare=False, repr=False)


TargetFactory = Callable[[TargetOptions], AbstractAsyncContextManager[Target]]


def require_local(url: str) -> None:
    """Refuse any URL that does not point at 127.0.0.1."""
    if urlsplit(url).hostname != LOCALHOST:
        raise TargetError(f"only {LOCALHOST} is allowed, not {url!r}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOCALHOST, 0))
        return int(sock.getsockname()[1])


def taskhub_command() -> list[str]:
    """The ``taskhub`` console script next to this interpreter (else ``python -m taskhub.cli``)."""
    script = Path(sys.executable).with_name("taskhub")
    return [str(script)] if script.exists() else [sys.executable, "-m", "taskhub.cli"]


def _log_tail(path: Path, lines: int = 20) -> str:
    if not path.exists():
        return ""
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is not None:
        return
    proc.terminate()
    try:
        await asyncio.wait_for(proc.wait(), STOP_TIMEOUT_SECONDS)
    except TimeoutError:
        proc.kill()
        await proc.wait()


async def _wait_healthy(proc: asyncio.subprocess.Process, base_url: str, log: Path) -> None:
    """Poll ``GET /healthz`` until it answers 200; fail if the process exits or time runs out."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_TIMEOUT_SECONDS
    async with httpx.AsyncClient(base_url=base_url, timeout=2.0, trust_env=False) as client:
        while loop.time() < deadline:
            if proc.returncode is not None:
                raise TargetError(f"server exited with {proc.returncode}:\n{_log_tail(log)}")
            try:
                if (await client.get("/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.1)
    raise TargetError(f"server not healthy after {START_TIMEOUT_SECONDS}s:\n{_log_tail(log)}")


async def _run_to_end(argv: list[str], env: dict[str, str], log: Path) -> None:
    """Run a one-shot command (e.g. ``taskhub migrate``) and fail unless it exits with 0."""
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, cwd=REPO_ROOT, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
    try:
        async with asyncio.timeout(MIGRATE_TIMEOUT_SECONDS):
            code = await proc.wait()
    except TimeoutError:
        raise TargetError(f"{' '.join(argv)} took over {MIGRATE_TIMEOUT_SECONDS}s") from None
    finally:
        await _stop(proc)
    if code != 0:
        raise TargetError(f"{' '.join(argv)} exited with {code}:\n{_log_tail(log)}")


@asynccontextmanager
async def served(
    name: str,
    argv: list[str],
    env: dict[str, str],
    port: int,
    token: str,
    log: Path,
    database_url: str | None = None,
    database_pid: int | None = None,
) -> AsyncIterator[Target]:
    """Start a server subprocess, wait until it is healthy, yield it, and always stop it."""
    with log.open("ab") as out:
        proc = await asyncio.create_subprocess_exec(
            *argv, env=env, cwd=REPO_ROOT, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
    base_url = f"http://{LOCALHOST}:{port}"
    try:
        await _wait_healthy(proc, base_url, log)
        yield Target(name, base_url, token, proc.pid, database_url, database_pid)
    finally:
        await _stop(proc)


def database_env(database_url: str) -> dict[str, str]:
    """The caller's environment (other ``TASKHUB_*`` knobs pass through) on one database,
    without Redis (in-memory broker: the hub is a single process here)."""
    env = {**os.environ, "TASKHUB_DATABASE_URL": database_url}
    env.pop("TASKHUB_REDIS_URL", None)
    return env


# The per-user limits are off on the benchmarks' hubs (their clients are few users sending
# as fast as the hub takes), unless the environment sets them (the floods scenario does).
LIMITS_OFF = {
    "TASKHUB_USER_SUBMIT_RATE": "0",
    "TASKHUB_USER_MAX_PENDING_TASKS": "0",
    "TASKHUB_USER_MAX_STORED_BYTES": "0",
    "TASKHUB_USER_MAX_SOCKETS": "0",
}


def _hub_env(database_url: str, token: str, options: TargetOptions) -> dict[str, str]:
    env = {**LIMITS_OFF, **database_env(database_url)}
    env.update(
        TASKHUB_ADMIN_TOKEN=token,
        TASKHUB_LOG_LEVEL=options.log_level,
        TASKHUB_ACCESS_LOG=str(options.access_log).lower(),
    )
    return env


def _serve_argv(port: int) -> list[str]:
    return [*taskhub_command(), "serve", "--host", LOCALHOST, "--port", str(port)]


@asynccontextmanager
async def ceiling_target(options: TargetOptions) -> AsyncIterator[Target]:
    """The trivial in-memory app of ``benchmarks/apps/ceiling.py`` under uvicorn."""
    port, token = free_port(), secrets.token_urlsafe(16)
    argv = [
        sys.executable,
        "-m",
        "uvicorn",
        "benchmarks.apps.ceiling:app",
        "--host",
        LOCALHOST,
        "--port",
        str(port),
        "--log-level",
        options.log_level,
        "--access-log" if options.access_log else "--no-access-log",
        "--app-dir",
        str(REPO_ROOT),
    ]
    env = {**os.environ, "BENCH_CEILING_TOKEN": token}
    log = options.workdir / "ceiling.log"
    async with served("ceiling", argv, env, port, token, log) as target:
        yield target


async def _pg_admin(admin_url: str, sql: str) -> None:
    """Run one statement on the admin database (a ``postgresql+asyncpg://`` URL is fine)."""
    try:
        conn = await asyncpg.connect(_pg_url(admin_url, "postgresql"), timeout=10)
        try:
            await conn.execute(sql)
        finally:
            await conn.close()
    except (asyncpg.PostgresError, OSError) as exc:
        raise TargetError(f"{sql!r} failed: {exc}") from exc


async def pg_server_pid(admin_url: str) -> int | None:
    """The postmaster's process id, if the server runs on this machine (its backend's
    parent, as ``/proc`` shows it); None otherwise (its CPU time is then not reported)."""
    try:
        conn = await asyncpg.connect(_pg_url(admin_url, "postgresql"), timeout=10)
        try:  # read while the backend lives: it exits when the connection closes
            stat = proc_stat(await conn.fetchval("SELECT pg_backend_pid()"))
        finally:
            await conn.close()
    except (asyncpg.PostgresError, OSError):
        return None
    return int(stat[1][1]) if stat is not None and stat[0] == "postgres" else None


def _pg_url(admin_url: str, scheme: str, database: str | None = None) -> str:
    """``admin_url`` with another scheme and, if given, another database."""
    parts = urlsplit(admin_url)
    path = parts.path if database is None else f"/{database}"
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def _database_url(admin_url: str, database: str) -> str:
    return _pg_url(admin_url, "postgresql+asyncpg", database)


async def _migrated(url: str, log: Path) -> None:
    """``taskhub migrate`` of ``url`` (an empty database, or a SQLite file not there yet)."""
    await _run_to_end([*taskhub_command(), "migrate"], database_env(url), log)


async def _template(engine: str, options: TargetOptions) -> str | None:
    """The run's migrated template of ``engine`` (a SQLite file, or a database on the admin
    URL), made at first use (hubs started side by side wait for the one); None if the run
    keeps none."""
    if options.templates is None:
        return None
    key = engine if engine == "sqlite" else f"{engine} {options.pg_admin_url}"
    async with options.template_locks.setdefault(key, asyncio.Lock()):
        if key not in options.templates:
            if engine == "sqlite":
                path = options.workdir / f"template-{secrets.token_hex(4)}.db"
                await _migrated(f"sqlite+aiosqlite:///{path}", path.with_suffix(".log"))
                options.templates[key] = str(path)
            else:
                name = f"bench_template_{secrets.token_hex(6)}"
                await _pg_admin(options.pg_admin_url, f'CREATE DATABASE "{name}"')
                options.templates[key] = name  # dropped by ``drop_templates`` even if unmigrated
                url = _database_url(options.pg_admin_url, name)
                await _migrated(url, options.workdir / f"{name}.log")
    return options.templates[key]


async def drop_templates(options: TargetOptions) -> None:
    """Drop the run's PostgreSQL templates (its SQLite ones go with the work directory);
    best effort: a private server may be gone already, and its databases with it."""
    for key, name in (options.templates or {}).items():
        engine, _, admin_url = key.partition(" ")
        if engine == "postgres":
            with contextlib.suppress(TargetError):
                await _pg_admin(admin_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    if options.templates is not None:
        options.templates.clear()


@asynccontextmanager
async def fresh_database(engine: str, options: TargetOptions) -> AsyncIterator[str]:
    """A migrated database of its own: a SQLite file in the work directory, or
    (``postgres``) a fresh database on the admin URL, dropped afterwards. Yields its
    SQLAlchemy URL. A copy of the run's template (``TargetOptions.templates``), else
    migrated by ``taskhub migrate`` on its own: the same schema either way."""
    template = await _template(engine, options)
    if engine == "sqlite":
        path = options.workdir / f"bench-{secrets.token_hex(4)}.db"
        url = f"sqlite+aiosqlite:///{path}"
        if template is None:
            await _migrated(url, path.with_suffix(".log"))
        else:
            await asyncio.to_thread(shutil.copyfile, template, path)
        yield url
        return
    require_local(options.pg_admin_url)
    database = f"bench_{secrets.token_hex(6)}"
    url = _database_url(options.pg_admin_url, database)
    copy = "" if template is None else f' TEMPLATE "{template}"'
    await _pg_admin(options.pg_admin_url, f'CREATE DATABASE "{database}"{copy}')
    try:
        if template is None:
            await _migrated(url, options.workdir / f"{database}.log")
        yield url
    finally:
        await _pg_admin(options.pg_admin_url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')


# What ``postgres-floor`` keeps of ``task``: its primary key and the claim queue's index.
FLOOR_KEEPS = ("pk_task", "ix_task_claim_queue")
_FLOOR_TRIGGERS = (
    "SELECT tgname FROM pg_trigger WHERE tgrelid = 'task'::regclass AND NOT tgisinternal"
)
_FLOOR_FOREIGN_KEYS = (
    "SELECT conname FROM pg_constraint WHERE conrelid = 'task'::regclass AND contype = 'f'"
)
_FLOOR_INDEXES = (
    "SELECT indexname FROM pg_indexes WHERE tablename = 'task' AND indexname <> ALL($1)"
)


async def strip_to_floor(database_url: str) -> list[str]:
    """Take from ``task`` everything the task cycle's statements do not need to run: its
    triggers (the queue counts), foreign keys and indexes but ``FLOOR_KEEPS``. What is left
    serves no product (queue positions go wrong, listings scan the table); it measures how
    much of PostgreSQL's throughput the schema's rules cost. Returns what was dropped."""
    conn = await asyncpg.connect(_pg_url(database_url, "postgresql"), timeout=10)
    try:
        triggers = [r[0] for r in await conn.fetch(_FLOOR_TRIGGERS)]
        foreign_keys = [r[0] for r in await conn.fetch(_FLOOR_FOREIGN_KEYS)]
        indexes = [r[0] for r in await conn.fetch(_FLOOR_INDEXES, list(FLOOR_KEEPS))]
        async with conn.transaction():
            for name in triggers:
                await conn.execute(f'DROP TRIGGER "{name}" ON task')
            for name in foreign_keys:
                await conn.execute(f'ALTER TABLE task DROP CONSTRAINT "{name}"')
            for name in indexes:
                await conn.execute(f'DROP INDEX "{name}"')
    finally:
        await conn.close()
    return [*triggers, *foreign_keys, *indexes]


@asynccontextmanager
async def hub_target(
    engine: str,
    options: TargetOptions,
    *,
    floor: bool = False,
    extra_env: dict[str, str] | None = None,
) -> AsyncIterator[Target]:
    """``taskhub serve`` on a fresh, migrated database of ``engine`` (``sqlite`` or
    ``postgres``; a PostgreSQL database is dropped afterwards); with ``floor``, a
    PostgreSQL schema stripped by ``strip_to_floor``; ``extra_env`` added to the hub's
    environment (e.g. a ``PYTHONPATH`` naming another tree's ``taskhub``)."""
    port, token = free_port(), "th_" + secrets.token_urlsafe(32)
    async with fresh_database(engine, options) as url:
        if floor:
            await strip_to_floor(url)
        env = {**_hub_env(url, token, options), **(extra_env or {})}
        name = f"{engine}-floor" if floor else engine
        log = options.workdir / f"{name}.log"
        postmaster = await pg_server_pid(options.pg_admin_url) if engine == "postgres" else None
        argv = _serve_argv(port)
        async with served(name, argv, env, port, token, log, url, postmaster) as target:
            yield target


def sqlite_target(options: TargetOptions) -> AbstractAsyncContextManager[Target]:
    return hub_target("sqlite", options)


def postgres_target(options: TargetOptions) -> AbstractAsyncContextManager[Target]:
    return hub_target("postgres", options)


def postgres_floor_target(options: TargetOptions) -> AbstractAsyncContextManager[Target]:
    return hub_target("postgres", options, floor=True)


PGBOUNCER = "/usr/sbin/pgbouncer"
# Server connections PgBouncer keeps per database: the hub's own pool size (10), so that a
# difference measured is the hop and the unnamed statements, not fewer connections.
PGBOUNCER_POOL_SIZE = 10


@asynccontextmanager
async def pgbouncer(admin_url: str) -> AsyncIterator[int]:
    """Debian's PgBouncer (1.18) in transaction mode on a free port, in front of the
    server of ``admin_url`` (every database, under its own name); yields its port. Run as
    root, it runs as ``nobody`` (PgBouncer refuses root) from a directory of its own."""
    parts = urlsplit(admin_url)
    user, password = parts.username or "postgres", parts.password or ""
    # Its own directory in /tmp (the work directory may not be open to ``nobody``).
    directory = Path(tempfile.mkdtemp(prefix="taskhub-pgbouncer-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        import pwd

        nobody = pwd.getpwnam("nobody")
        os.chown(directory, nobody.pw_uid, nobody.pw_gid)
        as_user = ["-u", "nobody"]
    port = free_port()
    target = f"host={parts.hostname} port={parts.port or 5432}"
    target += f" password={password}" if password else ""
    (directory / "users.txt").write_text(f'"{user}" "{password}"\n')
    config = directory / "pgbouncer.ini"
    config.write_text(
        f"[databases]\n* = {target}\n[pgbouncer]\nlisten_addr = {LOCALHOST}\n"
        f"listen_port = {port}\nunix_socket_dir =\nauth_type = trust\n"
        f"auth_file = {directory / 'users.txt'}\npool_mode = transaction\n"
        f"default_pool_size = {PGBOUNCER_POOL_SIZE}\nmax_client_conn = 1000\n"
        f"logfile = {directory / 'pgbouncer.log'}\n"
    )
    proc = await asyncio.create_subprocess_exec(
        PGBOUNCER,
        *as_user,
        str(config),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                _reader, writer = await asyncio.open_connection(LOCALHOST, port)
            except OSError:
                if proc.returncode is not None:
                    raise TargetError(f"pgbouncer exited with {proc.returncode}") from None
                await asyncio.sleep(0.05)
                continue
            writer.close()
            break
        else:
            raise TargetError("pgbouncer did not listen within 10 s")
        yield port
    finally:
        await _stop(proc)
        shutil.rmtree(directory, ignore_errors=True)


@asynccontextmanager
async def postgres_pooled_target(
    options: TargetOptions, *, through_pgbouncer: bool = True
) -> AsyncIterator[Target]:
    """``taskhub serve`` with ``TASKHUB_DATABASE_POOLER=transaction`` (no statement cache,
    no startup settings): through PgBouncer in transaction mode, or (``through_pgbouncer``
    false) straight to PostgreSQL, which isolates what the settings cost from the hop."""
    port, token = free_port(), "th_" + secrets.token_urlsafe(32)
    name = "postgres-pgbouncer" if through_pgbouncer else "postgres-nocache"
    async with AsyncExitStack() as stack:
        url = await stack.enter_async_context(fresh_database("postgres", options))
        if through_pgbouncer:
            bouncer = await stack.enter_async_context(pgbouncer(options.pg_admin_url))
            parts = urlsplit(url)
            netloc = parts.netloc.rsplit("@", 1)
            host = f"{LOCALHOST}:{bouncer}"
            url = urlunsplit(
                (
                    parts.scheme,
                    f"{netloc[0]}@{host}" if len(netloc) == 2 else host,
                    parts.path,
                    "",
                    "",
                )
            )
        env = _hub_env(url, token, options)
        env["TASKHUB_DATABASE_POOLER"] = "transaction"
        log = options.workdir / f"{name}.log"
        postmaster = await pg_server_pid(options.pg_admin_url)
        target = await stack.enter_async_context(
            served(name, _serve_argv(port), env, port, token, log, url, postmaster)
        )
        yield target


def postgres_pgbouncer_target(options: TargetOptions) -> AbstractAsyncContextManager[Target]:
    return postgres_pooled_target(options)


def postgres_nocache_target(options: TargetOptions) -> AbstractAsyncContextManager[Target]:
    return postgres_pooled_target(options, through_pgbouncer=False)


@asynccontextmanager
async def external_target(url: str, token: str) -> AsyncIterator[Target]:
    """An already-running hub (only on 127.0.0.1)."""
    require_local(url)
    yield Target(name="url", base_url=url.rstrip("/"), token=token)


FACTORIES: dict[str, TargetFactory] = {
    "ceiling": ceiling_target,
    "sqlite": sqlite_target,
    "postgres": postgres_target,
}

# Measurements, not configurations: the throughput benchmark takes them by name, the
# default runs (and the backlog scenario, whose queue positions they would falsify) do not.
# (``postgres-pgbouncer`` and ``postgres-nocache``: what ``TASKHUB_DATABASE_POOLER=
# transaction`` costs, through PgBouncer and without it.)
ABLATIONS: dict[str, TargetFactory] = {
    "postgres-floor": postgres_floor_target,
    "postgres-pgbouncer": postgres_pgbouncer_target,
    "postgres-nocache": postgres_nocache_target,
}


@asynccontextmanager
async def postgres_replicas(
    options: TargetOptions,
    count: int,
    redis_url: str,
    *,
    extra_env: dict[str, str] | None = None,
) -> AsyncIterator[list[Target]]:
    """``count`` ``taskhub serve`` processes on one fresh PostgreSQL database, sharing Redis
    (Socket.IO fan-out and long-poll wake-ups across replicas); ``extra_env`` added to their
    environment."""
    require_local(options.pg_admin_url)
    require_local(redis_url.replace("redis://", "http://"))
    token = "th_" + secrets.token_urlsafe(32)
    database = f"bench_{secrets.token_hex(6)}"
    url = _database_url(options.pg_admin_url, database)
    env = _hub_env(url, token, options)
    env["TASKHUB_REDIS_URL"] = redis_url
    env.update(extra_env or {})
    log = options.workdir / "replicas.log"
    await _pg_admin(options.pg_admin_url, f'CREATE DATABASE "{database}"')
    try:
        await _run_to_end([*taskhub_command(), "migrate"], env, log)
        async with AsyncExitStack() as stack:
            replicas = []
            for index in range(count):
                port = free_port()
                replicas.append(
                    await stack.enter_async_context(
                        served(f"replica{index}", _serve_argv(port), env, port, token, log, url)
                    )
                )
            yield replicas
    finally:
        await _pg_admin(options.pg_admin_url, f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
