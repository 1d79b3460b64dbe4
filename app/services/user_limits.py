"""The per-user limits a submit is held to (docs/operations.md, "Per-user limits"), from the
hub's settings (``LimitSettings``): the submit rate, checked here against this process's
token buckets, and the bounds the insert itself checks against the user's figures in the
database (``store.user_usage``): unfinished tasks, stored bytes, costly validations.

The buckets live in this process's memory: across N replicas behind a balancer one user
gets up to N times the rate. The other bounds are read from the database, and hold across
replicas."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Protocol
from uuid import UUID

from taskhub.observability import metrics
from taskhub.rules.errors import SubmitRateExceeded
from taskhub.rules.records import Principal
from taskhub.rules.user_limits import (
    SubmitQuota,
    TokenBucket,
    bucket_is_full,
    exempt_from_limits,
    rate_limited,
    submit_quota,
    take_token,
)


class LimitSettings(Protocol):
    """What the limits read of the hub's settings (``taskhub.settings.Settings`` has it)."""

    @property
    def user_submit_rate(self) -> float: ...
    @property
    def user_submit_burst(self) -> int: ...
    @property
    def user_max_pending_tasks(self) -> int: ...
    @property
    def user_max_stored_bytes(self) -> int: ...
    @property
    def user_max_costly_validations(self) -> int: ...
    @property
    def limits_exempt_users(self) -> Collection[str]: ...
    @property
    def limits_exempt_superusers(self) -> bool: ...


# Past this many users' buckets, the full ones (forgetting them changes nothing) go.
MOST_BUCKETS_KEPT = 10_000


class SubmitRates:
    """A token bucket per user who submitted lately, in this process (one per process:
    ``PROCESS_RATES``); called on the event loop's thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._buckets: dict[UUID, TokenBucket] = {}
        self._forget_past = MOST_BUCKETS_KEPT

    def take(self, user_id: UUID, rate: float, burst: int) -> None:
        """One submit of ``user_id``'s now, or ``SubmitRateExceeded`` (with the seconds
        until a token is back) if its bucket has none."""
        now = self._clock()
        bucket, refusal = take_token(self._buckets.get(user_id), now, rate, burst)
        self._buckets[user_id] = bucket
        if len(self._buckets) > self._forget_past:
            self._forget_full(now, rate, burst)
        if refusal is not None:
            raise refusal

    def _forget_full(self, now: float, rate: float, burst: int) -> None:
        for user_id, bucket in list(self._buckets.items()):
            if bucket_is_full(bucket, now, rate, burst):
                del self._buckets[user_id]
        # However many users submit at once, the next sweep comes after as many more.
        self._forget_past = max(MOST_BUCKETS_KEPT, 2 * len(self._buckets))

    def __len__(self) -> int:
        return len(self._buckets)


PROCESS_RATES = SubmitRates()


def is_exempt(settings: LimitSettings, principal: Principal) -> bool:
    return exempt_from_limits(
        principal, settings.limits_exempt_users, settings.limits_exempt_superusers
    )


def check_submit_rate(
    settings: LimitSettings,
    principal: Principal,
    *,
    exempt: bool,
    rates: SubmitRates = PROCESS_RATES,
) -> None:
    """``SubmitRateExceeded`` if ``principal`` submits faster than ``TASKHUB_USER_SUBMIT_RATE``
    allows past ``TASKHUB_USER_SUBMIT_BURST`` (every submit takes a token, refused or not)."""
    rate, burst = settings.user_submit_rate, settings.user_submit_burst
    if exempt or not rate_limited(rate, burst):
        return
    try:
        rates.take(principal.id, rate, burst)
    except SubmitRateExceeded:
        metrics.user_limit_refused(SubmitRateExceeded.slug)
        raise


def quota_of(settings: LimitSettings, *, exempt: bool, costly: bool) -> SubmitQuota | None:
    """The bounds a submit's insert is held to (None: none), of a costly job's task if
    ``costly``."""
    return submit_quota(
        max_pending_tasks=settings.user_max_pending_tasks,
        max_stored_bytes=settings.user_max_stored_bytes,
        max_costly_validations=settings.user_max_costly_validations,
        exempt=exempt,
        costly=costly,
    )
