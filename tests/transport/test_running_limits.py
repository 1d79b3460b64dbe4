"""Running limits (docs/protocol.md, "Running limits"): a job may allow at most so many of
its tasks claimed or running at once per submitter (``max_running_per_submitter``) and per
room (``max_running_per_room``). A claim skips a task whose share is full; the task keeps
its place, and ``GET /tasks/{id}/place`` says what holds it back."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.api import JOB, SCHEMA, ApiClient, assert_problem


async def submit_many(client: ApiClient, count: int, job: str = JOB, **extra) -> list[str]:
    return [(await client.submit(job, **extra))["id"] for _ in range(count)]


async def claim_ids(client: ApiClient, worker_id: str, max_tasks: int = 1) -> list[str]:
    response = await client.post(
        "/tasks/claim", json={"worker_id": worker_id, "max_tasks": max_tasks}
    )
    assert response.status_code == 200, response.text
    return [task["id"] for task in response.json()["tasks"]]


async def place(client: ApiClient, task_id: str) -> dict:
    response = await client.get(f"/tasks/{task_id}/place")
    assert response.status_code == 200, response.text
    return response.json()


async def test_limits_are_registered_kept_and_removed_with_zero(alice):
    job = await alice.register(max_running_per_submitter=2, max_running_per_room=5)
    assert (job["max_running_per_submitter"], job["max_running_per_room"]) == (2, 5)
    kept = await alice.register(worker_id=job["worker_id"])
    assert (kept["max_running_per_submitter"], kept["max_running_per_room"]) == (2, 5)
    removed = await alice.register(worker_id=job["worker_id"], max_running_per_room=0)
    assert (removed["max_running_per_submitter"], removed["max_running_per_room"]) == (2, None)
    plain = await alice.register(name="Plain")
    assert plain["max_running_per_submitter"] is None and plain["max_running_per_room"] is None


@pytest.mark.parametrize("value", [-1, 10_001, "two", 1.5])
async def test_a_bad_limit_is_refused_and_changes_nothing(alice, value):
    await alice.register(max_running_per_submitter=3)
    body = {
        "category": "modifiers",
        "name": "Rotate",
        "schema": SCHEMA,
        "max_running_per_submitter": value,
    }
    response = await alice.put("/rooms/room1/jobs", json=body)
    problem = assert_problem(response, 422, "validation-error")
    assert problem["errors"][0]["loc"] == ["body", "max_running_per_submitter"]
    shown = (await alice.get(f"/rooms/room1/jobs/{JOB}")).json()
    assert shown["max_running_per_submitter"] == 3


async def test_a_full_submitter_waits_and_others_go_ahead(alice, bob):
    job = await alice.register(max_running_per_submitter=2)
    a = await submit_many(alice, 4)
    b = await submit_many(bob, 1)
    worker = job["worker_id"]
    first = await alice.claim(worker)
    assert [first["id"], *await claim_ids(alice, worker)] == a[:2]
    # alice has 2 running: her third task is skipped, bob's is next.
    assert await claim_ids(alice, worker) == b
    assert await claim_ids(alice, worker) == []
    held = await place(alice, a[2])
    assert held["held_back"] == {"scope": "submitter", "running": 2, "limit": 2}
    assert held["queue_position"] == 1 and held["status"] == "pending"
    # One of hers ends: the next one of hers goes.
    for status in ("running", "completed"):
        moved = await alice.transition(a[0], status, claim_token=first["claim_token"])
        assert moved.status_code == 200, moved.text
    assert (await place(alice, a[2]))["held_back"] is None
    assert await claim_ids(alice, worker) == [a[2]]


async def test_a_batch_claim_takes_no_more_than_a_share_has_room_for(alice, bob):
    job = await alice.register(max_running_per_submitter=2)
    a = await submit_many(alice, 4)
    b = await submit_many(bob, 3)
    got = await claim_ids(alice, job["worker_id"], max_tasks=10)
    assert set(got) == {*a[:2], *b[:2]}


async def test_a_room_limit_holds_back_a_rooms_tasks_of_a_shared_job(admin, alice):
    job = await admin.register(room="@global", name="Shared", max_running_per_room=1)
    name = "@global:modifiers:Shared"
    in_room1 = await submit_many(alice, 2, job=name)
    in_room2 = [(await admin.submit(name, room="room2"))["id"]]
    got = await claim_ids(admin, job["worker_id"], max_tasks=5)
    assert set(got) == {in_room1[0], in_room2[0]}
    held = await place(alice, in_room1[1])
    assert held["held_back"] == {"scope": "room", "running": 1, "limit": 1}


async def test_a_limit_set_later_holds_the_tasks_already_queued(alice):
    job = await alice.register()
    a = await submit_many(alice, 3)
    await alice.register(worker_id=job["worker_id"], max_running_per_submitter=1)
    assert await claim_ids(alice, job["worker_id"], max_tasks=3) == a[:1]
    assert (await place(alice, a[1]))["held_back"]["limit"] == 1


async def test_fair_order_and_limits_together(alice, bob):
    job = await alice.register(claim_order="fair-by-submitter", max_running_per_submitter=1)
    a = await submit_many(alice, 3)
    b = await submit_many(bob, 3)
    assert await claim_ids(alice, job["worker_id"], max_tasks=6) == [a[0], b[0]]


async def test_the_place_of_an_unlimited_task_and_of_none(alice):
    await alice.register(claim_order="fair-by-submitter")
    (task_id,) = await submit_many(alice, 1)
    shown = await place(alice, task_id)
    assert shown == {
        "status": "pending",
        "queue_position": 1,
        "claim_order": "fair-by-submitter",
        "max_running_per_submitter": None,
        "max_running_per_room": None,
        "held_back": None,
    }
    missing = await alice.get("/tasks/00000000-0000-7000-8000-000000000000/place")
    assert_problem(missing, 404, "task-not-found")


async def test_concurrent_claims_never_pass_a_limit(alice, bob, admin):
    """16 claimers at once, over and over: each submitter ends with exactly its limit of
    tasks claimed (nothing ends, so any claim past the limit would still be there)."""
    job = await alice.register(max_running_per_submitter=2)
    workers = [job["worker_id"]]
    for _ in range(3):
        workers.append((await alice.register(worker_id=None))["worker_id"])
    submitted = {
        "alice": await submit_many(alice, 12),
        "bob": await submit_many(bob, 12),
        "admin": await submit_many(admin, 12),
    }

    async def claimer(n: int) -> list[str]:
        got: list[str] = []
        for _ in range(4):
            got += await claim_ids(alice, workers[n % len(workers)], max_tasks=2)
        return got

    claimed = [task for got in await asyncio.gather(*map(claimer, range(16))) for task in got]
    assert len(claimed) == len(set(claimed))  # each task handed out once
    for user, tasks in submitted.items():
        assert len(set(tasks) & set(claimed)) == 2, user
