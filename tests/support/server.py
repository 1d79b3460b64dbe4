"""Real Taskhub server processes for system tests.

``running_hub("sqlite" | "postgres", directory)`` provisions a fresh database (a SQLite file,
or a new PostgreSQL database copied from one migrated with ``taskhub migrate``), starts
``taskhub serve`` on a free port of 127.0.0.1, waits for ``/healthz``, and on exit stops the
server (SIGTERM, then SIGKILL) and drops the database. PostgreSQL that cannot be reached is
an error, never a skip.
``running_replicas(backend, directory, count)`` does the same for several servers sharing one
database (pass ``env={"TASKHUB_REDIS_URL": ...}`` for cross-replica fan-out), and
``HubServer.create_user`` issues tokens for further users.

The process classes themselves (``HubServer``, ``TaskiqWorker``, ``RedisServer``) live in
``benchmarks/harness/servers.py``, which the chaos scenario shares; they are imported here
under their old names.
"""

from __future__ import annotations

import asyncio
import atexit
import shutil
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Literal

from sqlalchemy.engine import make_url

from benchmarks.harness.servers import (
    HOST,
    REPO_ROOT,
    HubServer,
    RedisServer,
    ServerError,
    TaskiqWorker,
    create_user,
    free_port,
    migrate,
    migrated_sqlite_template,
    new_admin_token,
    revoke_token,
    run_async,
    server_env,
    taskhub_command,
)
from tests.support.databases import create_postgres_database, drop_postgres_database

__all__ = [
    "HOST",
    "REPO_ROOT",
    "Backend",
    "HubServer",
    "RedisServer",
    "ServerError",
    "TaskiqWorker",
    "create_user",
    "free_port",
    "migrate",
    "migrated_sqlite_template",
    "migrated_template",
    "new_admin_token",
    "provisioned_database",
    "revoke_token",
    "run_async",
    "running_hub",
    "running_replicas",
    "server_env",
    "taskhub_command",
]

Backend = Literal["sqlite", "postgres"]


@contextmanager
def provisioned_database(
    backend: Backend, directory: Path, *, migrated: bool = False
) -> Iterator[str]:
    """A fresh, ready-to-serve database URL for ``backend``; PostgreSQL ones are dropped after.
    PostgreSQL's is migrated; SQLite's is a new file (``taskhub serve`` migrates it), or with
    ``migrated`` a copy of a migrated one."""
    if backend == "sqlite":
        path = directory / "hub.db"
        if migrated:
            shutil.copyfile(migrated_sqlite_template(), path)
        yield f"sqlite+aiosqlite:///{path}"
        return
    if backend != "postgres":
        raise ValueError(f"unknown backend {backend!r}")
    template = make_url(migrated_template()).database
    url = run_async(create_postgres_database("taskhub_system", template=template))
    try:
        yield url
    finally:
        run_async(drop_postgres_database(url))


_template_url: list[str] = []


def migrated_template() -> str:
    """A PostgreSQL database migrated by ``taskhub migrate``, once per test process (dropped
    at exit). System tests get copies of it (``CREATE DATABASE … TEMPLATE``): the schema
    migrating each one would give, without a migration subprocess per test."""
    if not _template_url:
        url = run_async(create_postgres_database("taskhub_template"))
        migrate(url)
        atexit.register(lambda: asyncio.run(drop_postgres_database(url)))
        _template_url.append(url)
    return _template_url[0]


@contextmanager
def running_hub(
    backend: Backend, directory: Path, *, env: Mapping[str, str] | None = None
) -> Iterator[HubServer]:
    """A started server on a fresh database of ``backend``; everything is torn down after."""
    with provisioned_database(backend, directory) as url:
        server = HubServer(url, log_dir=directory, env=env)
        with server:
            yield server


@contextmanager
def running_replicas(
    backend: Backend, directory: Path, count: int = 2, *, env: Mapping[str, str] | None = None
) -> Iterator[list[HubServer]]:
    """``count`` servers on one fresh database of ``backend``, sharing the admin token; each
    logs to ``server-<i>.log`` in ``directory``. Started one after the other (so the admin
    token is created once), all stopped and the database dropped after."""
    with provisioned_database(backend, directory) as url, ExitStack() as stack:
        admin_token = new_admin_token()
        servers = [
            HubServer(
                url,
                admin_token=admin_token,
                log_dir=directory,
                env=env,
                log_name=f"server-{index}.log",
            )
            for index in range(count)
        ]
        for server in servers:
            stack.enter_context(server)
        yield servers
