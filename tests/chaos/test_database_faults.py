"""PostgreSQL taken away under load: restarted (fast and immediate), the hub's sessions
terminated, every connection slot held by another client."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.scenarios.chaos import PrivatePostgres
from tests.chaos.conftest import chaos

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_postgres_restarted_under_load(mode: str, cluster: PrivatePostgres, tmp_path: Path) -> None:
    result = chaos(f"pg-restart-{mode}", "postgresql", cluster, tmp_path)
    assert result["restart_s"] > 0, result


def test_hub_sessions_terminated_under_load(cluster: PrivatePostgres, tmp_path: Path) -> None:
    result = chaos("pg-backends-killed", "postgresql", cluster, tmp_path)
    assert result["backends_killed"] >= 1, result


def test_connection_slots_exhausted_under_load(cluster: PrivatePostgres, tmp_path: Path) -> None:
    """The hub cannot get a connection for a while: it answers 503 (retry later), never
    500, and catches up once the slots are free again."""
    result = chaos("pool-exhausted", "postgresql", cluster, tmp_path)
    assert result["backends_killed"] >= 1, result
    assert result["connections_held"] >= 10, result
    assert "http-500" not in result["client_errors"], result
