"""The ``Authenticator``'s caches and its re-check of waiting requests' tokens, and the
revocation that ``TASKHUB_ADMIN_TOKEN`` does not undo (issue #44, L2 and L4).

Database reads are counted by wrapping the one store function that resolves tokens
(``store.users.principals_of``): whatever the cache answers costs none."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection
from typing import Any

import pytest
from prometheus_client import REGISTRY

from taskhub.observability import metrics
from taskhub.services import users
from taskhub.store import users as user_store
from taskhub.store.database import Database

WRONG = "th_" + "wrong-token-0123456789abcdefghijklmnopqrstu"
FLOOD = 50
# How long a test waits for the re-check that runs every ``recheck_seconds`` (1 s here):
# far more than one period, so a slow machine does not fail it.
RECHECK_WITHIN = 10.0


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The token hashes of every database read that resolves tokens, one list a read."""
    calls: list[list[str]] = []
    real = user_store.principals_of

    async def counted(conn: Any, token_hashes: Collection[str]) -> Any:
        calls.append(list(token_hashes))
        return await real(conn, token_hashes)

    monkeypatch.setattr(user_store, "principals_of", counted)
    return calls


def misses(source: str) -> float:
    return REGISTRY.get_sample_value("taskhub_auth_misses_total", {"source": source}) or 0.0


async def test_a_repeated_wrong_token_costs_one_database_read(
    db: Database, reads: list[list[str]]
) -> None:
    auth = users.Authenticator(db, ttl=5.0, miss_ttl=5.0, on_miss=metrics.auth_miss)
    cached, read = misses("cache"), misses("database")
    answers = [await auth.authenticate(WRONG) for _ in range(FLOOD)]
    assert answers == [None] * FLOOD
    assert len(reads) == 1
    assert misses("database") - read == 1
    assert misses("cache") - cached == FLOOD - 1


async def test_without_the_miss_cache_every_wrong_token_is_read(
    db: Database, reads: list[list[str]]
) -> None:
    """``TASKHUB_AUTH_MISS_CACHE_SECONDS=0`` turns the cache of wrong tokens off."""
    auth = users.Authenticator(db, ttl=5.0, miss_ttl=0.0)
    for _ in range(5):
        assert await auth.authenticate(WRONG) is None
    assert len(reads) == 5


