"""System-test fixtures: real ``taskhub serve`` processes on real databases.

``hub_server`` is a fresh server per test, for tests about the server's own life (start,
stop, crash). ``shared_server`` is one server per backend for a whole module, for tests of
what the server does while it runs: each of them keeps to rooms and users of its own
(``unique``), so nothing one leaves behind is seen by another.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.names import unique
from tests.support.server import HubServer, running_hub

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(params=BACKENDS)
def hub_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HubServer]:
    """A running server on a fresh database of each backend (PostgreSQL down = failure)."""
    with running_hub(request.param, tmp_path) as server:
        yield server


@pytest.fixture(scope="module", params=BACKENDS)
def shared_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[HubServer]:
    """One running server per backend for the module's tests; a module may set
    ``SERVER_ENV`` (extra ``TASKHUB_*`` settings) for its server."""
    env = getattr(request.module, "SERVER_ENV", None)
    with running_hub(request.param, tmp_path_factory.mktemp(request.param), env=env) as server:
        yield server


@pytest.fixture(scope="module")
def hub_without_shortcuts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    """A SQLite hub with ``TASKHUB_WORKER_SHORTCUTS=false`` (as one from before them)."""
    directory = tmp_path_factory.mktemp("no-shortcuts")
    with running_hub("sqlite", directory, env={"TASKHUB_WORKER_SHORTCUTS": "false"}) as server:
        yield server


@pytest.fixture
async def http(shared_server: HubServer) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client of ``shared_server``."""
    async with httpx.AsyncClient(
        base_url=shared_server.base_url, timeout=15.0, trust_env=False
    ) as client:
        yield client


@pytest.fixture
def lab() -> str:
    """The test's own room (``lab`` in the docstrings)."""
    return unique("lab")


@pytest.fixture
def job(lab: str) -> str:
    """A job of the test's room: ``<lab>:modifiers:R``."""
    return f"{lab}:modifiers:R"
