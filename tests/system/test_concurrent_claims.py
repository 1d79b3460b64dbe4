"""Concurrent claiming against a real server: every task exactly once, no false empties."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.server import HubServer, running_hub

PREFIX = "/v1/joblib"
ROOM = "claims"
JOB = f"{ROOM}:modifiers:Crunch"
TASKS = 2_000
CLAIMERS = 16
SUBMIT_CONCURRENCY = 16
# The claimers never heartbeat, and a loaded machine can take minutes over the submits and
# claims (seen past the default 60 s worker timeout: the sweeper then rightly removed the
# workers, and a claim got 404 worker-not-found). This test is about claims racing, not
# about timeouts: the worker timeout and the claims' lease are held off for its server.
DAY = str(24 * 3600)
SERVER_ENV = {"TASKHUB_WORKER_TIMEOUT_SECONDS": DAY, "TASKHUB_TASK_LEASE_SECONDS": DAY}


@pytest.fixture(params=["sqlite", "postgres"])
def hub_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[HubServer]:
    """A fresh server of each backend whose sweeper cannot remove a silent worker or
    expire a claim while the test runs."""
    with running_hub(request.param, tmp_path, env=SERVER_ENV) as server:
        yield server


async def queue_depth(client: httpx.AsyncClient) -> float:
    """The job's ``taskhub_queue_depth`` on ``/metrics`` (read off the trigger-kept counts)."""
    response = await client.get("/metrics")
    assert response.status_code == 200, response.text
    sample = f'taskhub_queue_depth{{job="{JOB}"}} '
    lines = [line for line in response.text.splitlines() if line.startswith(sample)]
    assert len(lines) == 1, response.text
    return float(lines[0].removeprefix(sample))


@dataclass
class ClaimLedger:
    """What the claimers saw, shared by all of them (one event loop, so no locks)."""

    claims: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    in_flight: int = 0
    false_empties: list[str] = field(default_factory=list)


async def _submit_all(client: httpx.AsyncClient) -> list[str]:
    gate = asyncio.Semaphore(SUBMIT_CONCURRENCY)

    async def submit(index: int) -> str:
        async with gate:
            response = await client.post(
                f"{PREFIX}/rooms/{ROOM}/tasks/{JOB}", json={"payload": {"n": index}}
            )
        assert response.status_code == 202, response.text
        return response.json()["id"]

    return list(await asyncio.gather(*(submit(i) for i in range(TASKS))))


async def _claimer(client: httpx.AsyncClient, worker_id: str, ledger: ClaimLedger) -> None:
    """Claim until the server says nothing is left, checking every empty answer.

    An empty answer is sound only if every task not yet reported as claimed could be held
    by another claim still in flight; if more tasks are unaccounted for than claims in
    flight, a task was pending when the server answered ``{"task": null}``.
    """
    while True:
        ledger.in_flight += 1
        try:
            response = await client.post(f"{PREFIX}/tasks/claim", json={"worker_id": worker_id})
        finally:
            ledger.in_flight -= 1
        assert response.status_code == 200, response.text
        task = response.json()["task"]
        if task is not None:
            ledger.claims.append((worker_id, task))
            continue
        unaccounted = TASKS - len(ledger.claims)
        if unaccounted <= ledger.in_flight:
            return
        ledger.false_empties.append(
            f"worker {worker_id}: null with {unaccounted} tasks unclaimed "
            f"and only {ledger.in_flight} other claims in flight"
        )
        await asyncio.sleep(0.01)


async def test_concurrent_claimers_take_every_task_exactly_once(hub_server: HubServer) -> None:
    # Idle connections are dropped well before the server's keep-alive timeout (uvicorn:
    # 5 s, httpx's default expiry too): a client stalled on a loaded machine must not send
    # on a connection the server is closing at that moment (a ReadError, nothing sent back).
    limits = httpx.Limits(max_connections=32, max_keepalive_connections=32, keepalive_expiry=1.0)
    async with httpx.AsyncClient(
        base_url=hub_server.base_url,
        headers=hub_server.admin_headers,
        timeout=30.0,
        limits=limits,
        trust_env=False,
    ) as client:
        async with asyncio.timeout(240):
            body = {"category": "modifiers", "name": "Crunch", "schema": {}}
            first = await client.put(f"{PREFIX}/rooms/{ROOM}/jobs", json=body)
            assert first.status_code == 201, first.text
            workers = [first.json()["worker_id"]]
            for _ in range(CLAIMERS - 1):
                created = await client.post(f"{PREFIX}/workers")
                assert created.status_code == 201, created.text
                assert created.json()["worker_timeout_seconds"] == float(DAY)  # held off
                worker_id = created.json()["id"]
                linked = await client.put(
                    f"{PREFIX}/rooms/{ROOM}/jobs", json={**body, "worker_id": worker_id}
                )
                assert linked.status_code == 200, linked.text
                assert linked.json()["worker_id"] == worker_id
                workers.append(worker_id)
            assert len(set(workers)) == CLAIMERS

            submitted = await _submit_all(client)
            assert len(set(submitted)) == TASKS
            pending = await client.get(f"{PREFIX}/rooms/{ROOM}/tasks", params={"status": "pending"})
            assert pending.json()["total"] == TASKS
            assert await queue_depth(client) == TASKS

            ledger = ClaimLedger()
            await asyncio.gather(*(_claimer(client, w, ledger) for w in workers))

            assert ledger.false_empties == []
            claimed_ids = Counter(task["id"] for _, task in ledger.claims)
            duplicates = {task_id: n for task_id, n in claimed_ids.items() if n > 1}
            assert duplicates == {}
            assert set(claimed_ids) == set(submitted)
            assert len(ledger.claims) == TASKS
            for worker_id, task in ledger.claims:
                assert task["status"] == "claimed"
                assert task["worker_id"] == worker_id
                assert task["job_name"] == JOB
            assert len({worker_id for worker_id, _ in ledger.claims}) > 1

            for worker_id in workers:
                again = await client.post(f"{PREFIX}/tasks/claim", json={"worker_id": worker_id})
                assert again.status_code == 200, again.text
                assert again.json()["task"] is None
            pending = await client.get(f"{PREFIX}/rooms/{ROOM}/tasks", params={"status": "pending"})
            assert pending.status_code == 200, pending.text
            assert pending.json()["total"] == 0
            assert pending.json()["items"] == []
            claimed = await client.get(f"{PREFIX}/rooms/{ROOM}/tasks", params={"status": "claimed"})
            assert claimed.json()["total"] == TASKS
            # The pending counts the database keeps stayed exact through the race.
            assert await queue_depth(client) == 0
