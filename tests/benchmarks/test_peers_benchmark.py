"""Smoke test of ``python -m benchmarks peers`` at a tiny size: Taskhub on SQLite and one
peer, SAQ (the smallest install: its venv is made from the package index at the first run
and kept in the cache directory after), one round. No timing is asserted: only that every
phase of both systems ran end to end, every job started, and the output carries the
figures, the versions and the fairness notes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmarks.scenarios.peers import PEERS
from tests.benchmarks.running import run_benchmark
from tests.support.databases import POSTGRES_URL

SYSTEMS = ("taskhub-sqlite", "saq")


@pytest.fixture(scope="module")
def tiny_run() -> dict[str, Any]:
    argv = ["--systems", ",".join(SYSTEMS), "--jobs", "200", "--paced-jobs", "20"]
    argv += ["--rate", "20", "--rounds", "1", "--pg-admin-url", POSTGRES_URL]
    done = run_benchmark("peers", *argv)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    return {"lines": lines, "stderr": done.stderr}


def test_every_system_runs_both_phases_and_every_job_starts(tiny_run: dict) -> None:
    phases = [line for line in tiny_run["lines"] if line["kind"] == "phase"]
    assert all(line["error"] is None for line in phases), phases
    assert {(line["system"], line["phase"]) for line in phases} == {
        (system, phase) for system in SYSTEMS for phase in ("throughput", "paced")
    }
    for line in phases:
        assert line["started"] == line["jobs"] == (200 if line["phase"] == "throughput" else 20)
        assert line["jobs_per_s"] > 0
        assert 0 < line["p50_ms"] <= line["p95_ms"] <= line["max_ms"], line
        assert line["cpu_ms_worker"] >= 0 and line["cpu_ms_client"] >= 0, line
        assert line["other_load_cpus"] is not None


def test_the_hub_and_the_redis_server_are_measured(tiny_run: dict) -> None:
    throughput = {
        line["system"]: line
        for line in tiny_run["lines"]
        if line["kind"] == "phase" and line["phase"] == "throughput"
    }
    for line in throughput.values():  # 200 jobs: many clock ticks of each
        assert line["cpu_ms_worker"] > 0 and line["cpu_ms_client"] > 0, line
    assert throughput["taskhub-sqlite"]["cpu_ms_hub"] > 0
    assert throughput["taskhub-sqlite"]["cpu_ms_database"] == 0  # SQLite runs in the hub
    assert throughput["saq"]["cpu_ms_hub"] is None  # no server between client and Redis
    assert throughput["saq"]["cpu_ms_database"] >= 0  # the private redis-server, read


def test_the_run_records_versions_durability_and_notes(tiny_run: dict) -> None:
    setup = next(line for line in tiny_run["lines"] if line["kind"] == "setup")
    pinned = {spec.split("==")[0]: spec.split("==")[1] for spec in PEERS["saq"].requirements}
    assert setup["versions"]["saq"] == {"saq": pinned["saq[redis]"], "redis": pinned["redis"]}
    assert setup["sqlite"]["journal_mode"] == "WAL"
    assert setup["redis"] == {"appendonly": "no", "save": ""}
    stderr = tiny_run["stderr"]
    assert "| Taskhub, SQLite" in stderr and "| SAQ (Redis) |" in stderr
    assert "no AOF and no snapshots" in stderr
