"""Fixtures shared by the whole suite. Every behaviour test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import pytest

from taskhub.main import TaskhubApp, create_app
from taskhub.rules.events import Event
from taskhub.services.users import create_user
from taskhub.settings import Settings
from taskhub.store.database import Database
from tests.support.api import ApiClient
from tests.support.databases import (
    create_postgres_database,
    create_schema_from_models,
    drop_postgres_database,
    truncate_all,
)
from tests.support.events import EventRecorder

T = TypeVar("T")


def run_sync(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion on its own loop, even from inside a running one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


@pytest.fixture(scope="session")
def postgres_session_url() -> Iterator[str]:
    """One PostgreSQL database (schema from the models) for the whole run."""

    async def create() -> str:
        url = await create_postgres_database()
        db = Database(Settings(database_url=url))
        await create_schema_from_models(db)
        await db.dispose()
        return url

    url = run_sync(create())
    yield url
    run_sync(drop_postgres_database(url))


@pytest.fixture(params=["sqlite", "postgres"])
async def database_url(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[str]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        url = f"sqlite+aiosqlite:///{tmp_path / 'taskhub.db'}"
        db = Database(Settings(database_url=url))
        await create_schema_from_models(db)
        await db.dispose()
        yield url
    else:
        url = request.getfixturevalue("postgres_session_url")
        db = Database(Settings(database_url=url))
        await truncate_all(db)
        await db.dispose()
        yield url


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, long_poll_max_wait_seconds=5)


@pytest.fixture
async def db(settings: Settings) -> AsyncIterator[Database]:
    database = Database(settings)
    yield database
    await database.dispose()


@dataclass
class Users:
    admin: str
    alice: str
    bob: str


@pytest.fixture
async def tokens(db: Database) -> Users:
    _, admin = await create_user(db, "root", superuser=True)
    _, alice = await create_user(db, "alice")
    _, bob = await create_user(db, "bob")
    return Users(admin=admin, alice=alice, bob=bob)


@pytest.fixture
async def app(settings: Settings, tokens: Users) -> AsyncIterator[object]:
    application = create_app(settings)
    async with application.lifespan_context():
        yield application


@pytest.fixture
async def http(app: object) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as client:
        yield client


@pytest.fixture
def admin(http: httpx.AsyncClient, tokens: Users) -> ApiClient:
    return ApiClient(http, tokens.admin)


@pytest.fixture
def alice(http: httpx.AsyncClient, tokens: Users) -> ApiClient:
    return ApiClient(http, tokens.alice)


@pytest.fixture
def bob(http: httpx.AsyncClient, tokens: Users) -> ApiClient:
    return ApiClient(http, tokens.bob)


@pytest.fixture
def anonymous(http: httpx.AsyncClient) -> ApiClient:
    return ApiClient(http, None)


@pytest.fixture
async def job(alice: ApiClient) -> dict[str, Any]:
    """``JOB`` (``tests.support.api``) registered by alice: the job as the hub answered it,
    its ``worker_id`` the worker that serves it."""
    return await alice.register()


@pytest.fixture
def recorder(app: TaskhubApp) -> EventRecorder:
    """Every event the hub publishes from now on (``wait_for`` waits for one to arrive)."""
    recorder = EventRecorder()
    app.hub.publisher.add_sink(recorder)
    return recorder


@pytest.fixture
def published(recorder: EventRecorder) -> list[Event]:
    """The events published so far, in order (a live list)."""
    return recorder.events


# The fixtures a test's backend comes from (``empty_url``: a migration test's own database).
BACKEND_PARAMETERS = ("database_url", "empty_url")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A ``postgres_only`` test is not collected for SQLite at all (deselected, not skipped)."""
    sqlite_only_variants = [
        item
        for item in items
        if item.get_closest_marker("postgres_only") is not None
        and getattr(item, "callspec", None) is not None
        and "sqlite" in (item.callspec.params.get(name) for name in BACKEND_PARAMETERS)  # type: ignore[attr-defined]
    ]
    if sqlite_only_variants:
        config.hook.pytest_deselected(items=sqlite_only_variants)
        items[:] = [item for item in items if item not in sqlite_only_variants]
