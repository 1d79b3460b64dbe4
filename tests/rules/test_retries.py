"""The retry policy: exponential backoff, capped, with ±20 % jitter; and how the status a
task left is read off the row it moved to."""

import random
from datetime import UTC, datetime, timedelta

import pytest

from taskhub.rules.retries import RetryPolicy, may_retry
from taskhub.rules.states import TaskStatus, previous_status

S = TaskStatus


@pytest.mark.parametrize("attempt, nominal", [(1, 2.0), (2, 4.0), (3, 8.0), (6, 64.0), (7, 100.0)])
def test_backoff_doubles_per_attempt_up_to_the_cap_within_the_jitter(attempt, nominal):
    policy = RetryPolicy(base_seconds=2.0, cap_seconds=100.0, jitter=0.2)
    rng = random.Random(attempt)
    delays = [policy.delay(attempt, rng) for _ in range(500)]
    assert all(nominal * 0.8 <= d <= nominal * 1.2 for d in delays)
    # The jitter is real: the draws spread over most of the band, not one value.
    assert max(delays) - min(delays) > nominal * 0.3


def test_backoff_survives_absurd_attempt_numbers():
    assert RetryPolicy(base_seconds=1, cap_seconds=60).delay(10_000) <= 72


def test_next_run_at_is_in_the_future_by_the_delay():
    now = datetime(2026, 1, 1, tzinfo=UTC)
    run_at = RetryPolicy(base_seconds=10, jitter=0).next_run_at(2, now)
    assert run_at - now == timedelta(seconds=20)


def test_attempts_run_out_at_the_maximum():
    assert may_retry(1, 3) and may_retry(2, 3)
    assert not may_retry(3, 3) and not may_retry(1, 1)


@pytest.mark.parametrize(
    "status, started, claimed, retried, expected",
    [
        (S.CLAIMED, False, True, False, S.PENDING),
        (S.RUNNING, True, True, False, S.CLAIMED),
        (S.COMPLETED, True, True, False, S.RUNNING),
        (S.FAILED, True, True, False, S.RUNNING),
        (S.FAILED, False, True, False, S.CLAIMED),
        (S.CANCELLED, False, False, False, S.PENDING),
        (S.CANCELLED, False, True, False, S.CLAIMED),
        (S.CANCELLED, True, True, False, S.RUNNING),
        (S.PENDING, True, True, True, S.RUNNING),
        (S.PENDING, False, True, True, S.CLAIMED),
    ],
)
def test_previous_status_is_read_off_the_row(status, started, claimed, retried, expected):
    assert previous_status(status, started=started, claimed=claimed, retried=retried) == expected


def test_pending_without_a_retry_has_no_previous_status():
    with pytest.raises(ValueError):
        previous_status(S.PENDING, started=False, claimed=False)
