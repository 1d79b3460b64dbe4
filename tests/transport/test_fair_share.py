"""Fair sharing (docs/protocol.md, "Fair sharing"): a job registered with
``claim_order: fair-by-submitter`` hands its tasks out round-robin over the submitters,
oldest first within each; ``fair-by-room`` over rooms. Queue positions follow the same
order. Without the field a job stays FIFO, as zndraw-joblib expects."""

from __future__ import annotations

from typing import Any

import pytest

from taskhub.settings import Settings
from tests.support.api import JOB, SCHEMA, ApiClient, assert_problem

FAIR = "fair-by-submitter"


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Retries due at once: a retried task goes straight back into the queue."""
    return Settings(database_url=database_url, retry_backoff_seconds=0, sweeper_enabled=False)


async def claim_all(client: ApiClient, worker_id: str) -> list[str]:
    """Every task the worker can claim, one claim at a time, in the order handed out."""
    order = []
    while (task := await client.claim(worker_id)) is not None:
        order.append(task["id"])
    return order


async def submit_many(client: ApiClient, count: int, job: str = JOB, **extra: Any) -> list[str]:
    return [(await client.submit(job, **extra))["id"] for _ in range(count)]


async def test_a_job_is_fifo_unless_registered_otherwise(alice):
    registered = await alice.register()
    assert registered["claim_order"] == "fifo"
    fair = await alice.register(claim_order=FAIR)
    assert fair["claim_order"] == FAIR
    # Re-registered without the field: the job keeps its order.
    again = await alice.register(worker_id=fair["worker_id"])
    assert again["claim_order"] == FAIR
    shown = await alice.get(f"/rooms/room1/jobs/{JOB}")
    assert shown.json()["claim_order"] == FAIR


@pytest.mark.parametrize("value", ["fair", "FIFO", "", 3, None])
async def test_an_unknown_claim_order_is_refused_and_changes_nothing(alice, value):
    await alice.register()
    body = {"category": "modifiers", "name": "Rotate", "schema": SCHEMA, "claim_order": value}
    response = await alice.put("/rooms/room1/jobs", json=body)
    if value is None:  # null: as if left out
        assert response.status_code == 200, response.text
    else:
        problem = assert_problem(response, 422, "validation-error")
        assert problem["errors"][0]["loc"] == ["body", "claim_order"]
    assert (await alice.get(f"/rooms/room1/jobs/{JOB}")).json()["claim_order"] == "fifo"


async def test_only_the_jobs_own_workers_change_its_order(alice, bob):
    mine = await alice.register()
    await bob.register()  # bob's worker joins alice's job
    response = await bob.put(
        "/rooms/room1/jobs",
        json={
            "category": "modifiers",
            "name": "Rotate",
            "schema": mine["schema"],
            "claim_order": FAIR,
        },
    )
    assert_problem(response, 409, "schema-conflict")
    assert (await alice.get(f"/rooms/room1/jobs/{JOB}")).json()["claim_order"] == "fifo"


async def test_a_burst_does_not_hold_back_other_submitters(alice, bob, admin):
    job = await alice.register(claim_order=FAIR)
    a = await submit_many(alice, 5)
    b = await submit_many(bob, 1)
    d = await submit_many(admin, 2)
    expected = [a[0], b[0], d[0], a[1], d[1], a[2], a[3], a[4]]
    # Every pending task's place is where the claims will take it.
    for place, task_id in enumerate(expected, start=1):
        assert (await alice.task(task_id))["queue_position"] == place
    assert await claim_all(alice, job["worker_id"]) == expected


async def test_a_fifo_job_keeps_submission_order(alice, bob, admin):
    job = await alice.register()
    a = await submit_many(alice, 5)
    b = await submit_many(bob, 1)
    d = await submit_many(admin, 2)
    assert await claim_all(alice, job["worker_id"]) == [*a, *b, *d]


async def test_a_newcomer_is_next_after_the_head(alice, bob):
    job = await alice.register(claim_order=FAIR)
    a = await submit_many(alice, 6)
    for expected in a[:3]:
        assert (await alice.claim(job["worker_id"]))["id"] == expected
    late = await bob.submit(JOB)
    # It joins at the head: right after the task that holds the head's turn.
    assert late["queue_position"] == 2
    assert await claim_all(alice, job["worker_id"]) == [a[3], late["id"], a[4], a[5]]


async def test_priorities_come_first_and_each_is_shared_fairly(alice, bob):
    job = await alice.register(claim_order=FAIR)
    low = await submit_many(alice, 3)
    high_a = await submit_many(alice, 2, priority=5)
    high_b = await submit_many(bob, 2, priority=5)
    order = await claim_all(alice, job["worker_id"])
    assert order == [high_a[0], high_b[0], high_a[1], high_b[1], *low]


async def test_a_shared_global_job_is_fair_over_rooms(admin, alice):
    job = await admin.register(room="@global", name="Shared", claim_order="fair-by-room")
    name = "@global:modifiers:Shared"
    in_room1 = [(await alice.submit(name, room="room1"))["id"] for _ in range(4)]
    in_room2 = [(await admin.submit(name, room="room2"))["id"] for _ in range(2)]
    order = await claim_all(admin, job["worker_id"])
    assert order == [in_room1[0], in_room2[0], in_room1[1], in_room2[1], *in_room1[2:]]


async def test_a_retried_task_does_not_carry_its_submitters_next_tasks_ahead(alice, bob):
    """The retry comes back at the head of the queue, not at its old turn: what its
    submitter submits next takes turns among the others' as any newcomer's would."""
    job = await alice.register(claim_order=FAIR, max_attempts=2)
    (b1,) = await submit_many(bob, 1)
    first = await alice.claim(job["worker_id"])
    assert first["id"] == b1
    a = await submit_many(alice, 3)
    retried = await alice.transition(
        b1, "failed", claim_token=first["claim_token"], error="boom", retry=True
    )
    assert retried.status_code == 200, retried.text
    assert (await alice.task(b1))["status"] == "pending"
    b = await submit_many(bob, 2)
    assert await claim_all(alice, job["worker_id"]) == [b1, a[0], a[1], b[0], a[2], b[1]]
