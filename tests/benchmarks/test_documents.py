"""Smoke test of ``python -m benchmarks documents`` at small sizes: every request is
measured and reported, the answers carry the big documents, and the bystander's submits
are sorted into the phases they ran in. No timing is asserted; one engine (SQLite), as only
the output's shape is checked (big documents on both engines: tests/store and
tests/transport)."""

from __future__ import annotations

import json

from benchmarks.scenarios.documents import PHASES, REQUESTS, TASK_REQUESTS
from tests.benchmarks.running import run_benchmark

TARGETS = ("sqlite",)
POINTS = 2_000  # about 37 kB of JSON a document


def test_every_request_is_measured_and_carries_the_documents() -> None:
    argv = ["--samples", "2", "--points", str(POINTS), "--schemas", "1"]
    done = run_benchmark("documents", *argv, "--targets", ",".join(TARGETS))
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["target"], r["request"]) for r in results] == [
        (target, request) for target in TARGETS for request in REQUESTS
    ]
    assert all(r["error"] is None for r in results), results
    by = {(r["target"], r["request"]): r for r in results}
    for target in TARGETS:
        for request in TASK_REQUESTS:
            assert by[target, request]["samples"] == 2
            assert by[target, request]["answer_bytes"] > 35_000, (target, request)
        assert by[target, "completed"]["answer_bytes"] > 70_000  # payload and result
        assert by[target, "page"]["answer_bytes"] > 2 * 70_000  # both tasks, in full
        assert by[target, "register"]["samples"] == 1
        bystander = [by[target, f"bystander during {phase}"] for phase in PHASES]
        assert by[target, "bystander during schemas"]["samples"] > 0
        assert all(r["answer_bytes"] is None for r in bystander)
    assert "| sqlite | bystander during schemas |" in done.stderr
