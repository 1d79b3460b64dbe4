"""A process's submit-rate buckets (``services.user_limits.SubmitRates``): one per user,
refused past the burst until tokens come back, and forgotten once full when there are many
(a full bucket is what a user who never submitted has)."""

from __future__ import annotations

from uuid import uuid4

import pytest

from taskhub.rules.errors import SubmitRateExceeded
from taskhub.services import user_limits
from taskhub.services.user_limits import SubmitRates


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_each_user_has_a_bucket_of_their_own() -> None:
    clock = Clock()
    rates = SubmitRates(clock)
    alice, bob = uuid4(), uuid4()
    for _ in range(2):
        rates.take(alice, rate=1.0, burst=2)
    with pytest.raises(SubmitRateExceeded) as refused:
        rates.take(alice, rate=1.0, burst=2)
    assert refused.value.retry_after == 1
    rates.take(bob, rate=1.0, burst=2)
    clock.now += 1.0
    rates.take(alice, rate=1.0, burst=2)


def test_full_buckets_are_forgotten_past_the_many_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(user_limits, "MOST_BUCKETS_KEPT", 3)
    clock = Clock()
    rates = SubmitRates(clock)
    busy = uuid4()
    for _ in range(5):
        rates.take(busy, rate=0.1, burst=5)  # empty: remembered
    for _ in range(2):
        rates.take(uuid4(), rate=0.1, burst=5)
    assert len(rates) == 3
    clock.now += 15.0  # the two others are full again; the busy one is not yet
    rates.take(uuid4(), rate=0.1, burst=5)
    assert len(rates) == 2, "the refilled ones went, the busy one and the new one stay"
    with pytest.raises(SubmitRateExceeded):
        for _ in range(2):
            rates.take(busy, rate=0.1, burst=5)
