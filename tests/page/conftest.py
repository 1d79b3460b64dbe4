"""Fixtures of the page tests: a ``taskhub serve`` process on SQLite with two users and one
headless Chromium (both for this package only: no Playwright loop outlives it), a fresh
room with an SDK worker serving ``Brew`` per test, and the test's browser pages (their
console errors are collected)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from taskhub.sdk import Worker
from tests.page.browser import CHROMIUM, LAUNCH_ARGS, Pages, missing_prerequisites
from tests.page.extensions import Brew
from tests.support.server import HubServer, running_hub
from tests.support.waiting import eventually_sync

HUB_ENV = {"TASKHUB_SOCKET_DISCONNECT_GRACE_SECONDS": "1", "TASKHUB_LOG_LEVEL": "warning"}


@dataclass
class PageHub:
    server: HubServer
    alice: str  # runs the worker, submits from the first browser
    bob: str  # watches the same room from a second browser

    @property
    def url(self) -> str:
        return self.server.base_url

    def rest(self, token: str) -> httpx.Client:
        return httpx.Client(
            base_url=f"{self.url}/v1/joblib",
            headers={"Authorization": f"Bearer {token}"},
            timeout=10.0,
            trust_env=False,
        )

    def task(self, task_id: str) -> dict[str, Any]:
        with self.rest(self.alice) as rest:
            response = rest.get(f"/tasks/{task_id}")
            response.raise_for_status()
            return dict(response.json())


@pytest.fixture(scope="package", autouse=True)
def _prerequisites() -> None:
    problems = missing_prerequisites()
    if problems:
        pytest.fail("The page tests cannot run:\n  " + "\n  ".join(problems), pytrace=False)


@pytest.fixture(scope="package")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PageHub]:
    with running_hub("sqlite", tmp_path_factory.mktemp("page-hub"), env=HUB_ENV) as server:
        yield PageHub(server, server.create_user("alice"), server.create_user("bob"))


@pytest.fixture(scope="package")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def room() -> str:
    return f"lab-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def worker(hub: PageHub, room: str) -> Iterator[Worker]:
    """Alice's worker serving ``Brew`` in the test's room (woken over Socket.IO)."""
    with Worker(hub.url, hub.alice, [Brew], room=room, poll_interval=5.0) as serving:
        eventually_sync(lambda: serving.listening, 10, "the worker to join its job room")
        yield serving


@pytest.fixture
def pages(browser: Any, hub: PageHub) -> Iterator[Pages]:
    opened = Pages(browser, hub.url)
    yield opened
    opened.close()
