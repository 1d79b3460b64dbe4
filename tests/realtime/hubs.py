"""Taskhub replicas served by uvicorn in the test's own event loop: real HTTP and Socket.IO
connections, a real database and a real (private) Redis, with settings of the test's own,
started in a fraction of the time a ``taskhub serve`` process takes."""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import uvicorn

from taskhub.main import TaskhubApp, create_app
from taskhub.services.users import create_user
from taskhub.settings import Settings
from taskhub.store.database import Database
from tests.support.api import ApiClient
from tests.support.databases import (
    create_postgres_database,
    create_schema_from_models,
    drop_postgres_database,
)
from tests.support.server import HOST


@dataclass
class Replica:
    app: TaskhubApp
    base_url: str
    http: httpx.AsyncClient

    def api(self, token: str) -> ApiClient:
        return ApiClient(self.http, token)


@asynccontextmanager
async def served(app: Any) -> AsyncIterator[str]:
    """The ASGI ``app`` served by uvicorn on this loop (a hub's lifespan starts and stops
    it); its base URL."""
    listening = socket.socket()
    listening.bind((HOST, 0))  # a port of its own: no race for a free one
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    running = asyncio.create_task(server.serve(sockets=[listening]))
    try:
        while not server.started:
            assert not running.done(), "uvicorn did not start"
            await asyncio.sleep(0.01)
        yield f"http://{HOST}:{listening.getsockname()[1]}"
    finally:
        server.should_exit = True
        await running
        listening.close()


@asynccontextmanager
async def postgres_database() -> AsyncIterator[str]:
    """A fresh PostgreSQL database with the schema (dropped after)."""
    url = await create_postgres_database("taskhub_realtime")
    try:
        db = Database(Settings(database_url=url))
        await create_schema_from_models(db)
        await db.dispose()
        yield url
    finally:
        await drop_postgres_database(url)


@asynccontextmanager
async def hub_database() -> AsyncIterator[tuple[str, str]]:
    """A database URL and a Redis namespace of the test's own."""
    async with postgres_database() as url:
        yield url, f"test-{uuid.uuid4().hex[:12]}"


def hub_settings(database_url: str, redis_url: str, namespace: str, grace: float) -> Settings:
    """A hub on that database and Redis; the sweeper off (removals come from the grace
    period alone)."""
    return Settings(
        database_url=database_url,
        redis_url=redis_url,
        redis_namespace=namespace,
        socket_disconnect_grace_seconds=grace,
        sweeper_enabled=False,
    )


async def new_user(settings: Settings, name: str) -> str:
    """A user of ``settings``' database; its token."""
    db = Database(settings)
    try:
        return (await create_user(db, name))[1]
    finally:
        await db.dispose()


@asynccontextmanager
async def replicas(*settings: Settings) -> AsyncIterator[list[Replica]]:
    """A replica per ``settings`` (of one hub: the same database and Redis, though perhaps
    reached another way), each with an HTTP client of its own."""
    async with AsyncExitStack() as stack:
        started = []
        for each in settings:
            app = create_app(each)
            url = await stack.enter_async_context(served(app))
            http = await stack.enter_async_context(
                httpx.AsyncClient(base_url=url, timeout=10, trust_env=False)
            )
            started.append(Replica(app, url, http))
        yield started
