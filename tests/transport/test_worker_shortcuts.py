"""The optional worker shortcuts (docs/protocol.md, "Worker shortcuts"): a claim that also
starts its tasks (``"start": true``), and a terminal PATCH that then claims the worker's
next task(s) (``claim_next``). Each keeps the guards of the requests it stands for."""

import asyncio
from datetime import timedelta

import pytest

from taskhub.clock import utcnow
from taskhub.rules.events import TaskCancelled, TaskStatusChanged
from taskhub.rules.retries import RetryPolicy
from taskhub.services import sweeps
from tests.support.api import JOB, assert_problem
from tests.support.events import statuses
from tests.support.waiting import eventually


async def claim_started(client, worker_id: str, max_tasks: int = 1, **extra) -> dict:
    body = {"worker_id": worker_id, "max_tasks": max_tasks, "start": True, **extra}
    response = await client.post("/tasks/claim", json=body)
    assert response.status_code == 200, response.text
    return response.json()


async def test_a_claim_with_start_hands_out_running_tasks(alice, job, published):
    first = await alice.submit(JOB)
    second = await alice.submit(JOB)
    answer = await claim_started(alice, job["worker_id"], max_tasks=5)
    assert answer["started"] is True
    tasks = answer["tasks"]
    assert [t["id"] for t in tasks] == [first["id"], second["id"]]
    assert answer["task"] == tasks[0]
    assert len({t["claim_token"] for t in tasks}) == 1  # one claim, one token
    for task in tasks:
        assert task["status"] == "running" and task["started_at"] is not None
        assert task["worker_id"] == job["worker_id"] and task["attempt"] == 1
        # What a read says is what the claim answered.
        assert (await alice.task(task["id"]))["status"] == "running"
        # The page sees the task go from pending to running, once.
        assert statuses(published, task["id"]) == ["pending", "running"]
        changed = [
            e
            for e in published
            if isinstance(e, TaskStatusChanged) and str(e.task.id) == task["id"]
        ]
        assert changed[-1].previous == "pending"


async def test_a_started_task_completes_with_its_claim_token(alice, job):
    await alice.submit(JOB)
    task = (await claim_started(alice, job["worker_id"]))["task"]
    done = await alice.transition(task["id"], "completed", claim_token=task["claim_token"])
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "completed"
    # A second PATCH running is refused (the task already runs), as after any start.
    again = await alice.transition(task["id"], "running", claim_token=task["claim_token"])
    assert again.status_code == 409


async def test_without_start_a_claim_answers_as_before(alice, job):
    await alice.submit(JOB)
    response = await alice.post("/tasks/claim", json={"worker_id": job["worker_id"]})
    assert response.status_code == 200
    assert "started" not in response.json() and "tasks" not in response.json()
    assert response.json()["task"]["status"] == "claimed"


async def test_a_keyed_claim_with_start_repeated_answers_the_same_tasks(alice, job):
    for _ in range(3):
        await alice.submit(JOB)
    headers = {"Idempotency-Key": "claim-start-1"}
    body = {"worker_id": job["worker_id"], "max_tasks": 2, "start": True}
    first = await alice.post("/tasks/claim", json=body, headers=headers)
    again = await alice.post("/tasks/claim", json=body, headers=headers)
    assert first.status_code == again.status_code == 200
    ids = [t["id"] for t in first.json()["tasks"]]
    assert len(ids) == 2 and [t["id"] for t in again.json()["tasks"]] == ids
    assert all(t["status"] == "running" for t in again.json()["tasks"])


async def test_a_claim_with_start_for_another_users_worker_is_forbidden(alice, bob, job):
    task = await alice.submit(JOB)
    response = await bob.post(
        "/tasks/claim", json={"worker_id": job["worker_id"], "max_tasks": 1, "start": True}
    )
    assert_problem(response, 403, "forbidden")
    assert (await alice.task(task["id"]))["status"] == "pending"


