"""Smoke test of ``python -m benchmarks sdk --quick``: every system (the ceiling app, the
zndraw-joblib reference server with its ``JobManager``, Taskhub served by that
``JobManager`` and by ``taskhub worker`` processes with and without push, reporting run
ends over Socket.IO or by PATCH, two PostgreSQL replicas) runs end to end
and reports well-formed results. No timing is asserted: only the shape of the output, and
what the hub counted (the SDK's workers need fewer requests per task than the four-request
protocol)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmarks.scenarios.sdk import QUICK, SYSTEMS
from tests.benchmarks.running import run_benchmark
from tests.support.databases import POSTGRES_URL, REDIS_URL


@pytest.fixture(scope="module")
def quick_run() -> dict[str, Any]:
    argv = ["--quick", "--pg-admin-url", POSTGRES_URL, "--redis-url", REDIS_URL]
    done = run_benchmark("sdk", *argv)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    return {"lines": lines, "stderr": done.stderr}


def test_every_system_reports_its_saturation_and_fixed_rates(quick_run: dict) -> None:
    lines = quick_run["lines"]
    assert all(line["scenario"] == "sdk" and line["error"] is None for line in lines), lines
    phases = {(line["system"], line["phase"]) for line in lines}
    for system in SYSTEMS:
        assert (system, "saturation") in phases
        if system != "ceiling":
            assert {(system, f"{QUICK.rates[0]:g}/s"), (system, "half saturation")} <= phases
    for line in lines:
        assert line["tasks_per_s"] > 0, line
        if line["system"] != "ceiling":
            assert line["p50_ms"] <= line["p95_ms"] <= line["p99_ms"], line


def test_requests_per_task_are_counted_at_the_hub(quick_run: dict) -> None:
    saturation = {
        line["system"]: line for line in quick_run["lines"] if line["phase"] == "saturation"
    }
    # The four-request protocol: a claim and two PATCHes per task from the workers.
    for system in ("ceiling", "reference", "taskhub-joblib"):
        assert saturation[system]["requests_per_task"] >= 3, saturation[system]
    # The SDK: claims that start, end reports that claim the next (and, by default, tasks
    # pushed into idle slots, which are no requests at all).
    sdk_systems = ("taskhub-sdk", "taskhub-sdk-claims", "postgres-sdk", "postgres-sdk-claims")
    for system in (*sdk_systems, "taskhub-sdk-patch"):
        line = saturation[system]
        assert line["requests_per_task"] < 3, line
        assert line["requests"].get("task_patch", 0) <= 1.0, line
        assert line["cpu_ms_workers"] > 0 and line["cpu_ms_hub"] > 0, line
    assert saturation["postgres-sdk"]["cpu_ms_database"] > 0
    # Run ends go over the workers' Socket.IO links, but with --no-socket-updates.
    for system in sdk_systems:
        assert saturation[system]["requests"].get("task_patch", 0) < 0.5, saturation[system]
    assert saturation["taskhub-sdk-patch"]["requests"]["task_patch"] >= 0.9


def test_the_table_has_a_row_per_system_and_phase(quick_run: dict) -> None:
    rows = [line for line in quick_run["stderr"].splitlines() if line.startswith("| ")]
    for system in SYSTEMS:
        assert any(row.startswith(f"| {system} | 1x2 | saturation |") for row in rows), system
