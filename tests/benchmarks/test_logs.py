"""Smoke test of ``python -m benchmarks.logs`` at tiny sizes, on SQLite and PostgreSQL: a
real ``taskhub worker`` floods its logs and runs no-op tasks with and without lines, and
every line logged is either stored or counted as dropped. No timing is asserted."""

from __future__ import annotations

import json

from tests.benchmarks.running import run_benchmark
from tests.support.databases import POSTGRES_URL


def test_a_tiny_run_measures_every_mode_on_both_engines() -> None:
    argv = ["--targets", "sqlite,postgres", "--tasks", "12", "--lines", "3", "--rounds", "2"]
    argv += ["--flood-seconds", "0.3", "--concurrency", "2", "--pg-admin-url", POSTGRES_URL]
    done = run_benchmark("benchmarks.logs", *argv, timeout=300)
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert all(r["error"] is None for r in results), results
    for target in ("sqlite", "postgres"):
        mine = [r for r in results if r["target"] == target]
        # Interleaved: the order of the modes alternates from round to round.
        assert [(r["round"], r["mode"]) for r in mine] == [
            (1, "flood"),
            (1, "noop-0"),
            (1, "noop-N"),
            (2, "noop-N"),
            (2, "noop-0"),
            (2, "flood"),
        ]
        for r in mine:
            if r["mode"] == "flood":
                assert r["tasks"] == 2 and r["logged"] > 0
                assert r["accounted"] and r["stored"] + r["dropped"] == r["logged"], r
            else:
                assert r["tasks"] == 12 and r["tasks_per_s"] > 0
                assert r["lines_of_last_task"] == (3 if r["mode"] == "noop-N" else 0)
    assert "| sqlite | 2 |" in done.stderr and "| postgres | 2 |" in done.stderr
    assert "Medians over the rounds:" in done.stderr
