"""Smoke test of ``python -m benchmarks scale`` at tiny sizes, the sockets and workers
dimensions on SQLite: sockets held by two client processes in three rooms, task events
timed at every watcher of one, worker sockets completing pushed tasks. No timing is
asserted: only that every row ran end to end and carries its figures, consistent with one
another. (One hub a row: the layout of sockets all in one room is the same code with one
room, and is left out to keep the test short.) The history dimensions, loaded only when
asked for, have their own test (test_scale_history.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks.running import REPO_ROOT, run_benchmark

EVENTS = 5
WORKER_TASKS = 20  # --worker-rate 20 for --worker-seconds 1


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    json_out = tmp_path_factory.mktemp("scale") / "scale.jsonl"
    argv = ["--dimensions", "sockets,workers", "--engines", "sqlite", "--replicas", "1"]
    argv += ["--sockets", "60", "--rooms", "3", "--one-room", "0", "--events", str(EVENTS)]
    argv += ["--clients", "2", "--warmup", "10", "--idle-seconds", "0.3"]
    argv += ["--workers", "12", "--jobs", "4", "--worker-rate", "20", "--worker-seconds", "1"]
    done = run_benchmark("scale", *argv, "--json-out", str(json_out))
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    return {"lines": lines, "stderr": done.stderr, "json_out": json_out}


def rows_of(run: dict[str, Any], dimension: str) -> list[dict[str, Any]]:
    return [line for line in run["lines"] if line["dimension"] == dimension]


def test_sockets_rows_give_memory_cpu_and_latency_at_every_watcher(tiny_run: dict) -> None:
    [row] = rows_of(tiny_run, "sockets")
    assert row["error"] is None, row
    assert (row["sockets"], row["rooms"], row["watchers"]) == (60, 3, 20)
    assert row["engine"] == "sqlite" and row["replicas"] == 1 and row["clients"] == 2
    assert row["rss_after_kib"] > row["rss_before_kib"] > 0, row
    assert row["kib_per_socket"] > 0 and isinstance(row["memory_goal_met"], bool)
    assert row["events"] == EVENTS
    # Per event the first arrival is no later than the last, and the last is the latest
    # of every arrival.
    assert 0 < row["first_p95_ms"] <= row["last_p95_ms"] <= row["last_max_ms"], row
    assert row["every_max_ms"] == row["last_max_ms"]
    assert row["first_p50_ms"] <= row["every_p50_ms"] <= row["last_max_ms"]
    assert row["hub_cpu_ms_per_event"] >= 0 and row["clients_cpu_ms_per_event"] >= 0
    assert row["database_cpu_ms_per_event"] is None  # SQLite runs inside the hub
    assert row["idle_hub_cpu_pct"] is not None
    assert row["latency_goal_met"] is None  # judged for 1,000 watchers of one room


def test_workers_row_runs_every_task_by_push(tiny_run: dict) -> None:
    [row] = rows_of(tiny_run, "workers")
    assert row["error"] is None, row
    assert (row["engine"], row["workers"], row["jobs"], row["clients"]) == ("sqlite", 12, 4, 2)
    assert row["tasks"] == row["completed"] == row["pushed"] == WORKER_TASKS, row
    assert row["unfinished"] == row["failed_updates"] == 0
    assert 0 <= row["running_p50_ms"] <= row["running_p95_ms"] <= row["running_max_ms"]
    assert row["hub_cpu_ms_per_task"] > 0 and row["database_cpu_ms_per_task"] is None


def test_the_tables_and_the_json_file_carry_every_row(tiny_run: dict) -> None:
    table_rows = [line for line in tiny_run["stderr"].splitlines() if line.startswith("| ")]
    assert any(row.startswith("| sqlite | 1 | 60 | 3 | 20 |") for row in table_rows)
    assert any(row.startswith("| sqlite | 12 | 4 | 20 | 20 | 20 |") for row in table_rows)
    written = [json.loads(line) for line in Path(tiny_run["json_out"]).read_text().splitlines()]
    assert written == tiny_run["lines"]


def history_loaded_after_asking(dimensions: str) -> bool:
    """Whether, in a fresh interpreter, the command loads the history module for
    ``--dimensions dimensions``."""
    probe = (
        "import sys; from benchmarks.scenarios import scale; "
        f"scale.history_module(['--dimensions', '{dimensions}']); "
        "print(scale.HISTORY_MODULE in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout.strip() == "True"


def test_the_history_dimensions_are_loaded_only_when_asked_for() -> None:
    assert not history_loaded_after_asking("sockets,workers")
    assert history_loaded_after_asking("workers,soak")
