"""Smoke tests of the scale benchmark's history and soak dimensions
(``benchmarks/scenarios/scale_history.py``) at tiny sizes: every operation is measured at
every size, storage and the purge are reported, and the soak samples the hub every slice.
No timing is asserted."""

from __future__ import annotations

from typing import Any

from benchmarks.scenarios.scale_history import (
    HOT_OPERATIONS,
    History,
    parse_args,
    read_plan,
    run,
    table,
)
from taskhub.clock import new_id
from taskhub.rules.task_filter import SORTS
from tests.support.databases import POSTGRES_URL

SIZES = (300, 600)


def rows_of(rows: list[dict[str, Any]], **fields: Any) -> list[dict[str, Any]]:
    return [row for row in rows if all(row.get(k) == v for k, v in fields.items())]


def history_args(engine: str, sizes: tuple[int, ...], *options: str) -> list[str]:
    listed = ",".join(map(str, sizes))
    return [
        *("--dimensions", "history", "--engines", engine, "--pg-admin-url", POSTGRES_URL),
        *("--history-sizes", listed, "--history-postgres-sizes", listed),
        *("--history-samples", "2", "--history-rooms", "3", *options),
    ]


def assert_measured_at(rows: list[dict[str, Any]], engine: str, size: int) -> None:
    """Every operation measured at ``size``, and the listings counted the seeded room."""
    at_size = rows_of(rows, engine=engine, tasks=size, dimension="history")
    measured = {row["operation"]: row for row in at_size if "samples" in row}
    assert {*HOT_OPERATIONS, "list_default", "search", "stats_24h", "bulk_dry_run"} <= set(measured)
    assert len([name for name in measured if name.startswith("list_sort_")]) == len(SORTS) - 1
    assert all(row["samples"] == 2 and row["p95_ms"] is not None for row in measured.values())
    room = measured["list_default"]["counted"]
    assert 0 < measured["list_status"]["counted"] < room < size
    assert 0 < measured["search"]["counted"] < measured["list_status"]["counted"]
    (storage,) = rows_of(rows, engine=engine, tasks=size, operation="storage")
    assert storage["bytes_per_task"] > 0 and storage["seed_rows_per_s"] > 0


def test_history_grows_measures_every_size_and_purges_on_sqlite() -> None:
    purge = ("--history-purge-interval", "0.2", "--history-purge-seconds", "10")
    rows = run(parse_args(history_args("sqlite", SIZES, *purge)))

    assert not [row for row in rows if row.get("error")], rows
    assert [row["tasks"] for row in rows_of(rows, operation="storage")] == list(SIZES)
    for size in SIZES:
        assert_measured_at(rows, "sqlite", size)
    smallest = rows_of(rows, tasks=SIZES[0], operation="claim")[0]
    assert smallest["ratio_p95"] == 1.0 and smallest["meets_goal"] is None
    largest = rows_of(rows, tasks=SIZES[-1], operation="claim")[0]
    assert largest["ratio_p95"] is not None and largest["meets_goal"] is not None
    (purged,) = rows_of(rows, operation="purge")
    assert 0 < purged["purged"] < SIZES[-1]  # the history's older half goes
    assert purged["purge_tasks_per_s"] > 0 and purged["submit_samples"] > 0

    rendered = table(rows)
    assert "| sqlite | 600 | list_default |" in rendered
    assert "bytes/task" in rendered and "purged" in rendered


def test_history_is_copied_into_postgresql() -> None:
    rows = run(parse_args(history_args("postgres", SIZES[:1], "--history-purge-seconds", "0")))

    assert not [row for row in rows if row.get("error")], rows
    assert_measured_at(rows, "postgres", SIZES[0])
    assert not rows_of(rows, operation="purge")


def test_read_plan_covers_each_filter_and_sort_of_the_room_page() -> None:
    history = History(room="r-0", jobs={"r-0": [new_id()]}, worker_id="w", users=[new_id()])
    plan = read_plan(history)
    sorted_by = [name for name in plan if name.startswith("list_sort_")]
    assert len(sorted_by) == len(SORTS) - 1  # the default sort is list_default
    paths = " ".join(path for _method, path, _body in plan.values())
    for parameter in ("status=", "job=", "submitted_by=", "worker_id=", "q=disk"):
        assert parameter in paths
    assert {"stats_15m", "stats_1h", "stats_24h", "bulk_dry_run"} <= set(plan)


def test_soak_samples_the_hub_every_slice() -> None:
    options = "--engines sqlite --soak-tasks 60 --soak-every 20 --soak-concurrency 2"
    args = parse_args(["--dimensions", "soak", *options.split()])
    rows = run(args)

    slices = rows_of(rows, dimension="soak", operation="slice")
    assert [row["tasks_done"] for row in slices] == [20, 40, 60]
    assert all(row["rss_mb"] > 0 and row["open_fds"] > 0 for row in slices)
    assert all(row["samples"] == 20 and row["p95_ms"] >= row["p50_ms"] for row in slices)
    (summary,) = rows_of(rows, dimension="soak", operation="summary")
    assert (summary["first_slice"], summary["last_slice"]) == (2, 3)
    assert summary["rss_growth_pct"] is not None and summary["meets_goal"] is not None
    assert summary["error"] is None
