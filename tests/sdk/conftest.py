"""Fixtures of the SDK tests: real ``taskhub serve`` processes (shared per session), a
non-superuser token, a fresh room per test, and helpers to watch tasks over REST."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from tests.support.server import HubServer, running_hub
from tests.support.waiting import eventually_sync

# The disconnect grace removes a worker whose socket dropped after 1 s. The worker timeout
# stays long on ``hub``, so the sweeper cannot explain anything a test sees within seconds.
HUB_ENV = {
    "TASKHUB_SOCKET_DISCONNECT_GRACE_SECONDS": "1",
    "TASKHUB_WORKER_TIMEOUT_SECONDS": "60",
    "TASKHUB_LONG_POLL_MAX_WAIT_SECONDS": "10",
}
# Here the sweeper does the work: a worker silent for 3 s is removed within ~0.5 s more.
SWEEPING_ENV = {
    "TASKHUB_SOCKET_DISCONNECT_GRACE_SECONDS": "1",
    "TASKHUB_WORKER_TIMEOUT_SECONDS": "3",
    "TASKHUB_SWEEPER_INTERVAL_SECONDS": "0.5",
    "TASKHUB_LONG_POLL_MAX_WAIT_SECONDS": "10",
}
SWEEPING_TIMEOUT = 3.0
TERMINAL = {"completed", "failed", "cancelled"}


@dataclass
class Hub:
    """A running server and the tokens of its users."""

    server: HubServer
    user_token: str  # a plain user: registers room-scoped jobs, owns its workers

    @property
    def url(self) -> str:
        return self.server.base_url

    @property
    def admin_token(self) -> str:
        return self.server.admin_token

    def rest(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/v1/joblib",
            headers={"Authorization": f"Bearer {token or self.user_token}"},
            timeout=10.0,
            trust_env=False,
        )

    def task(self, task_id: str) -> dict[str, Any]:
        with self.rest() as rest:
            response = rest.get(f"/tasks/{task_id}")
            response.raise_for_status()
            return dict(response.json())

    def room_jobs(self, room: str) -> list[dict[str, Any]]:
        with self.rest() as rest:
            response = rest.get(f"/rooms/{room}/jobs")
            response.raise_for_status()
            return [job for job in response.json()["items"] if job["full_name"].startswith(room)]

    def worker_ids(self) -> set[str]:
        with self.rest(self.admin_token) as rest:
            response = rest.get("/workers", params={"limit": 500})
            response.raise_for_status()
            return {item["id"] for item in response.json()["items"]}


def _hub(backend: str, directory: Any, env: dict[str, str]) -> Iterator[Hub]:
    with running_hub(backend, directory, env=env) as server:  # type: ignore[arg-type]
        yield Hub(server, server.create_user("alice"))


@pytest.fixture(scope="session", params=["sqlite", "postgres"])
def hub(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """A server per backend, shared by the tests (each test uses its own room)."""
    yield from _hub(request.param, tmp_path_factory.mktemp(f"hub-{request.param}"), HUB_ENV)


@pytest.fixture(scope="session")
def sqlite_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """The ``hub`` configuration on SQLite only, for the slow process tests."""
    yield from _hub("sqlite", tmp_path_factory.mktemp("hub-sqlite-only"), HUB_ENV)


@pytest.fixture(scope="session")
def sweeping_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hub]:
    """SQLite, with a 3 s worker timeout and a fast sweeper."""
    yield from _hub("sqlite", tmp_path_factory.mktemp("hub-sweeping"), SWEEPING_ENV)


@pytest.fixture
def room() -> str:
    return f"room-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def key() -> str:
    """A key for the coordination registries of ``tests.sdk.extensions``."""
    return uuid.uuid4().hex


def wait_status(hub: Hub, task_id: str, statuses: set[str], timeout: float) -> dict[str, Any]:
    return eventually_sync(  # type: ignore[no-any-return]
        lambda: (task := hub.task(task_id))["status"] in statuses and task,
        timeout,
        f"task {task_id} to reach {sorted(statuses)}",
    )
