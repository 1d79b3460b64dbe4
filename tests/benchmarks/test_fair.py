"""Smoke test of ``python -m benchmarks fair --quick`` on SQLite: every measure runs and
reports well-formed lines (B's click on a fair and a FIFO job, throughput of each order and
their ratio, claims at depth). No timing is asserted, only the shape of the output and what
the hub answered."""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmarks.scenarios.fair import FAIR, FIFO, ORDERS, QUICK, TASK_SECONDS
from tests.benchmarks.running import run_benchmark

STARVATION_KEYS = {
    "target",
    "claim_order",
    "task_ms",
    "workers",
    "backlog",
    "samples",
    "service_ms",
    "a_pending_at_submit",
    "b_queue_position",
    "a_started_ahead",
    "wait_p50_ms",
    "wait_max_ms",
    "wait_p50_in_service_times",
    "wait_max_in_service_times",
    "client_wait_p50_ms",
    "client_wait_max_ms",
    "implied_wait_ms",
    "goal_ms",
    "meets_goal",
    "note",
    "error",
}
THROUGHPUT_KEYS = {"target", "claim_order", "round", "tasks", "completed", "tasks_per_s", "error"}
RATIO_KEYS = {"target", "samples", "fifo_tasks_per_s", "fair_tasks_per_s", "fair_over_fifo"}
DEPTH_KEYS = {"target", "claim_order", "depth", "submitters", "samples", "p50_ms", "p95_ms"}
DEPTH_KEYS |= {"p99_ms", "distinct_submitters", "error"}


@pytest.fixture(scope="module")
def lines() -> dict[str, list[dict[str, Any]]]:
    done = run_benchmark("fair", "--quick", "--targets", "sqlite")
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert all(r["scenario"] == "fair" and r["target"] == "sqlite" for r in results), results
    assert all(r["error"] is None for r in results), results
    for heading in ("Starvation", "Throughput (W = 4)", "Throughput, medians", "Claim at depth"):
        assert heading in done.stderr
    by_measure: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        by_measure.setdefault(result["measure"], []).append(result)
    return by_measure


def test_b_submits_to_a_fair_and_a_fifo_job_behind_a(lines: dict) -> None:
    starvation = lines["starvation"]
    assert [(r["task_ms"], r["claim_order"]) for r in starvation] == [
        (hold * 1000, order) for hold in TASK_SECONDS for order in (FAIR, FIFO)
    ]
    for r in starvation:
        assert r.keys() >= STARVATION_KEYS, r
        assert r["backlog"] == QUICK.backlog
        assert r["samples"] == (QUICK.clicks if r["claim_order"] == FAIR else 1)
        assert 0 < r["a_pending_at_submit"] < QUICK.backlog
        assert r["b_queue_position"] >= 1 and r["service_ms"] > 0
        waited = r["wait_max_ms"] is not None
        # Only FIFO with 100 ms tasks is not waited for: its wait is implied.
        assert waited == (r["claim_order"] == FAIR or r["task_ms"] == 0), r
        assert (r["note"] is None) == waited
        assert r["implied_wait_ms"] is not None
        if waited:
            assert r["wait_p50_ms"] <= r["wait_max_ms"]
            assert isinstance(r["meets_goal"], bool)


def test_throughput_alternates_the_orders_and_gives_their_ratio(lines: dict) -> None:
    runs = lines["throughput"]
    assert [(r["round"], r["claim_order"]) for r in runs] == [
        (round_number, order) for round_number in range(1, QUICK.rounds + 1) for order in ORDERS
    ]
    for r in runs:
        assert r.keys() >= THROUGHPUT_KEYS, r
        assert r["completed"] == r["tasks"] == QUICK.tasks and r["tasks_per_s"] > 0
    (ratio,) = lines["throughput_ratio"]
    assert ratio.keys() >= RATIO_KEYS, ratio
    assert ratio["samples"] == QUICK.rounds
    assert ratio["fair_over_fifo"] > 0


def test_claims_at_depth_of_both_orders(lines: dict) -> None:
    depth = lines["depth"]
    assert [r["claim_order"] for r in depth] == list(ORDERS)
    for r in depth:
        assert r.keys() >= DEPTH_KEYS, r
        assert r["depth"] == QUICK.submitters * QUICK.per_submitter
        assert r["samples"] == QUICK.samples
        assert r["p50_ms"] <= r["p95_ms"] <= r["p99_ms"]
    fifo, fair = depth
    # Seeded in bursts: FIFO takes one submitter's tasks after another, fair one of each.
    assert fair["distinct_submitters"] == QUICK.samples > fifo["distinct_submitters"]
    assert fair["p50_over_fifo"] > 0
