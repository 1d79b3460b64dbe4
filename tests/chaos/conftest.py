"""Chaos system tests: the scenarios of ``python -m benchmarks chaos`` at a small size, on
real processes and private PostgreSQL, Redis and HAProxy instances (a missing binary fails
the test). Each module shares one private PostgreSQL cluster; each run has a database of
its own in it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from benchmarks.scenarios.chaos import (
    QUICK,
    SCENARIOS,
    PrivatePostgres,
    private_postgres,
    run_scenario,
)
from tests.support.server import run_async

# A few seconds of load on each side of the fault; the drain bound is generous for a loaded
# machine (a drain ends as soon as every task is terminal). The hub is killed twice in a
# row, not five times: each restart costs a process start-up (seconds on a busy machine).
SIZES = replace(
    QUICK,
    rate=8.0,
    task_seconds=0.3,
    warmup_s=0.5,
    before_s=2.0,
    after_s=3.0,
    hold_s=2.0,
    kills=2,
)


@pytest.fixture(scope="module")
def cluster() -> Iterator[PrivatePostgres]:
    """A private PostgreSQL cluster for the module's runs (restarted and exhausted by
    them: never the machine's own)."""
    with private_postgres() as started:
        yield started


def chaos(name: str, engine: str, cluster: PrivatePostgres, directory: Path) -> dict[str, Any]:
    """One run of scenario ``name``; checks what every fault must leave: nothing lost,
    no outcome accepted twice, nothing unfinished, and a fault that really happened."""
    result = run_async(run_scenario(SCENARIOS[name], engine, SIZES, directory, cluster))
    assert "fault_error" not in result, result
    assert result["acknowledged"] >= 10, result
    assert result["lost"] == 0, result
    assert result["double_accepted"] == 0, result
    assert result["non_terminal"] == 0, result
    return result
