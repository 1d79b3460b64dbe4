"""When a failed attempt is tried again: exponential backoff with jitter, bounded."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

MAX_ATTEMPTS_LIMIT = 100


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Attempt ``n`` (1-based) that ended is retried after ``base * 2**(n-1)`` seconds,
    capped at ``cap``, scaled by a random factor in ``[1 - jitter, 1 + jitter]`` so that
    tasks failed together do not all come back in the same instant."""

    base_seconds: float = 1.0
    cap_seconds: float = 300.0
    jitter: float = 0.2

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        exponent = min(max(attempt, 1) - 1, 62)
        nominal = min(self.cap_seconds, self.base_seconds * 2.0**exponent)
        factor = (rng or random).uniform(1 - self.jitter, 1 + self.jitter)
        return nominal * factor

    def next_run_at(self, attempt: int, now: datetime) -> datetime:
        return now + timedelta(seconds=self.delay(attempt))


def may_retry(attempt: int, max_attempts: int) -> bool:
    """Whether an attempt that just ended leaves another one."""
    return attempt < max_attempts


DEFAULT_RETRY_POLICY = RetryPolicy()
