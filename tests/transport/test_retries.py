"""Retries: a task whose attempt failed with ``retry`` or whose worker vanished goes back to
pending, due after the backoff, until its attempts run out; each attempt has its own
claim token."""

from datetime import datetime, timedelta

import pytest

from taskhub.clock import utcnow
from taskhub.realtime.event_payloads import event_payload
from taskhub.rules.events import Event, TaskAvailable, TaskStatusChanged
from taskhub.rules.states import TaskStatus
from taskhub.settings import Settings
from tests.support.api import JOB, assert_problem
from tests.support.waiting import eventually

# Long enough that the claim right after a failure comes before the retry is due, even on a
# loaded machine (0.2 s was not, once in CI).
BACKOFF = 0.6


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(
        database_url=database_url,
        retry_backoff_seconds=BACKOFF,
        retry_backoff_max_seconds=BACKOFF,
        sweeper_enabled=False,
    )


async def run_and_fail(alice, worker_id: str, **extra) -> tuple[dict, dict]:
    """Claim, start and fail (with ``extra``) the next task; returns (claimed, after)."""
    claimed = await alice.claim(worker_id)
    assert claimed is not None
    token = claimed["claim_token"]
    assert (await alice.transition(claimed["id"], "running", claim_token=token)).status_code == 200
    response = await alice.transition(
        claimed["id"], "failed", claim_token=token, error="boom", **extra
    )
    assert response.status_code == 200, response.text
    return claimed, response.json()


async def claim_when_due(alice, worker_id: str) -> dict:
    return await eventually(lambda: alice.claim(worker_id), 5, "a task due to claim", 0.05)


def announcements(events: list[Event], task_id: str) -> int:
    return sum(isinstance(e, TaskAvailable) and e.task_id == task_id for e in events)


async def until_due(recorder, task_id: str) -> None:
    """Until the retry of ``task_id`` is announced (``task_available``): it is due now."""
    before = announcements(recorder.events, task_id)
    await recorder.wait_for(lambda events: announcements(events, task_id) > before)


async def test_by_default_a_task_gets_one_attempt(alice, job):
    task = await alice.submit(JOB)
    assert (task["attempt"], task["max_attempts"]) == (0, 1)
    _, after = await run_and_fail(alice, job["worker_id"], retry=True)
    assert (after["status"], after["error"], after["attempt"]) == ("failed", "boom", 1)


async def test_a_failed_attempt_with_retry_goes_back_to_pending_until_attempts_run_out(
    alice, job, recorder
):
    task = await alice.submit(JOB, max_attempts=3)
    tokens = []
    for attempt in (1, 2):
        claimed, after = await run_and_fail(alice, job["worker_id"], retry=True)
        tokens.append(claimed["claim_token"])
        assert claimed["id"] == task["id"] and claimed["attempt"] == attempt
        assert after["status"] == "pending" and after["attempt"] == attempt
        assert after["worker_id"] is None and after["error"] == "boom"
        run_at = datetime.fromisoformat(after["run_at"])
        assert run_at > datetime.fromisoformat(after["created_at"])
        # Not claimable before it is due, and then claimable again.
        assert await alice.claim(job["worker_id"]) is None
        assert after["queue_position"] == 1
        await until_due(recorder, task["id"])
    claimed = await alice.claim(job["worker_id"])
    assert claimed["attempt"] == 3 and claimed["error"] is None
    tokens.append(claimed["claim_token"])
    assert len(set(tokens)) == 3  # a new claim token per attempt
    await alice.transition(task["id"], "running", claim_token=claimed["claim_token"])
    final = await alice.transition(
        task["id"], "failed", claim_token=claimed["claim_token"], error="again", retry=True
    )
    assert (final.json()["status"], final.json()["attempt"]) == ("failed", 3)


async def test_an_earlier_attempts_token_is_stale(alice, job):
    await alice.submit(JOB, max_attempts=2)
    first, _ = await run_and_fail(alice, job["worker_id"], retry=True)
    second = await claim_when_due(alice, job["worker_id"])
    late = await alice.transition(first["id"], "completed", claim_token=first["claim_token"])
    assert_problem(late, 409, "stale-claim")
    assert (await alice.task(first["id"]))["status"] == "claimed"
    ok = await alice.transition(second["id"], "running", claim_token=second["claim_token"])
    assert ok.status_code == 200


async def test_a_job_sets_the_default_and_a_submit_overrides_it(alice):
    response = await alice.put(
        "/rooms/room1/jobs",
        json={"category": "modifiers", "name": "Rotate", "schema": {}, "max_attempts": 4},
    )
    assert response.json()["max_attempts"] == 4
    assert (await alice.submit(JOB))["max_attempts"] == 4
    assert (await alice.submit(JOB, max_attempts=2))["max_attempts"] == 2


