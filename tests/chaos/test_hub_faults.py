"""The hub's own processes fail under load: one hub SIGKILLed and restarted, twice in a
row here (five in the benchmark; SQLite and PostgreSQL); one of two replicas behind HAProxy
SIGKILLed; Redis restarted under two replicas. Tasks submitted after the fault complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.scenarios.chaos import PrivatePostgres
from tests.chaos.conftest import chaos

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("engine", ["sqlite", "postgresql"])
def test_hub_sigkilled_again_and_again(
    engine: str, cluster: PrivatePostgres, tmp_path: Path
) -> None:
    result = chaos("hub-sigkill", engine, cluster, tmp_path)
    assert result["kills"] == 2, result


def test_one_replica_sigkilled(cluster: PrivatePostgres, tmp_path: Path) -> None:
    result = chaos("replica-sigkill", "postgresql", cluster, tmp_path)
    assert result["completed_after_fault"] >= 10, result


def test_redis_restarted_under_replicas(cluster: PrivatePostgres, tmp_path: Path) -> None:
    result = chaos("redis-restart", "postgresql", cluster, tmp_path)
    assert result["completed_after_fault"] >= 10, result
