"""The pure rules of task-log bounds: cutting messages and logger names, the rate bucket."""

from __future__ import annotations

from taskhub.rules.log_limits import (
    TRUNCATED_MARKER,
    LogLimits,
    RateBucket,
    fit_logger,
    fit_message,
    take,
)


def test_a_message_that_fits_is_kept_whole() -> None:
    assert fit_message("abc", 3) == "abc"
    assert fit_message("", 0) == ""


def test_a_long_message_is_cut_on_a_character_boundary_and_marked() -> None:
    cut = fit_message("€" * 100, 50)  # three bytes a character
    assert cut.endswith(TRUNCATED_MARKER)
    assert len(cut.encode()) <= 50
    head = cut.removesuffix(TRUNCATED_MARKER)
    assert head == "€" * len(head) and head


def test_logger_names_are_cut_and_an_empty_one_is_none() -> None:
    assert fit_logger("a" * 200, 128) == "a" * 128
    assert fit_logger("", 128) is None
    assert fit_logger(None, 128) is None


def test_the_bucket_starts_full_refills_at_the_rate_and_never_beyond() -> None:
    limits = LogLimits(lines_per_second=10)
    granted, bucket = take(None, 25, now=0.0, limits=limits)
    assert granted == 10 and bucket.tokens == 0
    granted, bucket = take(bucket, 25, now=0.25, limits=limits)
    assert granted == 2  # 2.5 tokens: whole lines only
    assert abs(bucket.tokens - 0.5) < 1e-9
    granted, bucket = take(bucket, 3, now=100.0, limits=limits)
    assert granted == 3 and bucket.tokens == 7  # refilled to 10, not to 1,000


def test_what_is_owed_stays_with_the_bucket() -> None:
    limits = LogLimits(lines_per_second=10)
    granted, bucket = take(RateBucket(0.0, 0.0, owed=4), 1, now=0.0, limits=limits)
    assert granted == 0 and bucket.owed == 4
