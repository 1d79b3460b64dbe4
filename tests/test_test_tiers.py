"""The suite's own selectors (tests/conftest.py), as ``./dev test --fast`` and a developer use
them: each test carries its folder's tier marker, ``--engine`` and ``TASKHUB_TEST_ENGINES``
keep one engine's tests (a test marked ``postgres`` goes with PostgreSQL), and an unknown
engine is refused. Checked on what a real pytest run collects."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = [
    "tests/rules/test_naming.py",
    "tests/services/test_waiting_tasks.py",
    "tests/store/test_transaction_pooler.py",  # marked postgres: PgBouncer in front of it
]


def collect(*args: str, engines: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "TASKHUB_TEST_ENGINES"}
    if engines is not None:
        env["TASKHUB_TEST_ENGINES"] = engines
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-n", "0"]
    command += ["-p", "no:cacheprovider", *args, *FILES]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)


def collected_ids(result: subprocess.CompletedProcess[str], status: int = 0) -> list[str]:
    assert result.returncode == status, result.stdout + result.stderr
    return [line for line in result.stdout.splitlines() if "::" in line]


def test_the_fast_selection_keeps_the_services_on_sqlite_only() -> None:
    ids = collected_ids(collect("--engine", "sqlite", "-m", "services and not redis"))
    assert ids
    assert all(i.startswith("tests/services/") and i.endswith("[sqlite]") for i in ids), ids


def test_an_engine_from_the_environment_keeps_its_tests_and_the_unparametrized_ones() -> None:
    ids = collected_ids(collect("-m", "unit or store", engines="postgres"))
    folders = {i.split("/")[1] for i in ids}
    assert folders == {"rules", "store"}, ids
    assert not any(i.endswith("[sqlite]") for i in ids), ids
    pooled = [i for i in ids if i.startswith("tests/store/")]
    assert pooled  # needs PostgreSQL, which was chosen


def test_without_postgres_a_test_that_needs_it_is_deselected() -> None:
    result = collect("-m", "store", engines="sqlite")
    assert collected_ids(result, status=5) == []  # pytest's "no tests collected"


def test_an_unknown_engine_is_refused() -> None:
    result = collect(engines="sqlite,mysql")
    assert result.returncode == 4, result.stdout + result.stderr
    assert "TASKHUB_TEST_ENGINES: unknown engine(s) ['mysql']" in result.stderr
