"""Smoke test of ``python -m benchmarks logs`` at tiny sizes: a real ``taskhub worker``
floods its logs and runs no-op tasks with and without lines, the modes alternate from
round to round, and every line logged is either stored or counted as dropped. No timing is
asserted. One engine (SQLite): the scenario's code is the same for both, and a flood's
lines are accounted for on both engines by tests/sdk/test_task_logs.py."""

from __future__ import annotations

import json

from tests.benchmarks.running import run_benchmark

TARGETS = ("sqlite",)


def test_a_tiny_run_measures_every_mode_in_alternating_rounds() -> None:
    argv = ["--targets", ",".join(TARGETS), "--tasks", "12", "--lines", "3", "--rounds", "2"]
    argv += ["--flood-seconds", "0.3", "--concurrency", "2"]
    done = run_benchmark("logs", *argv)
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert all(r["error"] is None for r in results), results
    for target in TARGETS:
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
    assert all(f"| {target} | 2 |" in done.stderr for target in TARGETS)
    assert "Medians over the rounds:" in done.stderr
