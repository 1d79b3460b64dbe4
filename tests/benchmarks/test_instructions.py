"""``benchmarks.instructions``: the in-process task cycle runs end to end on both engines
(timed here, ``--no-valgrind``: a run under callgrind takes minutes), and a callgrind
output's total is read from its summary line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from benchmarks.instructions import callgrind_total
from tests.support.databases import POSTGRES_URL

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_the_cycle_runs_in_process_on_both_engines() -> None:
    argv = [sys.executable, "-m", "benchmarks.instructions", "--no-valgrind", "--cycles", "5"]
    argv += ["--engines", "sqlite,postgres", "--pg-admin-url", POSTGRES_URL]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["engine"] for r in results] == ["sqlite", "postgres"]
    for result in results:
        assert "error" not in result, result
        assert result["cycles"] == 5
        assert result["ms_per_cycle"] > 0
        assert result["totals"][1] > 0


def test_the_instruction_total_comes_from_the_summary_line(tmp_path: Path) -> None:
    out = tmp_path / "callgrind.out"
    out.write_text("version: 1\ncmd: python\nevents: Ir\nfl=x\nfn=y\n1 5\nsummary: 123456789\n")
    assert callgrind_total(out) == 123_456_789
