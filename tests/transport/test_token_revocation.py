"""Tokens that stop working while in use, and wrong tokens sent over and over (issue #44,
L2 and L4), on the application in process (both engines).

- A long-poll (``GET /tasks/{id}`` with ``Prefer: wait=N``) whose token is revoked while it
  waits is answered 401 ``unauthorized`` within ``max(TASKHUB_AUTH_CACHE_SECONDS, 1)``
  seconds (and a read), not with the task when its wait is over; other users' polls wait on.
- A wrong token sent again and again costs one database read, not one an attempt, and the
  other users' requests are answered meanwhile.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Any

import httpx
import pytest

from taskhub.services import users
from taskhub.settings import Settings
from taskhub.store import users as user_store
from taskhub.store.database import Database
from tests.conftest import Users
from tests.support.api import JOB, ApiClient, assert_problem
from tests.support.metrics import Samples
from tests.support.waiting import eventually

AUTH_CACHE_SECONDS = 1.0
# The longest wait a poll asks for: far longer than the test may take, so that an answer
# is the revocation's, not the wait's end.
LONG_WAIT = 120
# Bound on the answer after a revocation: one re-check period, a read, and plenty of room
# for a slow machine (the old code answered only once the wait was over: 200, not 401).
REVOKED_WITHIN = AUTH_CACHE_SECONDS + 1 + 8
FLOOD = 60


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        auth_cache_seconds=AUTH_CACHE_SECONDS,
        auth_miss_cache_seconds=5.0,
        long_poll_max_wait_seconds=LONG_WAIT,
    )


def wait(seconds: int) -> dict[str, str]:
    return {"Prefer": f"wait={seconds}"}


async def metrics(http: httpx.AsyncClient) -> Samples:
    return Samples((await http.get("/metrics")).text)


async def until_waiting(http: httpx.AsyncClient, count: float) -> None:
    async def counted() -> bool:
        return (await metrics(http)).count("taskhub_long_poll_waiters") == count

    await eventually(counted, 10, f"{count} long-polls waiting", 0.01)


async def test_a_long_poll_whose_token_is_revoked_is_answered_401(
    http: httpx.AsyncClient,
    db: Database,
    tokens: Users,
    alice: ApiClient,
    bob: ApiClient,
    job: dict[str, Any],
) -> None:
    task = await alice.submit(JOB)
    before = await metrics(http)
    alices = asyncio.create_task(alice.get(f"/tasks/{task['id']}", headers=wait(LONG_WAIT)))
    bobs = asyncio.create_task(bob.get(f"/tasks/{task['id']}", headers=wait(LONG_WAIT)))
    await until_waiting(http, before.count("taskhub_long_poll_waiters") + 2)

    assert await users.revoke_token(db, tokens.alice)
    answer = await asyncio.wait_for(alices, REVOKED_WITHIN)
    body = assert_problem(answer, 401, "unauthorized")
    assert task["id"] not in answer.text and body["detail"] == "Invalid or revoked token."
    assert answer.headers["www-authenticate"] == "Bearer"

    assert not bobs.done(), "another user's long-poll must wait on"
    admin = ApiClient(http, tokens.admin)
    assert (await admin.transition(task["id"], "cancelled")).status_code == 200
    ended = await asyncio.wait_for(bobs, 10)
    assert ended.status_code == 200 and ended.json()["status"] == "cancelled"

    after = await metrics(http)
    outcome = {"outcome": "revoked"}
    assert after.count("taskhub_long_poll_seconds_count", outcome) == (
        before.count("taskhub_long_poll_seconds_count", outcome) + 1
    )
    # The revoked token is refused from then on, and nothing of the task changed for it.
    assert_problem(await alice.get(f"/tasks/{task['id']}"), 401, "unauthorized")


async def test_a_long_poll_whose_token_stays_valid_ends_as_before(
    http: httpx.AsyncClient,
    tokens: Users,
    alice: ApiClient,
    job: dict[str, Any],
    reads: list[Collection[str]],
) -> None:
    """Re-checks of a valid token do not end the wait: it ends when the task does."""
    task = await alice.submit(JOB)
    before = await metrics(http)
    poll = asyncio.create_task(alice.get(f"/tasks/{task['id']}", headers=wait(LONG_WAIT)))
    await until_waiting(http, before.count("taskhub_long_poll_waiters") + 1)
    digest = users.hash_token(tokens.alice)
    checked = len([read for read in reads if digest in read])

    def rechecked_twice() -> bool:
        return len([read for read in reads if digest in read]) >= checked + 2

    await eventually(rechecked_twice, 10 * AUTH_CACHE_SECONDS, "two re-checks of the token")
    assert not poll.done()
    assert (await alice.transition(task["id"], "cancelled")).status_code == 200
    answer = await asyncio.wait_for(poll, 10)
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled"


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[Collection[str]]:
    """The token hashes of every database read that resolves tokens."""
    calls: list[Collection[str]] = []
    real = user_store.principals_of

    async def counted(conn: Any, token_hashes: Collection[str]) -> Any:
        calls.append(list(token_hashes))
        return await real(conn, token_hashes)

    monkeypatch.setattr(user_store, "principals_of", counted)
    return calls


async def test_a_wrong_token_flood_costs_one_read_and_others_are_answered_meanwhile(
    http: httpx.AsyncClient, bob: ApiClient, reads: list[Collection[str]]
) -> None:
    wrong = ApiClient(http, "th_" + "not-a-token-0123456789-abcdefghijklmnopqrs")
    wrong_digest = users.hash_token("th_" + "not-a-token-0123456789-abcdefghijklmnopqrs")
    before = await metrics(http)

    async def flood() -> list[httpx.Response]:
        return [await wrong.get("/workers") for _ in range(FLOOD)]

    async def bystander() -> list[httpx.Response]:
        return [await bob.get("/users/me") for _ in range(10)]

    refused, served = await asyncio.gather(flood(), bystander())
    for response in refused:
        assert_problem(response, 401, "unauthorized")
    assert [response.status_code for response in served] == [200] * 10
    assert {response.json()["name"] for response in served} == {"bob"}
    assert sum(1 for read in reads if wrong_digest in read) == 1

    after = await metrics(http)
    cached = after.count("taskhub_auth_misses_total", {"source": "cache"}) - before.count(
        "taskhub_auth_misses_total", {"source": "cache"}
    )
    assert cached == FLOOD - 1
