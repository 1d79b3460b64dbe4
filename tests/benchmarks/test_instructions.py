"""``python -m benchmarks instructions``: the in-process task cycle runs end to end on both engines
(timed here, ``--no-valgrind``: a run of the hub under callgrind takes minutes), PostgreSQL's
side is counted under callgrind (``--count-postgres``), and a callgrind output's total is
read from its summary line, once the process that writes it has finished."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from benchmarks.harness.callgrind import backends_total, callgrind_total
from tests.benchmarks.running import run_benchmark
from tests.support.databases import POSTGRES_URL


def run_instructions(*args: str) -> list[dict]:
    done = run_benchmark("instructions", "--no-valgrind", *args)
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_the_cycle_runs_in_process_on_both_engines() -> None:
    results = run_instructions(
        "--cycles", "5", "--engines", "sqlite,postgres", "--pg-admin-url", POSTGRES_URL
    )
    assert [r["engine"] for r in results] == ["sqlite", "postgres"]
    for result in results:
        assert "error" not in result, result
        assert result["cycles"] == 5
        assert result["ms_per_cycle"] > 0
        assert result["totals"][1] > 0
    sqlite, postgres = results
    assert "database_us_per_cycle" not in sqlite  # SQLite works inside the hub's process
    assert postgres["database_us_per_cycle"] > 0  # the backends' CPU time, from /proc


def test_the_instruction_total_comes_from_the_summary_line(tmp_path: Path) -> None:
    out = tmp_path / "callgrind.out"
    out.write_text("version: 1\ncmd: python\nevents: Ir\nfl=x\nfn=y\n1 5\nsummary: 123456789\n")
    assert callgrind_total(out) == 123_456_789


def test_postgres_under_callgrind_counts_its_backends_per_cycle() -> None:
    # Each run's total also holds its backends' start-up and warm-up (~200 M instructions),
    # seen to vary by up to ~10 M between runs; 20 more cycles are ~38 M.
    [result] = run_instructions("--cycles", "20", "--engines", "postgres", "--count-postgres")
    assert "error" not in result, result
    shorter, longer = result["database_totals"]
    assert longer > shorter > 0  # twenty more cycles cost the backends more instructions
    assert result["database_instructions_per_cycle"] == round((longer - shorter) / 20)
    assert "database_us_per_cycle" not in result  # time under valgrind would mislead


async def test_backend_counts_are_summed_once_each_file_is_complete(tmp_path: Path) -> None:
    (tmp_path / "pg.11").write_text("events: Ir\nfn=a\n1 5\ntotals: 1000\n")
    (tmp_path / "pg.12").write_text("events: Ir\nfn=a\n")  # still being written
    (tmp_path / "pg.13").write_text("totals: 99\n")  # another backend: not asked for

    async def finish_writing() -> None:
        await asyncio.sleep(0.5)
        (tmp_path / "pg.12").write_text("events: Ir\nfn=a\n1 5\nsummary: 234\n")

    writer = asyncio.create_task(finish_writing())
    assert await backends_total(tmp_path, [11, 12]) == 1234
    await writer
