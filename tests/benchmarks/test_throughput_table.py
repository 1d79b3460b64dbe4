"""The throughput summary compares each run with the ceiling of its own round, and with
several rounds gives medians over them (arithmetic only: no server is started)."""

from __future__ import annotations

from typing import Any

from benchmarks.scenarios.throughput import ceiling_shares, median_table, table


def run(
    target: str,
    workers: int,
    rate: float,
    round_number: int,
    error: str | None = None,
    cpu: tuple[float | None, float | None, float | None] = (4.0, 2.0, None),
) -> dict[str, Any]:
    """A result line; ``cpu``: client, server and database CPU seconds for 2,000 tasks."""
    result: dict[str, Any] = {
        "target": target,
        "workers": workers,
        "completed": 0 if error else 2000,
        "tasks_per_s": rate,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "client_cpu_s": cpu[0],
        "server_cpu_s": cpu[1],
        "database_cpu_s": cpu[2],
        "round": round_number,
        "error": error,
    }
    return result


def test_a_run_is_compared_with_the_ceiling_of_its_own_round() -> None:
    results = [
        run("ceiling", 4, 200.0, 1),
        run("sqlite", 4, 150.0, 1),
        run("ceiling", 4, 100.0, 2),
        run("sqlite", 4, 90.0, 2),
    ]
    assert ceiling_shares(results) == [100.0, 75.0, 100.0, 90.0]


def test_failed_runs_and_runs_without_a_ceiling_have_no_share() -> None:
    results = [
        run("ceiling", 1, 0.0, 1, error="timeout"),
        run("sqlite", 1, 50.0, 1),
        run("ceiling", 4, 100.0, 1),
        run("postgres", 4, 0.0, 1, error="refused"),
    ]
    assert ceiling_shares(results) == [None, None, 100.0, None]


def test_medians_over_rounds_leave_failed_runs_out() -> None:
    results = [
        run("ceiling", 4, 100.0, 1),
        run("postgres", 4, 80.0, 1),
        run("ceiling", 4, 200.0, 2),
        run("postgres", 4, 120.0, 2),
        run("ceiling", 4, 100.0, 3),
        run("postgres", 4, 0.0, 3, error="timeout"),
    ]
    rows = median_table(results).splitlines()
    assert "| postgres | 4 | 2 | 100.0 | 70% | 60 to 80% | 0.50 |" in rows
    assert "| ceiling | 4 | 3 | 100.0 | 100% | 100 to 100% | 0.50 |" in rows


def test_one_round_gives_one_table_and_several_add_the_medians() -> None:
    one = [run("ceiling", 4, 100.0, 1), run("sqlite", 4, 70.0, 1)]
    assert "| sqlite | 4 | 70.0 | 1.0 | 2.0 | 70% | 2.00 / 1.00 / - |" in table(one).splitlines()
    assert "median" not in table(one)
    two = [*one, run("ceiling", 4, 100.0, 2), run("sqlite", 4, 90.0, 2)]
    lines = table(two).splitlines()
    assert "| 2 | sqlite | 4 | 90.0 | 1.0 | 2.0 | 90% | 2.00 / 1.00 / - |" in lines
    assert "| sqlite | 4 | 2 | 80.0 | 80% | 70 to 90% | 0.50 |" in lines


def test_cpu_is_shown_per_task_and_the_server_side_relative_to_the_client() -> None:
    """The database's CPU counts on the server side; a median of the server ÷ client ratio
    leaves out runs that failed or whose server could not be read."""
    results = [
        run("ceiling", 4, 400.0, 1, cpu=(4.0, 0.8, None)),
        run("postgres", 4, 300.0, 1, cpu=(5.0, 2.5, 2.5)),
        run("ceiling", 4, 200.0, 2, cpu=(8.0, 1.6, None)),
        run("postgres", 4, 150.0, 2, cpu=(10.0, 6.0, 6.0)),
        run("ceiling", 4, 300.0, 3, cpu=(6.0, None, None)),
        run("postgres", 4, 0.0, 3, error="timeout", cpu=(1.0, 1.0, 1.0)),
    ]
    lines = table(results).splitlines()
    assert "| 1 | postgres | 4 | 300.0 | 1.0 | 2.0 | 75% | 2.50 / 1.25 / 1.25 |" in lines
    assert "| 3 | ceiling | 4 | 300.0 | 1.0 | 2.0 | 100% | 3.00 / - / - |" in lines
    assert "| 3 | postgres | 4 | 0.0 | 1.0 | 2.0 | n/a (failed) | n/a |" in lines
    assert "| postgres | 4 | 2 | 225.0 | 75% | 75 to 75% | 1.10 |" in lines
    assert "| ceiling | 4 | 3 | 300.0 | 100% | 100 to 100% | 0.20 |" in lines
