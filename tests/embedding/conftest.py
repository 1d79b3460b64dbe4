"""Fixtures of the example host's tests: the host built in process on each engine's
database (its lifespan running, as a server runs it), and an HTTP client of it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from examples.host_app.main import Host, create_host
from taskhub.settings import Settings
from tests.conftest import Users
from tests.embedding.hosts import CONFIG


@pytest.fixture
async def host(settings: Settings, tokens: Users) -> AsyncIterator[Host]:
    """The example host on the test's database (``tokens``: Taskhub's own users too)."""
    host = create_host(CONFIG, settings)
    async with host.web.router.lifespan_context(host.web):
        yield host


@pytest.fixture
async def http(host: Host) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=host.asgi)
    async with httpx.AsyncClient(transport=transport, base_url="http://host.test") as client:
        yield client
