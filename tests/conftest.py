"""Fixtures shared by the whole suite. Every behaviour test runs on SQLite and PostgreSQL.

Tiers: every test gets the marker of its folder (``TIERS``; pyproject.toml registers them),
so ``-m unit`` runs the pure rules and validation, ``-m "unit or services"`` the fast loop.
Engines: ``--engine sqlite|postgres`` (repeatable; else ``TASKHUB_TEST_ENGINES``, a comma
list; else both) keeps the tests of those engines: a test parametrized on another engine (a
``database_url``, ``empty_url``, ``backend``, ... param of ``"sqlite"`` or ``"postgres"``),
or marked ``postgres`` when PostgreSQL is not chosen, is deselected.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from collections.abc import AsyncIterator, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
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
from tests.support.properties import register_profiles

T = TypeVar("T")

# Hypothesis' ``suite`` profile (tests/support/properties.py); ``--hypothesis-profile`` may
# name another.
register_profiles()


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


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file with the schema built from the models, once per test process: each
    test's SQLite database is a copy of it (the same schema, without building it again)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "taskhub.db"

    async def create() -> None:
        db = Database(Settings(database_url=f"sqlite+aiosqlite:///{path}"))
        await create_schema_from_models(db)
        await db.dispose()  # the last connection gone, the WAL is merged into the file

    run_sync(create())
    return path


@pytest.fixture(params=["sqlite", "postgres"])
async def database_url(request: pytest.FixtureRequest, tmp_path) -> AsyncIterator[str]:  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        path = tmp_path / "taskhub.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite+aiosqlite:///{path}"
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


ENGINES = ("sqlite", "postgres")
ENGINES_VARIABLE = "TASKHUB_TEST_ENGINES"
# A test's tier, by the folder under tests/ it is in; a test file at the top of tests/ is
# ``integration``.
TIERS = {
    "rules": "unit",
    "validation": "unit",
    "services": "services",
    "store": "store",
    "transport": "integration",
    "realtime": "integration",
    "duties": "integration",
    "dispatch": "integration",
    "observability": "integration",
    "sdk": "integration",
    "system": "system",
    "embedding": "system",  # the example host application, as its users run it
    "page": "page",
    "chaos": "chaos",
    "benchmarks": "benchmark",
}
TESTS = Path(__file__).resolve().parent
# The fixtures a test's backend comes from (``empty_url``: a migration test's own database).
BACKEND_PARAMETERS = ("database_url", "empty_url")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--engine",
        action="append",
        choices=ENGINES,
        default=None,
        help=f"run the tests of this database engine only (repeatable; default: "
        f"${ENGINES_VARIABLE}, a comma list, else both)",
    )


def selected_engines(config: pytest.Config) -> set[str]:
    """The engines chosen by ``--engine``, else by ``TASKHUB_TEST_ENGINES``, else all."""
    chosen: list[str] | None = config.getoption("engine")
    if not chosen:
        chosen = [e.strip() for e in os.environ.get(ENGINES_VARIABLE, "").split(",") if e.strip()]
        unknown = set(chosen) - set(ENGINES)
        if unknown:
            raise pytest.UsageError(
                f"{ENGINES_VARIABLE}: unknown engine(s) {sorted(unknown)}; choose from {ENGINES}"
            )
    return set(chosen or ENGINES)


def tier(item: pytest.Item) -> str:
    """The tier marker of a test, by its folder under tests/."""
    path = item.path.resolve()
    parts = path.relative_to(TESTS).parts if path.is_relative_to(TESTS) else ()
    return TIERS.get(parts[0], "integration") if len(parts) > 1 else "integration"


def _unwanted_engine(item: pytest.Item, engines: set[str]) -> bool:
    """Whether the test runs on an engine not chosen: a parameter of its names one, or it
    needs PostgreSQL (``postgres``) and PostgreSQL is not chosen."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        for value in callspec.params.values():
            if isinstance(value, str) and value in ENGINES and value not in engines:
                return True
    return "postgres" not in engines and item.get_closest_marker("postgres") is not None


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by the markers added here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks each test with its tier (and ``postgres`` where it asks for the session's
    PostgreSQL database); deselects (not skips) the tests of engines not chosen, and a
    ``postgres_only`` test's SQLite variant."""
    engines = selected_engines(config)
    deselected: list[pytest.Item] = []
    kept: list[pytest.Item] = []
    for item in items:
        item.add_marker(tier(item))
        if "postgres_session_url" in getattr(item, "fixturenames", ()):
            item.add_marker("postgres")
        callspec = getattr(item, "callspec", None)
        sqlite_variant_of_postgres_only = (
            item.get_closest_marker("postgres_only") is not None
            and callspec is not None
            and "sqlite" in (callspec.params.get(name) for name in BACKEND_PARAMETERS)
        )
        if sqlite_variant_of_postgres_only or _unwanted_engine(item, engines):
            deselected.append(item)
        else:
            kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
