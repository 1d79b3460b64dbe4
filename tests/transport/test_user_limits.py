"""Per-user limits on submitting (docs/operations.md, "Per-user limits"): past the submit
rate, the bound on unfinished tasks or the storage quota, a submit is answered 429 with its
own problem and ``Retry-After``, and stores nothing; every way of submitting counts (a
re-run, a bulk re-run, an ``@internal`` task); exempt users and superusers pass; and while
one user floods the hub past a limit, another's requests are all answered as usual."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from taskhub.main import create_app
from taskhub.settings import Settings
from tests.support.api import JOB, ApiClient, assert_problem
from tests.support.costly_payloads import COSTLY, POINTS_SCHEMA
from tests.support.metrics import Samples

SUBMIT = f"/rooms/room1/tasks/{JOB}"
SUMMARY = "@internal:analysis:RoomSummary"


@dataclass
class Users:
    alice: ApiClient
    bob: ApiClient
    admin: ApiClient  # a superuser


Hub = Callable[..., AbstractAsyncContextManager[Users]]


@pytest.fixture
def hub(settings: Settings, tokens: Any) -> Hub:
    """A hub on the test's database with ``limits`` changed in its settings (the others
    off unless given), and its users' clients."""

    @asynccontextmanager
    async def started(**limits: Any) -> AsyncIterator[Users]:
        off = {"user_submit_rate": 0, "user_max_pending_tasks": 0, "user_max_stored_bytes": 0}
        app = create_app(settings.model_copy(update={**off, **limits}))
        async with app.lifespan_context():
            transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
            async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as http:
                yield Users(
                    ApiClient(http, tokens.alice),
                    ApiClient(http, tokens.bob),
                    ApiClient(http, tokens.admin),
                )

    return started


async def submitted_by(client: ApiClient, who: str = "me") -> list[str]:
    """The ids of the tasks ``who`` submitted into room1."""
    response = await client.get("/rooms/room1/tasks", params={"submitted_by": who, "limit": 500})
    assert response.status_code == 200, response.text
    return [task["id"] for task in response.json()["items"]]


async def pending_refusals(client: ApiClient) -> float:
    """``taskhub_user_limit_refusals_total{limit="pending_tasks"}`` of the hub's process."""
    scraped = await client.http.get("/metrics")
    name, labels = "taskhub_user_limit_refusals_total", {"limit": "pending_tasks"}
    return Samples(scraped.text).count(name, labels)


def refused_with(response: httpx.Response, slug: str) -> int:
    """``response`` is the 429 ``slug`` problem; its ``Retry-After`` in seconds."""
    assert_problem(response, 429, slug)
    retry_after = int(response.headers["retry-after"])
    assert retry_after >= 1
    return retry_after


async def test_past_the_submit_rate_a_submit_is_refused_and_stores_nothing(hub: Hub) -> None:
    """A burst of 3, one token back every 100 s: the fourth submit is refused, with the
    seconds until the next token; other users have buckets of their own."""
    async with hub(user_submit_rate=0.01, user_submit_burst=3) as users:
        await users.alice.register()
        accepted = [await users.alice.submit(JOB) for _ in range(3)]
        refused = await users.alice.post(SUBMIT, json={"payload": {}})
        assert 90 <= refused_with(refused, "submit-rate-exceeded") <= 100
        assert sorted(await submitted_by(users.alice)) == sorted(task["id"] for task in accepted)
        assert (await users.bob.post(SUBMIT, json={"payload": {}})).status_code == 202


async def test_exempt_users_and_superusers_are_not_held_to_the_limits(hub: Hub) -> None:
    async with hub(
        user_submit_rate=0.01, user_submit_burst=1, limits_exempt_users=["bob"]
    ) as users:
        await users.alice.register()
        await users.alice.submit(JOB)
        refused_with(await users.alice.post(SUBMIT, json={"payload": {}}), "submit-rate-exceeded")
        for client in (users.bob, users.admin):
            for _ in range(5):
                await client.submit(JOB)
    async with hub(
        user_max_pending_tasks=1, limits_exempt_superusers=False, limits_exempt_users=["bob"]
    ) as users:
        # (each of them has unfinished tasks from the first hub already)
        refused_with(await users.alice.post(SUBMIT, json={"payload": {}}), "too-many-pending-tasks")
        refused_with(await users.admin.post(SUBMIT, json={"payload": {}}), "too-many-pending-tasks")
        await users.bob.submit(JOB)


