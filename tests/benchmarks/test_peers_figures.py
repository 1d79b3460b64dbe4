"""The arithmetic of ``python -m benchmarks peers``: jobs/s and start latencies from the
enqueue and start times, CPU per job of each process and the machine's other load from two
readings, the medians over rounds, the starts file read as it grows, and the CPU of a
process tree (a worker whose jobs run in child processes)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchmarks.harness.cpu import machine_busy_seconds, process_tree_cpu_seconds
from benchmarks.scenarios.peers import (
    Reading,
    Starts,
    cpu_figures,
    database_delta,
    medians,
    start_figures,
    summary_table,
    trees_table,
    with_trees,
)


def test_jobs_per_second_run_from_the_first_enqueue_call_to_the_last_start() -> None:
    sent = [100.0, 100.5, 101.0, 101.5]
    starts = {0: 100.01, 1: 100.52, 2: 101.03, 3: 102.0}
    figures = start_figures(sent, starts, rate=2.0)
    assert figures["jobs_per_s"] == 2.0  # 4 jobs in 2 s
    assert figures["started"] == 4
    # latencies 10, 20, 30 and 500 ms: nearest-rank percentiles
    assert figures["p50_ms"] == 20.0
    assert figures["p95_ms"] == figures["max_ms"] == 500.0
    assert figures["offered_per_s"] == 2.0


def test_jobs_that_never_started_have_no_latency() -> None:
    figures = start_figures([10.0, 10.1], {0: 10.2}, rate=None)
    assert figures["started"] == 1 and figures["jobs"] == 2
    assert figures["p50_ms"] == pytest.approx(200.0)
    assert start_figures([10.0], {}, rate=None)["jobs_per_s"] is None


def reading(wall: float, machine: float, own: float, **cpu: float) -> Reading:
    return Reading(
        wall=wall,
        machine=machine,
        own=own,
        client=cpu.get("client"),
        worker=cpu.get("worker"),
        hub=cpu.get("hub"),
        database={1: cpu["database"]} if "database" in cpu else {},
    )


def test_cpu_per_job_and_the_machines_other_load() -> None:
    before = reading(0.0, 50.0, 1.0, client=1.0, worker=2.0, hub=3.0, database=4.0)
    after = reading(2.0, 54.0, 1.2, client=1.5, worker=2.4, hub=4.0, database=4.6)
    figures = cpu_figures(before, after, jobs=100)
    assert figures["cpu_ms_client"] == 5.0
    assert figures["cpu_ms_worker"] == 4.0
    assert figures["cpu_ms_hub"] == 10.0
    assert figures["cpu_ms_database"] == 6.0
    assert figures["cpu_ms_per_job"] == 20.0  # worker + hub + database, not the client
    # 4 s busy over 2 s, of which 0.5 + 0.4 + 1.0 + 0.6 measured and 0.2 the benchmark's own
    assert figures["other_load_cpus"] == 0.65
    assert figures["bench_cpus"] == 0.1


def test_a_system_without_hub_has_no_hub_figure() -> None:
    before = reading(0.0, 10.0, 0.0, client=0.0, worker=0.0)
    after = reading(1.0, 10.5, 0.0, client=0.1, worker=0.3)
    figures = cpu_figures(before, after, jobs=10)
    assert figures["cpu_ms_hub"] is None
    assert figures["cpu_ms_database"] == 0.0
    assert figures["cpu_ms_per_job"] == 30.0
    assert figures["other_load_cpus"] == 0.1


def test_database_processes_count_what_they_spent_in_between() -> None:
    before = {10: 5.0, 11: 2.0, 12: 9.0}  # 12 disconnects in between: not counted
    after = {10: 5.5, 11: 2.0, 13: 0.25}  # 13 connected in between: all of it
    assert database_delta(before, after) == 0.75


def phase(system: str, round_number: int, phase_name: str, **figures: float) -> dict:
    return {
        "scenario": "peers",
        "kind": "phase",
        "system": system,
        "round": round_number,
        "phase": phase_name,
        "error": None,
        **figures,
    }


def test_medians_are_taken_over_rounds_and_failed_rounds_left_out() -> None:
    results = [
        phase("saq", 1, "throughput", jobs_per_s=500.0, cpu_ms_per_job=2.0, cpu_ms_worker=1.0),
        phase("saq", 2, "throughput", jobs_per_s=700.0, cpu_ms_per_job=1.0, cpu_ms_worker=0.5),
        {**phase("saq", 3, "throughput", jobs_per_s=1.0), "error": "TimeoutError"},
        phase("saq", 1, "paced", p50_ms=3.0, p95_ms=6.0),
    ]
    figures = medians(results)
    assert figures["saq"]["throughput"]["jobs_per_s"] == 600.0
    assert figures["saq"]["throughput"]["cpu_ms_per_job"] == 1.5
    assert figures["saq"]["throughput"]["rounds"] == 2
    assert figures["saq"]["paced"]["p95_ms"] == 6.0
    table = summary_table(results, rate=40.0)
    assert "| SAQ (Redis) | 600 | 3.0 / 6.0 ms | 1.5 (worker 0.8) |" in table
    assert "start p50 / p95 at 40/s" in table


def test_each_taskhub_system_runs_once_per_tree_and_the_peers_once() -> None:
    trees = {"before": Path("/a"), "after": Path("/b")}
    systems = with_trees(["taskhub-sqlite", "saq", "taskhub-postgres"], trees)
    assert systems == [
        "taskhub-sqlite@before",
        "taskhub-sqlite@after",
        "saq",
        "taskhub-postgres@before",
        "taskhub-postgres@after",
    ]
    assert with_trees(["taskhub-sqlite", "saq"], {}) == ["taskhub-sqlite", "saq"]


def test_trees_are_compared_with_the_first_trees_medians() -> None:
    results = [
        phase("taskhub-sqlite@before", 1, "throughput", jobs_per_s=100.0, cpu_ms_client=1.0),
        phase("taskhub-sqlite@after", 1, "throughput", jobs_per_s=150.0, cpu_ms_client=0.5),
        phase("taskhub-sqlite@after", 2, "throughput", jobs_per_s=130.0, cpu_ms_client=0.7),
        phase("taskhub-sqlite@before", 2, "throughput", jobs_per_s=120.0, cpu_ms_client=1.2),
        phase("taskhub-sqlite@before", 1, "paced", p95_ms=40.0),
        phase("taskhub-sqlite@after", 1, "paced", p95_ms=10.0),
        phase("saq", 1, "throughput", jobs_per_s=900.0),
    ]
    table = trees_table(results)
    assert table is not None
    row = next(line for line in table.splitlines() if line.startswith("| taskhub-sqlite@after"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    headers = [cell.strip() for cell in table.splitlines()[0].strip("|").split("|")]
    by_header = dict(zip(headers, cells, strict=True))
    assert by_header["system"] == "taskhub-sqlite@after / before"
    assert by_header["jobs/s"] == "1.27"  # 140 / 110
    assert by_header["client CPU/submit"] == "0.55"  # 0.6 / 1.1
    assert by_header["paced p95"] == "0.25"
    assert "[after]" in summary_table(results, rate=40.0)
    assert trees_table([phase("saq", 1, "throughput", jobs_per_s=1.0)]) is None


def test_the_starts_file_is_read_as_it_grows(tmp_path: Path) -> None:
    path = tmp_path / "starts.txt"
    starts = Starts(path)
    starts.read()  # not there yet: nothing
    path.write_text("throughput 0 10.5\nthroughput 1 10.")
    starts.read()
    assert starts.by_tag["throughput"] == {0: 10.5}
    with path.open("a") as file:
        file.write("75\npaced 0 11.0\n")
    starts.read()
    assert starts.by_tag["throughput"] == {0: 10.5, 1: 10.75}
    assert starts.by_tag["paced"] == {0: 11.0}


BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass"


def test_a_process_tree_counts_its_live_and_reaped_descendants() -> None:
    code = (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {BURN.format(seconds=0.3)!r}], check=True)\n"
        f"child = subprocess.Popen([sys.executable, '-c', {BURN.format(seconds=5)!r}])\n"
        "sys.stdin.read()\n"
        "child.kill()\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while (process_tree_cpu_seconds(parent.pid) or 0) < 0.6 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (process_tree_cpu_seconds(parent.pid) or 0) >= 0.6  # 0.3 reaped + the live one
    finally:
        parent.communicate(b"")
    assert process_tree_cpu_seconds(parent.pid) is None  # gone


def test_the_machine_has_spent_busy_time() -> None:
    first = machine_busy_seconds()
    end = time.process_time() + 0.1
    while time.process_time() < end:
        pass
    second = machine_busy_seconds()
    assert first is not None and second is not None and second - first >= 0.05
