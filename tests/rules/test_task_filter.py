"""The task filter's parsing rules and its LIKE pattern (literal text, no wildcards)."""

from __future__ import annotations

import pytest

from taskhub.rules.errors import ValidationFailed
from taskhub.rules.naming import JobName
from taskhub.rules.states import TaskStatus
from taskhub.rules.task_filter import (
    TaskFilter,
    like_pattern,
    parse_job,
    parse_query_text,
    parse_statuses,
)
from taskhub.store.room_stats import interpolated


def test_like_pattern_takes_wildcards_and_escapes_literally() -> None:
    assert like_pattern("50%") == "%50\\%%"
    assert like_pattern("a_b") == "%a\\_b%"
    assert like_pattern("c:\\tmp") == "%c:\\\\tmp%"


def test_statuses_one_or_several_each_once() -> None:
    assert parse_statuses(None, ["q"]) == ()
    assert parse_statuses("failed", ["q"]) == (TaskStatus.FAILED,)
    assert parse_statuses("failed, cancelled,failed", ["q"]) == (
        TaskStatus.FAILED,
        TaskStatus.CANCELLED,
    )
    with pytest.raises(ValidationFailed):
        parse_statuses("failed,,", ["q"])


def test_job_and_query_text() -> None:
    assert parse_job("@global:modifiers:Rotate", ["q"]) == JobName("@global", "modifiers", "Rotate")
    for bad in ("Rotate", "a:b", "a@b:c:d"):
        with pytest.raises(ValidationFailed):
            parse_job(bad, ["q"])
    assert parse_query_text("x" * 200, ["q"]) == "x" * 200
    for bad in ("", "x" * 201, "a\x00b"):
        with pytest.raises(ValidationFailed):
            parse_query_text(bad, ["q"])


def test_a_plain_filter_is_what_listings_had() -> None:
    assert TaskFilter().is_plain
    assert TaskFilter(statuses=(TaskStatus.FAILED,)).is_plain
    assert not TaskFilter(statuses=(TaskStatus.FAILED, TaskStatus.CANCELLED)).is_plain
    assert not TaskFilter(q="x").is_plain


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [([5], 0.5, 5.0), ([1, 2], 0.5, 1.5), ([1, 2, 3, 10], 0.95, 8.95), ([2, 4], 0.95, 3.9)],
)
def test_interpolated_is_percentile_cont(values: list[int], p: float, expected: float) -> None:
    count = len(values)
    lower = int(p * (count - 1))
    ranked = {k: v for k, v in enumerate(values) if k in (lower, lower + 1)}
    assert interpolated(ranked, count, p) == pytest.approx(expected)