async def test_past_the_unfinished_tasks_every_way_of_submitting_is_refused(hub: Hub) -> None:
    """Three unfinished tasks at most: a fourth submit, a re-run, a bulk re-run and an
    ``@internal`` task are refused; a repeated ``Idempotency-Key`` is still answered; once
    a task ends there is room for one more."""
    async with hub(user_max_pending_tasks=3) as users:
        alice = users.alice
        refusals_before = await pending_refusals(alice)
        await alice.register()
        keyed = await alice.post(SUBMIT, json={"payload": {}}, headers={"Idempotency-Key": "k1"})
        first = keyed.json()["id"]
        others = [(await alice.submit(JOB))["id"] for _ in range(2)]
        refused = await alice.post(SUBMIT, json={"payload": {"angle": 1}})
        assert refused_with(refused, "too-many-pending-tasks") == 10
        internal = await alice.post(f"/rooms/room1/tasks/{SUMMARY}", json={"payload": {}})
        refused_with(internal, "too-many-pending-tasks")
        replayed = await alice.post(SUBMIT, json={"payload": {}}, headers={"Idempotency-Key": "k1"})
        assert (replayed.status_code, replayed.json()["id"]) == (200, first)
        assert (await users.bob.post(SUBMIT, json={"payload": {}})).status_code == 202

        assert (await alice.transition(first, "cancelled")).status_code == 200
        rerun = await alice.post(f"/tasks/{first}/rerun")
        assert rerun.status_code == 202, rerun.text
        refused_with(await alice.post(f"/tasks/{first}/rerun"), "too-many-pending-tasks")
        bulk = await alice.post("/rooms/room1/tasks/bulk", json={"action": "rerun", "ids": [first]})
        assert bulk.status_code == 200, bulk.text
        assert bulk.json()["refusals"] == [
            {"task_id": first, "status": 429, "type": "/v1/problems/too-many-pending-tasks"}
        ]
        assert sorted(await submitted_by(alice)) == sorted([first, *others, rerun.json()["id"]])
        assert await pending_refusals(alice) - refusals_before == 4


async def test_past_the_storage_quota_a_submit_is_refused_and_results_count_too(hub: Hub) -> None:
    """The submit that crosses the quota is the last one stored. A task's result counts
    against its submitter's quota, whoever's worker wrote it."""
    async with hub(user_max_stored_bytes=2000) as users:
        alice, bob, admin = users.alice, users.bob, users.admin
        job = await admin.register()
        big = {"angle": 1, "note": "x" * 900}
        accepted = [(await alice.submit(JOB, payload=big))["id"] for _ in range(3)]
        refused = await alice.post(SUBMIT, json={"payload": big})
        assert refused_with(refused, "storage-quota-exceeded") == 600
        assert sorted(await submitted_by(alice)) == sorted(accepted)

        small = await bob.submit(JOB, payload={"angle": 2})
        claimed = await admin.claim(job["worker_id"])
        while claimed is not None and claimed["id"] != small["id"]:
            claimed = await admin.claim(job["worker_id"])
        assert claimed is not None
        await admin.transition(small["id"], "running", claim_token=claimed["claim_token"])
        done = await admin.transition(
            small["id"], "completed", claim_token=claimed["claim_token"], result={"r": "y" * 2100}
        )
        assert done.status_code == 200, done.text
        refused_with(await bob.post(SUBMIT, json={"payload": {}}), "storage-quota-exceeded")
        await admin.submit(JOB, payload=big)  # the worker's owner was not charged


# --- One user floods, another is served ----------------------------------------------------