async def test_a_started_task_cancelled_tells_its_worker(alice, job, published):
    await alice.submit(JOB)
    task = (await claim_started(alice, job["worker_id"]))["task"]
    cancel = await alice.transition(task["id"], "cancelled")
    assert cancel.status_code == 200, cancel.text
    assert any(isinstance(e, TaskCancelled) and e.task_id == task["id"] for e in published)
    beat = await alice.patch(f"/workers/{job['worker_id']}", json={"tasks": [task["id"]]})
    assert beat.json()["cancelled_tasks"] == [task["id"]]
    # The worker's late outcome is refused: the task has moved on.
    late = await alice.transition(task["id"], "completed", claim_token=task["claim_token"])
    assert late.status_code == 409


async def test_a_batch_of_started_tasks_cancelled_one_by_one(alice, job):
    for _ in range(3):
        await alice.submit(JOB)
    tasks = (await claim_started(alice, job["worker_id"], max_tasks=3))["tasks"]
    cancelled = tasks[1]
    assert (await alice.transition(cancelled["id"], "cancelled")).status_code == 200
    for task in (tasks[0], tasks[2]):  # the others of the batch go on
        done = await alice.transition(task["id"], "completed", claim_token=task["claim_token"])
        assert done.status_code == 200, done.text
    stale = await alice.transition(
        cancelled["id"], "completed", claim_token=cancelled["claim_token"]
    )
    assert stale.status_code == 409


@pytest.mark.parametrize("max_attempts", [1, 2])
async def test_a_started_task_past_its_lease_is_retried_per_max_attempts(
    alice, job, app, max_attempts
):
    submitted = await alice.submit(JOB, max_attempts=max_attempts)
    task = (await claim_started(alice, job["worker_id"]))["task"]
    later = utcnow() + timedelta(seconds=app.hub.settings.task_lease_seconds + 1)
    count, _ = await sweeps.end_expired_leases(app.hub.db, later, RetryPolicy(0, jitter=0))
    assert count == 1
    after = await alice.task(submitted["id"])
    if max_attempts == 1:
        assert (after["status"], after["error"]) == ("failed", "Lease expired")
    else:
        assert after["status"] == "pending" and after["worker_id"] is None
    # The dead worker's outcome arrives late: refused, whatever became of the task.
    late = await alice.transition(task["id"], "completed", claim_token=task["claim_token"])
    assert late.status_code == 409


# -- claim_next ------------------------------------------------------------------------


def claim_next(worker_id: str, max_tasks: int = 1, start: bool = True) -> dict:
    return {"worker_id": worker_id, "max_tasks": max_tasks, "start": start}


