"""System-test fixtures: real ``taskhub serve`` processes on real databases."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import HubServer, running_hub


@pytest.fixture(params=["sqlite", "postgres"])
def hub_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HubServer]:
    """A running server on a fresh database of each backend (PostgreSQL down = failure)."""
    with running_hub(request.param, tmp_path) as server:
        yield server