@asynccontextmanager
async def bystander(client: ApiClient, pause: float = 0.0) -> AsyncIterator[list[int]]:
    """While the block runs, ``client`` submits a small task, reads it back and cancels it,
    again and again (``pause`` seconds apart: within a submit rate); the statuses it got.
    Every one must be a success."""
    statuses: list[int] = []
    done = asyncio.Event()

    async def serve() -> None:
        while not done.is_set():
            submitted = await client.post(SUBMIT, json={"payload": {"angle": 3}})
            statuses.append(submitted.status_code)
            if submitted.status_code == 202:
                task_id = submitted.json()["id"]
                statuses.append((await client.get(f"/tasks/{task_id}")).status_code)
                statuses.append((await client.transition(task_id, "cancelled")).status_code)
            await asyncio.sleep(pause)

    serving = asyncio.create_task(serve())
    try:
        yield statuses
    finally:
        done.set()
        await serving
    assert statuses and set(statuses) <= {200, 202}, statuses


def outcome(responses: list[httpx.Response], slug: str) -> list[str]:
    """The ids of the accepted submits; every other answer is ``slug``'s 429."""
    for response in responses:
        if response.status_code != 202:
            refused_with(response, slug)
    return [response.json()["id"] for response in responses if response.status_code == 202]


async def test_a_submit_flood_is_held_to_the_rate_while_another_user_is_served(hub: Hub) -> None:
    async with hub(user_submit_rate=5, user_submit_burst=10) as users:
        await users.alice.register()
        async with bystander(users.bob, pause=0.5):  # 2 submits a second: within the rate
            flood = await asyncio.gather(
                *(users.alice.post(SUBMIT, json={"payload": {}}) for _ in range(40))
            )
        accepted = outcome(flood, "submit-rate-exceeded")
        assert 10 <= len(accepted) < 40
        assert sorted(await submitted_by(users.alice)) == sorted(accepted)


async def test_a_flood_past_the_unfinished_tasks_is_refused_while_another_user_is_served(
    hub: Hub,
) -> None:
    async with hub(user_max_pending_tasks=5) as users:
        await users.alice.register()
        async with bystander(users.bob):
            flood = [await users.alice.post(SUBMIT, json={"payload": {}}) for _ in range(15)]
        accepted = outcome(flood, "too-many-pending-tasks")
        assert len(accepted) == 5
        assert sorted(await submitted_by(users.alice)) == sorted(accepted)


async def test_a_flood_past_the_storage_quota_is_refused_while_another_user_is_served(
    hub: Hub,
) -> None:
    payload = {"angle": 1, "note": "z" * 50_000}
    async with hub(user_max_stored_bytes=200_000) as users:
        await users.alice.register()
        async with bystander(users.bob):
            flood = [await users.alice.post(SUBMIT, json={"payload": payload}) for _ in range(8)]
        accepted = outcome(flood, "storage-quota-exceeded")
        assert len(accepted) == 4  # 4 x 50 kB reach the quota: the fifth is refused
        assert sorted(await submitted_by(users.alice)) == sorted(accepted)


async def test_a_flood_of_costly_payloads_is_refused_while_another_user_s_get_in(
    hub: Hub,
) -> None:
    """Alice's costly submits, all at once, past her share of the payload thread are
    refused (503 ``validation-busy``); bob's costly ones, submitted meanwhile, all get in."""
    points = "room1:modifiers:Points"
    async with hub() as users:
        await users.alice.register(name="Points", schema=POINTS_SCHEMA)

        async def bobs() -> list[int]:
            return [
                (
                    await users.bob.post(f"/rooms/room1/tasks/{points}", json={"payload": COSTLY})
                ).status_code
                for _ in range(3)
            ]

        theirs, *flood = await asyncio.gather(
            bobs(),
            *(
                users.alice.post(f"/rooms/room1/tasks/{points}", json={"payload": COSTLY})
                for _ in range(10)
            ),
        )
        assert theirs == [202, 202, 202]
        for response in flood:
            if response.status_code != 202:
                assert_problem(response, 503, "validation-busy")
        accepted = [response.json()["id"] for response in flood if response.status_code == 202]
        assert 2 <= len(accepted) < 10
        assert sorted(await submitted_by(users.alice)) == sorted(accepted)
