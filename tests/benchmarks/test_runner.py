"""Smoke test of ``python -m benchmarks --quick`` (the suite): the backlog scenario and the
room fan-out run end to end, chosen by ``--only``, and report well-formed results, on
stdout and in ``--json-out``. No timing is asserted, only the shape of the output and what
the hub answered. One engine (SQLite): what is checked is the suite's plumbing and the
output's shape; the scenarios run on PostgreSQL in their own tests (dashboard, floor)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from benchmarks.scenarios.backlog import REQUESTS
from benchmarks.scenarios.realtime import FAN_OUT_MEASURES
from benchmarks.scenarios.suite import QUICK
from tests.benchmarks.running import run_benchmark

LATENCY_KEYS = ("p50_ms", "p90_ms", "p99_ms", "max_ms")
BACKLOG_KEYS = {
    "scenario",
    "target",
    "backlog",
    "delayed",
    "request",
    "samples",
    "queue_position",
    "error",
}
FANOUT_KEYS = {"scenario", "sockets", "measured", "samples"}
TARGETS = ("sqlite",)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    json_out = tmp_path_factory.mktemp("bench") / "results.jsonl"
    argv = ["--quick", "--only", "backlog,roomfanout", "--targets", ",".join(TARGETS)]
    argv += ["--json-out", str(json_out)]
    done = run_benchmark(*argv)
    return {"stdout": done.stdout, "stderr": done.stderr, "json_out": json_out.read_text()}


def _lines(text: str) -> list[dict[str, Any]]:
    results = [json.loads(line) for line in text.splitlines()]
    assert all(isinstance(result, dict) for result in results)
    return results


def _assert_latencies(result: dict[str, Any]) -> None:
    for key in LATENCY_KEYS:
        assert isinstance(result[key], int | float), (key, result)
    assert result["p50_ms"] <= result["p90_ms"] <= result["p99_ms"] <= result["max_ms"], result


def _assert_row(stderr: str, *cells: object) -> None:
    """The markdown table has exactly one row starting with these cells."""
    prefix = "| " + " | ".join(str(cell) for cell in cells) + " |"
    assert sum(line.startswith(prefix) for line in stderr.splitlines()) == 1, prefix


def test_every_stdout_line_is_a_json_object_and_json_out_matches(quick_run: dict) -> None:
    results = _lines(quick_run["stdout"])
    assert results == _lines(quick_run["json_out"])
    assert {r["scenario"] for r in results} == {"backlog", "roomfanout"}


def test_backlog_lines_report_each_request_and_the_back_task_position(quick_run: dict) -> None:
    (backlog,) = QUICK.backlogs
    lines = [r for r in _lines(quick_run["stdout"]) if r["scenario"] == "backlog"]
    assert sorted((r["target"], r["request"]) for r in lines) == sorted(
        (target, request) for target in TARGETS for request in REQUESTS
    )
    for result in lines:
        assert BACKLOG_KEYS | set(LATENCY_KEYS) <= result.keys(), result
        assert result["error"] is None, result
        assert result["backlog"] == backlog
        assert result["samples"] == QUICK.samples
        _assert_latencies(result)
        assert result["p50_ms"] > 0
        _assert_row(quick_run["stderr"], result["target"], result["request"], backlog)
    positions = {(r["target"], r["request"]): r["queue_position"] for r in lines}
    for target in TARGETS:
        assert positions[target, "get_back"] == backlog
        assert positions[target, "get_front"] == 1
        assert positions[target, "submit"] == backlog + 1
        assert positions[target, "claim"] is None


def test_room_fanout_reaches_every_socket(quick_run: dict) -> None:
    (sockets,) = QUICK.room_sockets
    lines = [r for r in _lines(quick_run["stdout"]) if r["scenario"] == "roomfanout"]
    assert [r["measured"] for r in lines] == list(FAN_OUT_MEASURES)
    for result in lines:
        assert FANOUT_KEYS | set(LATENCY_KEYS) <= result.keys(), result
        assert result["sockets"] == sockets
        expected = QUICK.runs * sockets if result["measured"] == "every" else QUICK.runs
        assert result["samples"] == expected
        _assert_latencies(result)
        setup = f"{sockets} room sockets, arrival at {result['measured']} socket"
        _assert_row(quick_run["stderr"], "roomfanout", setup, result["samples"])
    last = next(r for r in lines if r["measured"] == "last")
    assert last["p50_ms"] > 0
