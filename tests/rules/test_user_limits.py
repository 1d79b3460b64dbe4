"""The per-user limits' rules on their own: who is held to them, the submit rate's token
bucket, the bounds of a submit."""

from uuid import uuid4

import pytest

from taskhub.rules.errors import StorageQuotaExceeded, TooManyPendingTasks, ValidationBusy
from taskhub.rules.records import Principal
from taskhub.rules.user_limits import (
    SubmitQuota,
    TokenBucket,
    Usage,
    bucket_is_full,
    exempt_from_limits,
    over_quota,
    rate_limited,
    submit_quota,
    take_token,
)

ALICE = Principal(id=uuid4(), name="alice", is_superuser=False)
ROOT = Principal(id=uuid4(), name="root", is_superuser=True)


def test_a_plain_user_is_held_to_the_limits_unless_named_exempt() -> None:
    assert not exempt_from_limits(ALICE, [], exempt_superusers=True)
    assert not exempt_from_limits(ALICE, ["bob", "root"], exempt_superusers=True)
    assert exempt_from_limits(ALICE, ["bob", "alice"], exempt_superusers=False)


def test_a_superuser_is_exempt_only_while_superusers_are_or_when_named() -> None:
    assert exempt_from_limits(ROOT, [], exempt_superusers=True)
    assert not exempt_from_limits(ROOT, [], exempt_superusers=False)
    assert exempt_from_limits(ROOT, frozenset({"root"}), exempt_superusers=False)


def test_names_match_exactly() -> None:
    """A name is a user's whole name, case and all: no prefix, no other case."""
    for names in (["alic"], ["Alice"], ["alice "], ["ALICE"]):
        assert not exempt_from_limits(ALICE, names, exempt_superusers=True), names


# --- The submit rate's token bucket, the bounds of a submit (issue #44) --------------------


def test_a_new_user_s_bucket_starts_full_and_a_burst_past_it_is_refused() -> None:
    bucket = None
    for _ in range(3):
        bucket, refusal = take_token(bucket, 100.0, rate=2.0, burst=3)
        assert refusal is None
    assert bucket == TokenBucket(0.0, 100.0)
    after, refusal = take_token(bucket, 100.0, rate=2.0, burst=3)
    assert refusal is not None and refusal.status == 429 and refusal.retry_after == 1
    assert after == bucket, "a refused submit takes nothing"


def test_tokens_come_back_at_the_rate_up_to_the_burst() -> None:
    empty = TokenBucket(0.0, 10.0)
    bucket, refusal = take_token(empty, 10.25, rate=2.0, burst=3)
    assert refusal is not None, "half a token is not one"
    bucket, refusal = take_token(bucket, 10.5, rate=2.0, burst=3)
    assert refusal is None and bucket == TokenBucket(0.0, 10.5)
    assert not bucket_is_full(bucket, 11.0, rate=2.0, burst=3)
    assert bucket_is_full(bucket, 12.0, rate=2.0, burst=3)
    bucket, _ = take_token(bucket, 1000.0, rate=2.0, burst=3)
    assert bucket.tokens == 2.0, "never more than the burst"


@pytest.mark.parametrize(
    ("rate", "tokens", "retry_after"),
    [(10.0, 0.0, 1), (0.5, 0.0, 2), (0.01, 0.25, 75), (0.001, 0.9999, 1)],
)
def test_retry_after_is_the_whole_seconds_until_a_token_is_back(
    rate: float, tokens: float, retry_after: int
) -> None:
    _bucket, refusal = take_token(TokenBucket(tokens, 5.0), 5.0, rate=rate, burst=10)
    assert refusal is not None and refusal.retry_after == retry_after


def test_a_rate_or_a_burst_of_zero_turns_the_rate_limit_off() -> None:
    assert rate_limited(1.0, 1)
    assert not rate_limited(0.0, 1000) and not rate_limited(100.0, 0)


def quota(**changes: bool | int) -> SubmitQuota | None:
    """The bounds of a submit under these settings, changed by ``changes``."""
    chosen = {"max_pending_tasks": 10, "max_stored_bytes": 1000, "max_costly_validations": 2}
    return submit_quota(**{**chosen, "exempt": False, "costly": False, **changes})


def test_the_bounds_of_a_submit() -> None:
    assert quota() == SubmitQuota(unfinished_tasks=10, stored_bytes=1000)
    assert quota(costly=True) == SubmitQuota(10, 1000, 2)
    assert quota(max_pending_tasks=0, max_stored_bytes=0) is None, "0 turns a bound off"
    assert quota(exempt=True) is None
    assert quota(exempt=True, costly=True) == SubmitQuota(costly_tasks=2), (
        "costly validations share the hub's CPU: an exempt user is held to them too"
    )


@pytest.mark.parametrize(
    ("usage", "refused"),
    [
        (Usage(9, 1, 999), None),
        (Usage(10, 0, 0), TooManyPendingTasks),
        (Usage(0, 0, 1000), StorageQuotaExceeded),
        (Usage(3, 2, 0), ValidationBusy),
        (Usage(10, 2, 5000), ValidationBusy),  # the refusal that passes soonest
    ],
)
def test_a_bound_reached_refuses_the_submit(usage: Usage, refused: type | None) -> None:
    refusal = over_quota(usage, SubmitQuota(10, 1000, 2))
    assert type(refusal) is refused if refused is not None else refusal is None


def test_each_refusal_says_when_to_try_again() -> None:
    refusals = [
        over_quota(Usage(10, 0, 0), SubmitQuota(unfinished_tasks=10)),
        over_quota(Usage(0, 0, 10), SubmitQuota(stored_bytes=10)),
        over_quota(Usage(0, 1, 0), SubmitQuota(costly_tasks=1)),
    ]
    assert [(r.status, r.slug, r.retry_after) for r in refusals if r is not None] == [
        (429, "too-many-pending-tasks", 10),
        (429, "storage-quota-exceeded", 600),
        (503, "validation-busy", 1),
    ]
