"""Per-user limits (docs/operations.md, "Per-user limits"): who is exempt, how fast one user
may submit (a token bucket), and whether a submit fits the user's bounds on unfinished
tasks, stored bytes and costly validations. Pure: the caller keeps the buckets
(``services.user_limits``) and reads the usage (``store.user_usage``)."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

from taskhub.rules.errors import (
    DomainError,
    StorageQuotaExceeded,
    SubmitRateExceeded,
    TooManyPendingTasks,
    ValidationBusy,
)
from taskhub.rules.records import Principal


def exempt_from_limits(
    principal: Principal, exempt_users: Collection[str], exempt_superusers: bool
) -> bool:
    """Whether ``principal`` is not held to the per-user limits: a user named in
    ``exempt_users`` (``TASKHUB_LIMITS_EXEMPT_USERS``), or a superuser while
    ``exempt_superusers`` (``TASKHUB_LIMITS_EXEMPT_SUPERUSERS``) holds."""
    return principal.name in exempt_users or (exempt_superusers and principal.is_superuser)


# --- Submit rate: a token bucket per user ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class TokenBucket:
    """A user's submit tokens: ``tokens`` as of ``at`` (seconds of a monotonic clock)."""

    tokens: float
    at: float


def rate_limited(rate: float, burst: int) -> bool:
    """Whether a submit rate applies (a rate or a burst of 0 turns it off)."""
    return rate > 0 and burst > 0


def refilled(bucket: TokenBucket | None, now: float, rate: float, burst: int) -> TokenBucket:
    """``bucket`` as it stands at ``now``: ``rate`` tokens a second added since its reading,
    up to ``burst``; a user without one starts with a full bucket."""
    if bucket is None:
        return TokenBucket(float(burst), now)
    elapsed = max(0.0, now - bucket.at)
    return TokenBucket(min(float(burst), bucket.tokens + elapsed * rate), now)


def take_token(
    bucket: TokenBucket | None, now: float, rate: float, burst: int
) -> tuple[TokenBucket, SubmitRateExceeded | None]:
    """One submit at ``now``: the bucket with a token taken, and no refusal; or, when it
    holds less than a whole token, the bucket as it stands and the refusal, whose
    ``retry_after`` is the whole seconds until a token is back (at least 1)."""
    current = refilled(bucket, now, rate, burst)
    if current.tokens >= 1.0:
        return TokenBucket(current.tokens - 1.0, now), None
    wait = max(1, math.ceil((1.0 - current.tokens) / rate))
    refusal = SubmitRateExceeded(
        f"You submit faster than {rate:g} tasks a second (bursts of up to {burst}); "
        f"nothing was stored. Send the next one in {wait} s.",
        retry_after=wait,
    )
    return current, refusal


def bucket_is_full(bucket: TokenBucket, now: float, rate: float, burst: int) -> bool:
    """Whether ``bucket`` is back to ``burst`` by ``now``: forgetting it changes nothing."""
    return refilled(bucket, now, rate, burst).tokens >= burst


# --- Unfinished tasks, stored bytes, costly validations -------------------------------------


@dataclass(frozen=True, slots=True)
class Usage:
    """What one user's tasks hold across the hub (``store.user_usage``): tasks not yet
    ended (pending, claimed or running), those of them of a costly job (whose run validates
    a payload: ``ValidatePayload``), and the bytes of their payloads, results and logs."""

    unfinished_tasks: int = 0
    unfinished_costly_tasks: int = 0
    stored_bytes: int = 0


@dataclass(frozen=True, slots=True)
class SubmitQuota:
    """The bounds one submit is held to; None: not held to that one."""

    unfinished_tasks: int | None = None
    stored_bytes: int | None = None
    costly_tasks: int | None = None

    @property
    def any(self) -> bool:
        return any(
            bound is not None
            for bound in (self.unfinished_tasks, self.stored_bytes, self.costly_tasks)
        )


def submit_quota(
    *,
    max_pending_tasks: int,
    max_stored_bytes: int,
    max_costly_validations: int,
    exempt: bool,
    costly: bool,
) -> SubmitQuota | None:
    """The bounds a submit is held to (None: none). 0 turns the pending and stored bounds
    off, and an exempt user is not held to them; the bound on costly validations holds for
    everyone (it shares the hub's CPU, not a quota), for a task of a costly job."""
    quota = SubmitQuota(
        unfinished_tasks=None if exempt or not max_pending_tasks else max_pending_tasks,
        stored_bytes=None if exempt or not max_stored_bytes else max_stored_bytes,
        costly_tasks=max_costly_validations if costly else None,
    )
    return quota if quota.any else None


def over_quota(usage: Usage, quota: SubmitQuota) -> DomainError | None:
    """The refusal of a submit by a user whose tasks hold ``usage``, or None if it fits: a
    bound reached refuses (the submit that crosses one is the last that fits). Costly
    validations first: that refusal passes soonest."""
    if quota.costly_tasks is not None and usage.unfinished_costly_tasks >= quota.costly_tasks:
        return ValidationBusy(
            f"{usage.unfinished_costly_tasks} of your costly validations (tasks of jobs such "
            "as ValidatePayload) have not ended yet; submit the next one when one has."
        )
    if quota.unfinished_tasks is not None and usage.unfinished_tasks >= quota.unfinished_tasks:
        return TooManyPendingTasks(
            f"You have {usage.unfinished_tasks} tasks that have not ended (the bound is "
            f"{quota.unfinished_tasks}); nothing was stored. Submit more as they end."
        )
    if quota.stored_bytes is not None and usage.stored_bytes >= quota.stored_bytes:
        return StorageQuotaExceeded(
            f"Your tasks keep {usage.stored_bytes} bytes of payloads, results and logs (the "
            f"bound is {quota.stored_bytes}); nothing was stored. Bytes come back as your "
            "old tasks are purged."
        )
    return None