@pytest.mark.parametrize(
    "body",
    [
        {"status": "running", "retry": True},
        {"status": "completed", "retry": True},
        {"status": "failed", "retry": "yes please"},
    ],
)
async def test_retry_goes_only_with_failed(alice, job, body):
    task = await alice.submit(JOB, max_attempts=3)
    await alice.claim(job["worker_id"])
    response = await alice.patch(f"/tasks/{task['id']}", json=body)
    assert_problem(response, 422, "validation-error")
    assert (await alice.task(task["id"]))["status"] == "claimed"


@pytest.mark.parametrize("value", [0, 101, 2.5, "many"])
async def test_max_attempts_out_of_range_is_422_and_stores_nothing(alice, job, value):
    response = await alice.post(
        f"/rooms/room1/tasks/{JOB}", json={"payload": {}, "max_attempts": value}
    )
    assert_problem(response, 422, "validation-error")
    assert (await alice.get("/rooms/room1/tasks")).json()["total"] == 0


async def test_a_vanished_workers_tasks_are_retried_while_attempts_remain(alice, job):
    retried = await alice.submit(JOB, max_attempts=2)
    exhausted = await alice.submit(JOB)
    claimed = await alice.claim(job["worker_id"], max_tasks=2)
    assert claimed is not None
    await alice.transition(retried["id"], "running")
    replacement = (await alice.post("/workers")).json()["id"]
    await alice.register(worker_id=replacement)

    assert (await alice.delete(f"/workers/{job['worker_id']}")).status_code == 204

    back = await alice.task(retried["id"])
    assert (back["status"], back["error"], back["attempt"]) == ("pending", "Worker disconnected", 1)
    gone = await alice.task(exhausted["id"])
    assert (gone["status"], gone["error"]) == ("failed", "Worker disconnected")
    again = await claim_when_due(alice, replacement)
    assert again["id"] == retried["id"] and again["attempt"] == 2


async def test_the_retry_is_announced_when_it_comes_due(alice, job, published, recorder):
    task = await alice.submit(JOB, max_attempts=2)
    await run_and_fail(alice, job["worker_id"], retry=True)
    returned = [
        e for e in published if isinstance(e, TaskStatusChanged) and e.task.status == "pending"
    ]
    assert returned[-1].previous == TaskStatus.RUNNING
    before = sum(isinstance(e, TaskAvailable) for e in published)

    await recorder.wait_for(
        lambda events: sum(isinstance(e, TaskAvailable) for e in events) > before
    )
    announced = [e for e in published if isinstance(e, TaskAvailable)][-1]
    assert event_payload(announced) == {"job_name": JOB, "room_id": "room1", "task_id": task["id"]}
    assert await alice.claim(job["worker_id"]) is not None


async def test_the_retry_is_due_after_the_jittered_backoff(alice, job):
    await alice.submit(JOB, max_attempts=2)
    claimed = await alice.claim(job["worker_id"])
    before = utcnow()
    response = await alice.transition(
        claimed["id"], "failed", claim_token=claimed["claim_token"], retry=True
    )
    after = utcnow()
    run_at = datetime.fromisoformat(response.json()["run_at"])
    assert before + timedelta(seconds=BACKOFF * 0.8) <= run_at
    assert run_at <= after + timedelta(seconds=BACKOFF * 1.2)


async def test_a_claim_key_repeated_after_its_task_was_retried_claims_with_a_new_token(
    alice, job, recorder
):
    """The key answers its tasks only while they are claimed: once the attempt failed with
    ``retry``, the same key claims the next attempt afresh, with a token of its own, so
    the first attempt's token stays stale (fencing holds)."""
    task = await alice.submit(JOB, max_attempts=3)

    async def keyed_claim() -> dict | None:
        headers = {"Idempotency-Key": "same-key"}
        response = await alice.post(
            "/tasks/claim", json={"worker_id": job["worker_id"]}, headers=headers
        )
        assert response.status_code == 200, response.text
        return response.json()["task"]

    first = await keyed_claim()
    token = {"claim_token": first["claim_token"]}
    await alice.transition(task["id"], "running", **token)
    await alice.transition(task["id"], "failed", retry=True, **token)
    await until_due(recorder, task["id"])
    again = await keyed_claim()
    assert again is not None and (again["id"], again["attempt"]) == (task["id"], 2)
    assert again["claim_token"] != first["claim_token"]
    assert_problem(await alice.transition(task["id"], "running", **token), 409, "stale-claim")
