"""Workers: creation, heartbeat, listing, deletion and who may do what."""

import asyncio
from datetime import datetime

import pytest

from taskhub.services import jobs as job_service
from tests.support.api import JOB, SCHEMA, assert_problem


async def test_create_worker(alice):
    response = await alice.post("/workers")
    assert response.status_code == 201
    worker = response.json()
    assert set(worker) == {"id", "last_heartbeat", "worker_timeout_seconds", "slots"}
    assert worker["worker_timeout_seconds"] == 60
    assert datetime.fromisoformat(worker["last_heartbeat"]).utcoffset() is not None


async def test_every_worker_gets_a_fresh_id(alice):
    ids = {(await alice.post("/workers")).json()["id"] for _ in range(3)}
    assert len(ids) == 3


async def test_heartbeat_moves_last_heartbeat_forward(alice):
    worker = (await alice.post("/workers")).json()
    beat = await alice.patch(f"/workers/{worker['id']}")
    assert beat.status_code == 200
    assert beat.json()["id"] == worker["id"]
    assert beat.json()["last_heartbeat"] > worker["last_heartbeat"]


async def test_heartbeat_authorisation(alice, bob, admin):
    worker = (await alice.post("/workers")).json()
    assert_problem(await bob.patch(f"/workers/{worker['id']}"), 403, "forbidden")
    assert (await admin.patch(f"/workers/{worker['id']}")).status_code == 200
    unknown = "00000000-0000-0000-0000-000000000000"
    assert_problem(await alice.patch(f"/workers/{unknown}"), 404, "worker-not-found")


async def test_list_workers_with_job_counts(alice):
    job = await alice.register()
    await alice.register(name="Second", worker_id=job["worker_id"])
    await alice.post("/workers")
    page = (await alice.get("/workers")).json()
    assert page["total"] == 2
    counts = {w["id"]: w["job_count"] for w in page["items"]}
    assert counts[job["worker_id"]] == 2
    assert sorted(counts.values()) == [0, 2]


async def test_delete_worker_fails_its_active_tasks_only(alice):
    job = await alice.register()
    running, claimed, waiting = [await alice.submit(JOB) for _ in range(3)]
    await alice.claim(job["worker_id"])
    await alice.transition(running["id"], "running")
    await alice.claim(job["worker_id"])
    assert (await alice.delete(f"/workers/{job['worker_id']}")).status_code == 204
    for task in (running, claimed):
        after = await alice.task(task["id"])
        assert after["status"] == "failed"
        assert after["error"] == "Worker disconnected"
        assert after["completed_at"] is not None
    assert (await alice.task(waiting["id"]))["status"] == "pending"
    assert (await alice.get("/workers")).json()["total"] == 0
    job_now = (await alice.get(f"/rooms/room1/jobs/{JOB}")).json()
    assert job_now["workers"] == []


async def test_delete_worker_authorisation(alice, bob):
    worker = (await alice.post("/workers")).json()
    assert_problem(await bob.delete(f"/workers/{worker['id']}"), 403, "forbidden")
    assert (await alice.delete(f"/workers/{worker['id']}")).status_code == 204
    assert_problem(await alice.delete(f"/workers/{worker['id']}"), 404, "worker-not-found")


async def test_heartbeat_reports_the_workers_recently_cancelled_tasks(alice, bob):
    job = await alice.register()
    cancelled, kept = [await bob.submit(JOB) for _ in range(2)]
    await alice.post("/tasks/claim", json={"worker_id": job["worker_id"], "max_tasks": 2})
    await bob.transition(cancelled["id"], "cancelled")
    beat = (await alice.patch(f"/workers/{job['worker_id']}")).json()
    assert beat["cancelled_tasks"] == [cancelled["id"]]
    assert (await alice.task(kept["id"]))["status"] == "claimed"


async def test_deleting_a_worker_of_many_jobs_soft_deletes_each_orphan(alice, monkeypatch):
    """Its jobs are soft-deleted a chunk of ids per statement (here 2): every orphan goes,
    a job with a pending task or another worker stays."""
    monkeypatch.setattr(job_service, "IDS_PER_STATEMENT", 2)
    worker_id = (await alice.register(name="J0"))["worker_id"]
    for i in range(1, 6):
        await alice.register(name=f"J{i}", worker_id=worker_id)
    await alice.submit("room1:modifiers:J1")  # pending: J1 stays
    await alice.register(name="J2")  # another worker of its own: J2 stays
    assert (await alice.delete(f"/workers/{worker_id}")).status_code == 204
    live = {job["full_name"] for job in await alice.room_jobs()}
    assert live == {"room1:modifiers:J1", "room1:modifiers:J2"}


@pytest.mark.postgres_only
async def test_removal_racing_registrations_and_keyed_claims_has_no_deadlock(alice, admin):
    """A worker's removal takes its row first; registrations (which link jobs to it) and
    keyed claims wait for it or it for them, never both: no deadlock (500), and no task is
    left claimed by a worker that is gone."""
    body = {"category": "modifiers", "name": "Rotate", "schema": SCHEMA}
    for round_ in range(8):
        worker_id = (await alice.register(name="Rotate"))["worker_id"]
        await alice.submit("room1:modifiers:Rotate")
        register = {**body, "worker_id": worker_id}
        claim = alice.post(
            "/tasks/claim",
            json={"worker_id": worker_id},
            headers={"Idempotency-Key": f"round-{round_}"},
        )
        *registered, claimed, deleted = await asyncio.gather(
            alice.put("/rooms/room1/jobs", json=register),
            alice.put("/rooms/room1/jobs", json=register),
            claim,
            alice.delete(f"/workers/{worker_id}"),
        )
        assert deleted.status_code == 204, deleted.text
        for response in (*registered, claimed):
            assert response.status_code in (200, 201, 404), response.text
        held = (await admin.get("/rooms/room1/tasks?status=claimed&limit=500")).json()
        assert worker_id not in {task["worker_id"] for task in held["items"]}, round_
        assert (await alice.patch(f"/workers/{worker_id}")).status_code == 404
