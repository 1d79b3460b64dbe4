"""The job-row cache of submits: bounded by the bytes of the schemas it holds, not only by
their count, so large schemas cannot grow a long-lived process without limit."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from taskhub.services.jobs import KnownJobs
from taskhub.validation.payloads import schema_bytes


def big_schema(size: int) -> dict[str, Any]:
    """An object schema of ``size`` bytes as compact JSON, accepting ``{}``."""
    schema = {"type": "object", "description": ""}
    schema["description"] = "x" * (size - schema_bytes(schema))
    assert schema_bytes(schema) == size
    return schema


SIZE = 40_000


@pytest.fixture
def small_budget(app: Any, monkeypatch: pytest.MonkeyPatch) -> KnownJobs:
    """The app's cache, with room for the schemas of three of the jobs below."""
    known = KnownJobs(schema_budget=3 * SIZE)
    monkeypatch.setattr(app.hub, "known_jobs", known)
    return known


async def test_submits_keep_the_cached_schemas_within_the_budget_and_the_newest_cached(
    small_budget, alice
) -> None:
    names = [
        (await alice.register(name=f"Big{i}", schema=big_schema(SIZE)))["full_name"]
        for i in range(6)
    ]
    for name in names:
        await alice.submit(name)
        assert small_budget.schema_bytes <= 3 * SIZE
    assert small_budget.schema_bytes == 3 * SIZE
    assert [small_budget.get(name) is not None for name in names] == [False] * 3 + [True] * 3
    await alice.submit(names[0])  # read afresh, and cached again
    assert small_budget.get(names[0]) is not None
    assert small_budget.schema_bytes <= 3 * SIZE


def row(size: int) -> SimpleNamespace:
    return SimpleNamespace(schema=big_schema(size))


def test_the_least_recently_used_rows_go_first() -> None:
    known = KnownJobs(schema_budget=3 * SIZE)
    for name in "abc":
        known.remember(name, row(SIZE))
    known.get("a")  # now the most recently used
    known.remember("d", row(SIZE))
    assert [known.get(name) is not None for name in "abcd"] == [True, False, True, True]
    assert known.schema_bytes == 3 * SIZE


def test_a_row_remembered_again_or_forgotten_counts_its_schema_once_or_not_at_all() -> None:
    known = KnownJobs(schema_budget=3 * SIZE)
    known.remember("a", row(SIZE))
    known.remember("a", row(2 * SIZE))
    assert known.schema_bytes == 2 * SIZE
    known.forget("a")
    known.forget("a")
    assert known.schema_bytes == 0 and known.get("a") is None


def test_a_row_whose_schema_alone_exceeds_the_budget_is_not_kept_and_pushes_nothing_out() -> None:
    known = KnownJobs(schema_budget=3 * SIZE)
    known.remember("a", row(SIZE))
    known.remember("huge", row(3 * SIZE + 1))
    assert known.get("huge") is None and known.get("a") is not None
    assert known.schema_bytes == SIZE


def test_past_its_count_the_cache_starts_afresh_as_before() -> None:
    known = KnownJobs(limit=2)
    for name in "abc":
        known.remember(name, row(100))
    assert [known.get(name) is not None for name in "abc"] == [False, False, True]
    assert known.schema_bytes == 100