async def test_the_miss_cache_is_bounded(
    db: Database, reads: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past ``CACHE_SIZE`` wrong tokens it starts empty again: distinct wrong tokens cannot
    grow it without limit (and the one missed first is read again)."""
    monkeypatch.setattr(users, "CACHE_SIZE", 3)
    auth = users.Authenticator(db, ttl=5.0, miss_ttl=60.0)
    wrong = [f"{WRONG}-{i}" for i in range(4)]
    for token in wrong[:3]:
        assert await auth.authenticate(token) is None
    assert await auth.authenticate(wrong[0]) is None
    assert len(reads) == 3  # still remembered
    assert await auth.authenticate(wrong[3]) is None  # the fourth: the cache starts again
    assert await auth.authenticate(wrong[0]) is None
    assert len(reads) == 5


async def test_a_token_issued_here_works_at_once_though_it_was_missed_before(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``create_user`` and ``create_token`` take the new token off the miss cache of this
    process's authenticators (a token is random: elsewhere, none was ever tried before)."""
    auth = users.Authenticator(db, ttl=5.0, miss_ttl=60.0)
    first, second = "th_" + "f" * 20 + "0123456789abcdefghijklm", "th_" + "s" * 43
    for token in (first, second):
        assert await auth.authenticate(token) is None  # remembered as wrong
    monkeypatch.setattr(users, "generate_token", lambda: first)
    await users.create_user(db, "carol")
    principal = await auth.authenticate(first)
    assert principal is not None and principal.name == "carol"
    monkeypatch.setattr(users, "generate_token", lambda: second)
    assert await users.create_token(db, "carol") == second
    principal = await auth.authenticate(second)
    assert principal is not None and principal.name == "carol"


async def test_a_revoked_token_is_found_out_for_every_waiting_request_in_one_read(
    db: Database, reads: list[list[str]]
) -> None:
    """``watch``: the tokens of all waiting requests are re-read together, one read per
    re-check, and only the revoked token's watchers are told."""
    auth = users.Authenticator(db, ttl=0.0, miss_ttl=5.0)
    assert auth.recheck_seconds == 1.0  # at least a second apart, whatever the cache's ttl
    _, kept = await users.create_user(db, "kept")
    _, other = await users.create_user(db, "other")
    _, gone = await users.create_user(db, "gone")
    digests = [users.hash_token(token) for token in (kept, other, gone, gone)]
    try:
        with (
            auth.watch(digests[0]) as kept_revoked,
            auth.watch(digests[1]) as other_revoked,
            auth.watch(digests[2]) as gone_revoked,
            auth.watch(digests[3]) as gone_again_revoked,
        ):
            assert await users.revoke_token(db, gone)
            await asyncio.wait_for(gone_revoked.wait(), RECHECK_WITHIN)
            await asyncio.wait_for(gone_again_revoked.wait(), RECHECK_WITHIN)
            assert not kept_revoked.is_set() and not other_revoked.is_set()
        assert reads, "no re-check read"
        assert all(sorted(read) == sorted(set(digests)) for read in reads), reads
    finally:
        await auth.close()


async def test_a_re_check_that_fails_tells_nothing_and_the_next_one_tries_again(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    auth = users.Authenticator(db, ttl=0.0)
    _, token = await users.create_user(db, "dave")
    real = user_store.principals_of
    failures = []

    async def fails_once(conn: Any, token_hashes: Collection[str]) -> Any:
        if not failures:
            failures.append(1)
            raise ConnectionError("the database went away")
        return await real(conn, token_hashes)

    monkeypatch.setattr(user_store, "principals_of", fails_once)
    try:
        with auth.watch(users.hash_token(token)) as revoked:
            assert await users.revoke_token(db, token)
            await asyncio.wait_for(revoked.wait(), RECHECK_WITHIN)
        assert failures == [1]
    finally:
        await auth.close()


async def test_the_re_check_stops_once_nothing_waits(db: Database) -> None:
    auth = users.Authenticator(db, ttl=0.0)
    _, token = await users.create_user(db, "erin")
    with auth.watch(users.hash_token(token)):
        rechecking = auth._rechecking
        assert rechecking is not None
    await asyncio.wait_for(rechecking, RECHECK_WITHIN)
    assert auth._rechecking is None


ADMIN = "th_" + "AdminToken-0123456789-abcdefghijklmnopqrst"


async def superuser_of(db: Database, token: str) -> str | None:
    """The name of the superuser ``token`` authenticates (a fresh cache), else None."""
    principal = await users.Authenticator(db, ttl=0.0).authenticate(token)
    return principal.name if principal is not None and principal.is_superuser else None


async def test_the_admin_token_is_granted_at_every_start_until_it_is_revoked(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    assert await users.ensure_admin_token(db, ADMIN)
    assert await users.ensure_admin_token(db, ADMIN)  # a second start: harmless
    assert await superuser_of(db, ADMIN) == "admin"
    assert await users.revoke_token(db, ADMIN)
    with caplog.at_level(logging.ERROR, logger="taskhub.services.users"):
        assert not await users.ensure_admin_token(db, ADMIN)
    assert "TASKHUB_ADMIN_TOKEN was revoked" in caplog.text
    assert ADMIN not in caplog.text
    assert await superuser_of(db, ADMIN) is None
    assert [user.tokens for user in await users.list_users(db)] == [0]


async def test_revoking_every_token_of_the_admin_user_is_not_undone_either(
    db: Database,
) -> None:
    assert await users.ensure_admin_token(db, ADMIN)
    other = await users.create_token(db, "admin")
    assert await users.revoke_tokens_of(db, "admin") == 2
    assert not await users.ensure_admin_token(db, ADMIN)
    assert await superuser_of(db, ADMIN) is None
    assert await superuser_of(db, other) is None
    assert await users.ensure_admin_token(db, "th_" + "AnotherAdmin-0123456789-abcdefghijklmn")


async def test_a_token_that_does_not_exist_is_not_recorded_as_revoked(db: Database) -> None:
    """``tokens revoke`` of a token that was never issued changes nothing: that value may
    still become ``TASKHUB_ADMIN_TOKEN`` later."""
    assert not await users.revoke_token(db, ADMIN)
    assert await users.ensure_admin_token(db, ADMIN)
    assert await superuser_of(db, ADMIN) == "admin"
