"""Running a benchmark module as its users do: ``python -m benchmarks…`` from the repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def run_benchmark(
    module: str, *args: str, timeout: float = 180
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m <module> <args>``; fail the test unless it exits with 0."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done