async def test_a_completion_claims_the_workers_next_tasks(alice, job, published):
    await alice.submit(JOB)
    later = [await alice.submit(JOB) for _ in range(2)]
    task = (await claim_started(alice, job["worker_id"]))["task"]
    response = await alice.transition(
        task["id"],
        "completed",
        claim_token=task["claim_token"],
        result={"ok": 1},
        claim_next=claim_next(job["worker_id"], 5),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "completed" and body["result"] == {"ok": 1}
    assert body["next_started"] is True
    assert [t["id"] for t in body["next"]] == [t["id"] for t in later]
    assert all(t["status"] == "running" and t["claim_token"] for t in body["next"])
    assert statuses(published, task["id"])[-1] == "completed"
    for nxt in later:
        assert statuses(published, nxt["id"]) == ["pending", "running"]


async def test_claim_next_without_start_claims(alice, job):
    await alice.submit(JOB)
    nxt = await alice.submit(JOB)
    task = (await claim_started(alice, job["worker_id"]))["task"]
    response = await alice.transition(
        task["id"],
        "failed",
        error="boom",
        claim_token=task["claim_token"],
        claim_next=claim_next(job["worker_id"], start=False),
    )
    body = response.json()
    assert body["status"] == "failed" and "next_started" not in body
    assert [(t["id"], t["status"]) for t in body["next"]] == [(nxt["id"], "claimed")]


async def test_claim_next_on_an_empty_queue_answers_an_empty_list(alice, job):
    await alice.submit(JOB)
    task = (await claim_started(alice, job["worker_id"]))["task"]
    response = await alice.transition(
        task["id"],
        "completed",
        claim_token=task["claim_token"],
        claim_next=claim_next(job["worker_id"]),
    )
    assert response.json()["next"] == [] and "next_problem" not in response.json()


async def test_a_refused_terminal_write_claims_nothing(alice, job, published):
    await alice.submit(JOB)
    waiting = await alice.submit(JOB)
    task = (await claim_started(alice, job["worker_id"]))["task"]
    count = len(published)
    stale = await alice.transition(
        task["id"],
        "completed",
        claim_token="00000000-0000-4000-8000-000000000000",  # an earlier attempt's, say
        claim_next=claim_next(job["worker_id"]),
    )
    assert_problem(stale, 409, "stale-claim")
    assert (await alice.task(waiting["id"]))["status"] == "pending"
    assert (await alice.task(task["id"]))["status"] == "running"
    assert len(published) == count


async def test_a_refused_transition_claims_nothing(alice, job):
    await alice.submit(JOB)
    waiting = await alice.submit(JOB)
    task = (await claim_started(alice, job["worker_id"]))["task"]
    token = task["claim_token"]
    assert (await alice.transition(task["id"], "completed", claim_token=token)).status_code == 200
    again = await alice.transition(
        task["id"], "failed", claim_token=token, claim_next=claim_next(job["worker_id"])
    )
    assert again.status_code == 409
    assert (await alice.task(waiting["id"]))["status"] == "pending"


async def test_claim_next_for_another_users_worker_is_refused_beside_the_write(alice, bob, job):
    bobs_worker = (await bob.post("/workers")).json()["id"]
    await bob.register(room="room1", worker_id=bobs_worker)
    await alice.submit(JOB)
    waiting = await alice.submit(JOB)
    task = (await claim_started(alice, job["worker_id"]))["task"]
    response = await alice.transition(
        task["id"],
        "completed",
        claim_token=task["claim_token"],
        claim_next=claim_next(bobs_worker),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "completed"  # the write stands: it had its own guards
    assert body["next"] == [] and body["next_problem"]["status"] == 403
    assert body["next_problem"]["type"] == "/v1/problems/forbidden"
    assert (await alice.task(waiting["id"]))["status"] == "pending"


async def test_claim_next_for_an_unknown_worker_says_so(alice, job):
    await alice.submit(JOB)
    task = (await claim_started(alice, job["worker_id"]))["task"]
    unknown = "00000000-0000-4000-8000-000000000000"
    response = await alice.transition(
        task["id"], "completed", claim_token=task["claim_token"], claim_next=claim_next(unknown)
    )
    assert response.status_code == 200
    assert response.json()["next_problem"]["status"] == 404


@pytest.mark.parametrize(
    "body",
    [
        {"status": "running", "claim_next": {"worker_id": "W"}},
        {"progress": 0.5, "claim_next": {"worker_id": "W"}},
        {"status": "completed", "claim_next": {"max_tasks": 1}},
        {"status": "completed", "claim_next": {"worker_id": "not-a-uuid"}},
        {"status": "completed", "claim_next": {"worker_id": "W", "max_tasks": 0}},
    ],
)
async def test_claim_next_goes_with_a_terminal_status_and_a_worker(alice, job, body):
    await alice.submit(JOB)
    task = (await claim_started(alice, job["worker_id"]))["task"]
    ask = {k: job["worker_id"] if v == "W" else v for k, v in body["claim_next"].items()}
    body = {**body, "claim_next": ask, "claim_token": task["claim_token"]}
    response = await alice.patch(f"/tasks/{task['id']}", json=body)
    assert_problem(response, 422, "validation-error")
    assert (await alice.task(task["id"]))["status"] == "running"


async def test_a_long_poll_wakes_when_a_started_task_ends_with_claim_next(alice, job, app):
    first = await alice.submit(JOB)
    await alice.submit(JOB)
    task = (await claim_started(alice, job["worker_id"]))["task"]
    poll = asyncio.ensure_future(alice.get(f"/tasks/{first['id']}", headers={"Prefer": "wait=10"}))
    # Once the long-poll waits on the task, end it.
    await eventually(lambda: app.hub.waiters.count == 1, 5, "the long-poll to wait")
    response = await alice.transition(
        task["id"],
        "completed",
        claim_token=task["claim_token"],
        claim_next=claim_next(job["worker_id"]),
    )
    assert len(response.json()["next"]) == 1
    answer = await poll
    assert answer.status_code == 200 and answer.json()["status"] == "completed"
