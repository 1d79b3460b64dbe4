"""Smoke test of ``python -m benchmarks dashboard`` at a tiny size, on SQLite and
PostgreSQL: every request is measured and reported, and the answers counted what the seeded
room holds. No timing is asserted."""

from __future__ import annotations

import json

from benchmarks.scenarios.dashboard import REQUESTS
from tests.benchmarks.running import run_benchmark
from tests.support.databases import POSTGRES_URL

TARGETS = ("sqlite", "postgres")
TASKS = 400


def test_every_request_is_measured_on_both_engines() -> None:
    argv = ["--tasks", str(TASKS), "--samples", "2", "--pg-admin-url", POSTGRES_URL]
    done = run_benchmark("dashboard", *argv)
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["target"], r["request"]) for r in results] == [
        (target, request) for target in TARGETS for request in REQUESTS
    ]
    assert all(r["error"] is None and r["samples"] == 2 for r in results), results
    by = {(r["target"], r["request"]): r for r in results}
    for target in TARGETS:
        assert by[target, "list_summary"]["counted"] == TASKS
        assert by[target, "list_sorted"]["counted"] == TASKS
        job = by[target, "list_job"]["counted"]
        assert TASKS // 3 <= job <= TASKS // 3 + 1  # one of three jobs, in turn
        assert 0 < by[target, "list_status"]["counted"] < TASKS
        assert 0 < by[target, "list_q"]["counted"] < by[target, "list_status"]["counted"]
        assert 0 < by[target, "bulk_dry_run"]["counted"] < TASKS
        # both engines seeded the same room (the same random draws)
        for request in ("list_status", "list_q", "bulk_dry_run"):
            assert by[target, request]["counted"] == by[TARGETS[0], request]["counted"]
    assert "| sqlite | stats_24h |" in done.stderr
