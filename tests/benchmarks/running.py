"""Running a benchmark as its users do: ``python -m benchmarks …`` from the repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# A hang guard, not a speed check: a smoke run takes a minute or two on a loaded machine.
TIMEOUT_SECONDS = 900.0


def run_benchmark(*args: str, timeout: float = TIMEOUT_SECONDS) -> subprocess.CompletedProcess[str]:
    """Run ``python -m benchmarks <args>`` (a scenario's name first, or the suite's
    options); fail the test unless it exits with 0."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done
