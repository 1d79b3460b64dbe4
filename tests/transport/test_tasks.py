"""Task submission, claiming, transitions, authorisation and listing."""

import asyncio
from datetime import datetime, timedelta
from uuid import UUID, uuid4

import pytest
from sqlalchemy import text

from taskhub.clock import utcnow
from taskhub.store.claims import claim_statement
from tests.support.api import JOB, SCHEMA, assert_problem
from tests.support.waiting import eventually


async def test_submit_returns_202_with_location(alice, job):
    response = await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {"angle": 3}})
    assert response.status_code == 202
    task = response.json()
    assert response.headers["location"] == f"/v1/joblib/tasks/{task['id']}"
    assert response.headers["retry-after"] == "1"
    assert task["status"] == "pending"
    assert task["payload"] == {"angle": 3}
    assert task["job_name"] == JOB and task["room_id"] == "room1"
    assert task["queue_position"] == 1
    for key in ("started_at", "completed_at", "worker_id", "error"):
        assert task[key] is None


async def test_timestamps_carry_an_offset(alice, job):
    task = await alice.submit(JOB)
    created = datetime.fromisoformat(task["created_at"])
    assert created.utcoffset() is not None and created.utcoffset().total_seconds() == 0


async def test_submit_to_unknown_or_invisible_job_is_404(alice):
    await alice.register(room="room2")
    for name in ("room1:modifiers:Nope", "room2:modifiers:Rotate", "bad"):
        response = await alice.post(f"/rooms/room1/tasks/{name}", json={"payload": {}})
        assert_problem(response, 404, "job-not-found")
    assert (await alice.get("/rooms/room1/tasks")).json()["total"] == 0


@pytest.mark.parametrize("payload", [[1], "angle", 3, None, True])
async def test_a_payload_that_is_not_a_json_object_is_422(alice, job, payload):
    response = await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": payload})
    problem = assert_problem(response, 422, "validation-error")
    assert problem["errors"] == [
        {"loc": ["body", "payload"], "msg": "Input should be a valid dictionary"}
    ]
    assert (await alice.get("/rooms/room1/tasks")).json()["total"] == 0


@pytest.mark.parametrize("schema", [[1], "object", None])
async def test_a_job_schema_that_is_not_a_json_object_is_422(alice, schema):
    body = {"category": "modifiers", "name": "Odd", "schema": schema}
    problem = assert_problem(
        await alice.put("/rooms/room1/jobs", json=body), 422, "validation-error"
    )
    assert problem["errors"] == [
        {"loc": ["body", "schema"], "msg": "Input should be a valid dictionary"}
    ]
    assert await alice.room_jobs() == []


async def test_submit_into_invalid_room_is_400(alice, job):
    response = await alice.post(f"/rooms/a@b/tasks/{JOB}", json={"payload": {}})
    assert_problem(response, 400, "invalid-room-id")


async def test_global_job_accepts_tasks_from_any_room(alice, admin):
    await admin.register(room="@global", name="Shared")
    task = await alice.submit("@global:modifiers:Shared", room="roomX")
    assert task["room_id"] == "roomX"


async def test_internal_job_without_executor_is_503_and_leaves_nothing(alice, admin):
    await admin.register(room="@internal", name="Inside")
    response = await alice.post(
        "/rooms/room1/tasks/@internal:modifiers:Inside", json={"payload": {}}
    )
    assert_problem(response, 503, "internal-job-not-configured")
    assert (await alice.get("/rooms/room1/tasks")).json()["total"] == 0


async def test_queue_positions_count_from_the_oldest_pending_task(alice, job):
    tasks = [await alice.submit(JOB) for _ in range(3)]
    assert [t["queue_position"] for t in tasks] == [1, 2, 3]
    await alice.claim(job["worker_id"])
    assert (await alice.task(tasks[0]["id"]))["queue_position"] is None
    assert (await alice.task(tasks[1]["id"]))["queue_position"] == 1
    assert (await alice.task(tasks[2]["id"]))["queue_position"] == 2


async def test_claim_hands_out_the_oldest_task_with_a_token(alice, job):
    first = await alice.submit(JOB)
    await alice.submit(JOB)
    claimed = await alice.claim(job["worker_id"])
    assert claimed["id"] == first["id"]
    assert claimed["status"] == "claimed"
    assert claimed["worker_id"] == job["worker_id"]
    assert claimed["claim_token"]
    assert claimed["attempt"] == 1


async def test_claim_with_nothing_to_do_returns_null(alice, job):
    assert await alice.claim(job["worker_id"]) is None


async def test_claim_covers_all_jobs_of_the_worker_whatever_the_room(alice, admin):
    shared = await admin.register(room="@global", name="Shared")
    await admin.register(room="@global", name="Other", worker_id=shared["worker_id"])
    one = await alice.submit("@global:modifiers:Shared", room="roomA")
    two = await alice.submit("@global:modifiers:Other", room="roomB")
    got = [await admin.claim(shared["worker_id"]) for _ in range(3)]
    assert [t and t["id"] for t in got] == [one["id"], two["id"], None]


async def test_a_worker_only_gets_tasks_of_its_jobs(alice, job):
    other = await alice.register(name="Other")
    await alice.submit("room1:modifiers:Other")
    assert await alice.claim(job["worker_id"]) is None
    assert (await alice.claim(other["worker_id"]))["job_name"] == "room1:modifiers:Other"


async def test_batch_claim(alice, job):
    submitted = [await alice.submit(JOB) for _ in range(5)]
    response = await alice.post(
        "/tasks/claim", json={"worker_id": job["worker_id"], "max_tasks": 3}
    )
    body = response.json()
    assert [t["id"] for t in body["tasks"]] == [t["id"] for t in submitted[:3]]
    assert body["task"]["id"] == submitted[0]["id"]
    empty = await alice.post("/tasks/claim", json={"worker_id": job["worker_id"], "max_tasks": 9})
    assert len(empty.json()["tasks"]) == 2


async def test_claim_for_unknown_or_foreign_worker(alice, bob, job):
    response = await alice.post(
        "/tasks/claim", json={"worker_id": "00000000-0000-0000-0000-000000000000"}
    )
    assert_problem(response, 404, "worker-not-found")
    await alice.submit(JOB)
    assert_problem(
        await bob.post("/tasks/claim", json={"worker_id": job["worker_id"]}), 403, "forbidden"
    )
    assert (await alice.get("/rooms/room1/tasks?status=pending")).json()["total"] == 1


async def _keyed_claim(client, worker_id: str, key: str, **extra):
    return await client.post(
        "/tasks/claim", json={"worker_id": worker_id, **extra}, headers={"Idempotency-Key": key}
    )


async def test_a_repeated_claim_key_answers_the_same_tasks_not_the_next(alice, job):
    first, second, third = [await alice.submit(JOB) for _ in range(3)]
    original = (await _keyed_claim(alice, job["worker_id"], "claim-1", max_tasks=2)).json()
    replay = await _keyed_claim(alice, job["worker_id"], "claim-1", max_tasks=2)
    assert replay.status_code == 200
    assert replay.json() == original
    assert [t["id"] for t in original["tasks"]] == [first["id"], second["id"]]
    assert (await alice.task(third["id"]))["status"] == "pending"
    # another key is another claim
    other = (await _keyed_claim(alice, job["worker_id"], "claim-2")).json()["task"]
    assert other["id"] == third["id"] and other["claim_token"] != original["task"]["claim_token"]


async def test_a_claim_key_replays_only_while_its_tasks_are_still_claimed(alice, job):
    started = await alice.submit(JOB)
    claimed = (await _keyed_claim(alice, job["worker_id"], "k")).json()["task"]
    response = await alice.transition(claimed["id"], "running", claim_token=claimed["claim_token"])
    assert response.status_code == 200
    assert (await _keyed_claim(alice, job["worker_id"], "k")).json()["task"] is None
    later = await alice.submit(JOB)
    again = (await _keyed_claim(alice, job["worker_id"], "k")).json()["task"]
    assert again["id"] == later["id"] != started["id"]


async def test_claims_sent_at_once_with_one_key_claim_once_and_answer_alike(alice, job):
    """The SDK's case: a claim timed out at the client is repeated while the first is still
    being answered. They take their turns: one claims, the others answer its tasks."""
    for _ in range(3):
        await alice.submit(JOB)
    answers = await asyncio.gather(
        *(_keyed_claim(alice, job["worker_id"], "once", max_tasks=2) for _ in range(6))
    )
    bodies = [answer.json() for answer in answers]
    assert all(body == bodies[0] for body in bodies)
    assert len(bodies[0]["tasks"]) == 2
    assert (await alice.get("/rooms/room1/tasks?status=pending")).json()["total"] == 1


async def test_a_claim_key_is_no_way_into_another_users_claims(alice, bob, job):
    await alice.submit(JOB)
    assert (await _keyed_claim(alice, job["worker_id"], "k")).json()["task"]
    assert_problem(await _keyed_claim(bob, job["worker_id"], "k"), 403, "forbidden")
    unknown = "00000000-0000-0000-0000-000000000000"
    assert_problem(await _keyed_claim(alice, unknown, "k"), 404, "worker-not-found")


async def test_an_invalid_claim_key_is_422_and_claims_nothing(alice, job):
    await alice.submit(JOB)
    response = await _keyed_claim(alice, job["worker_id"], "with space")
    assert_problem(response, 422, "validation-error")
    assert (await alice.get("/rooms/room1/tasks?status=pending")).json()["total"] == 1


async def test_every_change_of_a_task_counts_up_its_version(alice, job):
    submitted = await alice.submit(JOB)
    claimed = await alice.claim(job["worker_id"])
    token = {"claim_token": claimed["claim_token"]}
    running = (await alice.transition(claimed["id"], "running", **token)).json()
    progress = await alice.patch(f"/tasks/{claimed['id']}", json={"progress": 0.5, **token})
    refused = await alice.transition(claimed["id"], "claimed", **token)
    assert refused.status_code == 409
    done = (await alice.transition(claimed["id"], "completed", **token)).json()
    versions = [submitted, claimed, running, progress.json(), done]
    assert [task["version"] for task in versions] == [1, 2, 3, 4, 5]
    assert (await alice.task(claimed["id"]))["version"] == 5  # the refused PATCH wrote nothing


async def test_full_lifecycle_sets_timestamps(alice, job):
    task = await alice.submit(JOB)
    await alice.claim(job["worker_id"])
    running = (await alice.transition(task["id"], "running")).json()
    assert running["status"] == "running" and running["started_at"] is not None
    assert running["completed_at"] is None
    done = (await alice.transition(task["id"], "completed")).json()
    assert done["status"] == "completed" and done["completed_at"] is not None
    assert done["started_at"] == running["started_at"]


async def test_failure_stores_the_error(alice, job):
    task = await alice.submit(JOB)
    await alice.claim(job["worker_id"])
    await alice.transition(task["id"], "running")
    failed = (await alice.transition(task["id"], "failed", error="boom")).json()
    assert failed["status"] == "failed" and failed["error"] == "boom"


@pytest.mark.parametrize(
    ("error", "stored"),
    [
        ("bad\u0000byte", "bad\ufffdbyte"),
        ("", None),
        ("x" * 65_536, "x" * 65_536),
        ("y" * 70_000, "y" * (65_536 - 64) + f"\n… ({70_000 - 65_536 + 64} more characters cut)"),
    ],
    ids=["nul", "empty", "longest-kept", "too-long"],
)
async def test_a_failure_report_is_never_refused_for_its_text(alice, job, error, stored):
    """zndraw-joblib's worker does not send a refused failure report again (its task would
    stay running): a NUL becomes U+FFFD, an over-long text is cut, saying so, and an empty
    one is no error, as the reference keeps it."""
    task = await alice.submit(JOB)
    await alice.claim(job["worker_id"])
    await alice.transition(task["id"], "running")
    failed = await alice.transition(task["id"], "failed", error=error)
    assert failed.status_code == 200, failed.text
    assert (failed.json()["status"], failed.json()["error"]) == ("failed", stored)
    assert (await alice.task(task["id"]))["error"] == stored


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ([], "running"),
        ([], "completed"),
        ([], "pending"),
        ([], "claimed"),  # only a claim does that: it gives the task a worker and a token
        (["claimed"], "claimed"),
        (["claimed"], "completed"),
        (["claimed", "running"], "running"),
        (["claimed", "running", "completed"], "failed"),
        (["claimed", "running", "completed"], "cancelled"),
        (["claimed", "cancelled"], "running"),
    ],
)
async def test_invalid_transitions_are_409_and_change_nothing(admin, job, path, target):
    task = await admin.submit(JOB)
    for step in path:
        if step == "claimed":
            await admin.claim(job["worker_id"])
        else:
            assert (await admin.transition(task["id"], step)).status_code == 200
    before = await admin.task(task["id"])
    assert_problem(await admin.transition(task["id"], target), 409, "invalid-task-transition")
    assert await admin.task(task["id"]) == before


async def test_unknown_status_value_is_422(alice, job):
    task = await alice.submit(JOB)
    assert_problem(await alice.transition(task["id"], "done"), 422, "validation-error")


async def test_update_of_unknown_task_is_404(alice):
    response = await alice.transition("00000000-0000-0000-0000-000000000000", "running")
    assert_problem(response, 404, "task-not-found")


async def test_stale_claim_token_is_rejected_and_changes_nothing(alice, job):
    task = await alice.submit(JOB)
    claimed = await alice.claim(job["worker_id"])
    stale = "00000000-0000-0000-0000-000000000001"
    assert_problem(
        await alice.transition(task["id"], "running", claim_token=stale), 409, "stale-claim"
    )
    assert (await alice.task(task["id"]))["status"] == "claimed"
    ok = await alice.transition(task["id"], "running", claim_token=claimed["claim_token"])
    assert ok.status_code == 200


@pytest.mark.parametrize("result", [1, 2.5, -3, True, None, "x", [1]])
async def test_a_repeated_outcome_is_409_whatever_the_stored_result(alice, job, result):
    """The refusal of a second outcome reads the stored task: a result that is a bare
    number (which SQLite's ``JSON`` column keeps as a number, not as text) reads too."""
    task = await alice.submit(JOB)
    token = (await alice.claim(job["worker_id"], start=True))["claim_token"]
    done = await alice.transition(task["id"], "completed", result=result, claim_token=token)
    assert done.status_code == 200, done.text
    again = await alice.transition(task["id"], "completed", result=0, claim_token=token)
    assert_problem(again, 409, "invalid-task-transition")
    assert (await alice.task(task["id"]))["result"] == result


async def test_only_the_workers_owner_may_drive_its_task(alice, bob, admin, job):
    task = await alice.submit(JOB)
    claimed = await alice.claim(job["worker_id"])
    assert_problem(await bob.transition(task["id"], "running"), 403, "forbidden")
    # Knowing the claim token does not make bob the worker's owner.
    with_token = await bob.transition(task["id"], "running", claim_token=claimed["claim_token"])
    assert_problem(with_token, 403, "forbidden")
    assert (await alice.task(task["id"]))["status"] == "claimed"
    assert (await admin.transition(task["id"], "running")).status_code == 200


async def test_an_unclaimed_task_cannot_be_driven_by_others(alice, bob, job):
    task = await alice.submit(JOB)
    assert_problem(await bob.transition(task["id"], "cancelled"), 403, "forbidden")


async def test_submitter_may_cancel_their_task(alice, bob, job):
    task = await bob.submit(JOB)
    cancelled = await bob.transition(task["id"], "cancelled")
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["completed_at"] is not None


async def test_cancel_a_running_task(alice, bob, job):
    task = await bob.submit(JOB)
    await alice.claim(job["worker_id"])
    await alice.transition(task["id"], "running")
    assert (await bob.transition(task["id"], "cancelled")).json()["status"] == "cancelled"
    assert_problem(await alice.transition(task["id"], "completed"), 409, "invalid-task-transition")


async def test_terminal_transition_soft_deletes_an_orphaned_job(alice, job):
    task = await alice.submit(JOB)
    await alice.claim(job["worker_id"])
    await alice.transition(task["id"], "running")
    # The worker leaves while its task runs: the task fails, the job has no workers left.
    assert (await alice.delete(f"/workers/{job['worker_id']}")).status_code == 204
    assert (await alice.task(task["id"]))["error"] == "Worker disconnected"
    assert await alice.room_jobs() == []
    # History stays readable.
    assert (await alice.task(task["id"]))["job_name"] == JOB


async def test_pending_tasks_keep_an_orphaned_job_alive_until_they_end(alice, job):
    task = await alice.submit(JOB)
    await alice.delete(f"/workers/{job['worker_id']}")
    assert len(await alice.room_jobs()) == 1
    await alice.transition(task["id"], "cancelled")
    assert await alice.room_jobs() == []


async def test_a_job_is_orphaned_by_its_own_links_not_by_other_jobs(alice, job):
    other = await alice.register(name="Other")  # another job, with a worker of its own
    task = await alice.submit(JOB)
    await alice.delete(f"/workers/{job['worker_id']}")
    await alice.transition(task["id"], "cancelled")
    assert [j["full_name"] for j in await alice.room_jobs()] == [other["full_name"]]


async def test_reregistering_revives_a_soft_deleted_job_with_the_new_schema(alice, job):
    await alice.delete(f"/workers/{job['worker_id']}")
    assert await alice.room_jobs() == []
    response = await alice.put(
        "/rooms/room1/jobs",
        json={"category": "modifiers", "name": "Rotate", "schema": {"type": "object", "v": 2}},
    )
    assert response.status_code == 201
    revived = response.json()
    assert revived["id"] == job["id"]
    assert revived["schema"] == {"type": "object", "v": 2}


async def test_room_task_list_filters_and_pages(alice, job):
    tasks = [await alice.submit(JOB, payload={"i": i}) for i in range(4)]
    await alice.claim(job["worker_id"])
    page = (await alice.get("/rooms/room1/tasks?limit=2")).json()
    assert page["total"] == 4
    assert [t["id"] for t in page["items"]] == [tasks[3]["id"], tasks[2]["id"]]
    pending = (await alice.get("/rooms/room1/tasks?status=pending")).json()
    assert pending["total"] == 3
    assert sorted(t["queue_position"] for t in pending["items"]) == [1, 2, 3]
    claimed = (await alice.get("/rooms/room1/tasks?status=claimed")).json()
    assert [t["id"] for t in claimed["items"]] == [tasks[0]["id"]]


async def test_job_task_list(alice, job):
    await alice.register(name="Other")
    mine = await alice.submit(JOB)
    await alice.submit("room1:modifiers:Other")
    page = (await alice.get(f"/rooms/room1/jobs/{JOB}/tasks")).json()
    assert [t["id"] for t in page["items"]] == [mine["id"]]
    assert_problem(
        await alice.get("/rooms/room1/jobs/room1:modifiers:Nope/tasks"), 404, "job-not-found"
    )


async def test_progress_while_running_and_result_on_completion(alice, job):
    task = await alice.submit(JOB)
    claimed = await alice.claim(job["worker_id"])
    token = claimed["claim_token"]
    await alice.transition(task["id"], "running", claim_token=token)
    report = await alice.patch(
        f"/tasks/{task['id']}",
        json={"progress": 0.5, "progress_message": "half way", "claim_token": token},
    )
    assert report.status_code == 200
    assert report.json()["status"] == "running"
    assert (report.json()["progress"], report.json()["progress_message"]) == (0.5, "half way")
    done = await alice.transition(
        task["id"], "completed", result={"energy": -1.5, "atoms": [1, 2]}, claim_token=token
    )
    assert done.json()["result"] == {"energy": -1.5, "atoms": [1, 2]}
    assert (await alice.task(task["id"]))["result"] == {"energy": -1.5, "atoms": [1, 2]}


async def test_integers_beyond_64_bits_are_kept_exact_in_payloads_and_results(alice, job):
    big, bigger = 2**70 + 1, -(10**30) - 7
    response = await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {"angle": big}})
    assert response.status_code == 202, response.text
    task = response.json()
    assert task["payload"] == {"angle": big}
    claimed = await alice.claim(job["worker_id"])
    assert claimed["payload"] == {"angle": big}
    await alice.transition(task["id"], "running")
    done = await alice.transition(task["id"], "completed", result={"n": [bigger, big]})
    assert done.json()["result"] == {"n": [bigger, big]}
    stored = await alice.task(task["id"])
    assert (stored["payload"], stored["result"]) == ({"angle": big}, {"n": [bigger, big]})


async def test_a_body_with_long_numbers_is_refused_for_what_any_body_is_refused_for(alice, job):
    """NaN, infinities, a number too large for a float, a lone surrogate: 422, also in a
    body that has a run of 19 digits (read by another parser, to keep big integers exact)."""
    for value in (b"NaN", b"Infinity", b"-Infinity", b"1e400", b'"\\ud800"'):
        body = b'{"payload": {"angle": 123456789012345678901, "x": ' + value + b"}}"
        response = await alice.post(
            f"/rooms/room1/tasks/{JOB}",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        assert_problem(response, 422, "validation-error")


@pytest.mark.postgres_only
async def test_a_claim_aborted_as_one_side_of_a_deadlock_runs_again(alice, job, db):
    """Another transaction holds the queue count of the claim's second task, then waits for
    the one of its first, which the claim holds: PostgreSQL aborts the claim (it waited
    first), and the claim runs again once the other is done, instead of answering 500."""
    urgent = await alice.submit(JOB, priority=1)
    later = await alice.submit(JOB)  # priority 0: the claim counts it down second
    count_of = "UPDATE task_queue_bucket SET pending = pending WHERE job_id = $1 AND priority = $2"
    conn = await db.engine.connect()
    other = await conn.begin()
    # PostgreSQL aborts whichever side checks for the deadlock first: the claim (it waits
    # first, with the default deadlock_timeout of 1 s), never this side, however slow the
    # machine, with its check held off.
    await conn.exec_driver_sql("SET LOCAL deadlock_timeout = '60s'")
    await conn.exec_driver_sql(count_of, (UUID(job["id"]), 0))
    body = {"worker_id": job["worker_id"], "max_tasks": 2}
    claim = asyncio.create_task(alice.post("/tasks/claim", json=body))
    async with db.read() as watcher:  # the claim holds the priority-1 count, waits for this one

        async def claim_waits() -> bool:
            await watcher.execute(FRESH_ACTIVITY)  # (the read is a transaction: see there)
            if await watcher.scalar(WAITING_ON_A_LOCK):
                return True
            assert not claim.done(), claim.result().text
            return False

        await eventually(claim_waits, 30, "the claim to wait for the count held here", 0.01)
    await conn.exec_driver_sql(count_of, (UUID(job["id"]), 1))  # granted once it is aborted
    await other.commit()
    await conn.close()
    response = await claim
    assert response.status_code == 200, response.text
    assert {task["id"] for task in response.json()["tasks"]} == {urgent["id"], later["id"]}


@pytest.mark.postgres_only
async def test_a_claim_that_skipped_a_task_another_claim_held_but_did_not_take_gets_it(
    alice, bob, db
):
    """Worker A serves two jobs, B one of them. A's claim locks the head of each of its jobs
    and takes the older (the other job's): B, claiming meanwhile, skips its job's head as
    locked. It then waits for A's claim to end and takes that task — not ``null`` while a
    claimable task exists."""
    a = (await alice.register(name="First"))["worker_id"]
    await alice.register(name="Second", worker_id=a)
    b = (await bob.register(name="Second"))["worker_id"]
    await alice.submit("room1:modifiers:First")  # the oldest: A's claim takes it
    second = await alice.submit("room1:modifiers:Second")
    now = utcnow()
    params = {
        "worker_id": UUID(a), "claim_token": uuid4(), "claim_key": None, "owner_id": None,
        "lease_until": now + timedelta(seconds=60), "now": now,
    }  # fmt: skip
    conn = await db.engine.connect()
    claim_of_a = await conn.begin()  # A's claim, held in flight
    await conn.execute(claim_statement(db.dialect, check_owner=False, limit=1), params)
    claim_of_b = asyncio.create_task(bob.claim(b))
    async with db.read() as watcher:  # B comes back, or waits on A's lock

        async def b_back_or_waiting() -> bool:
            await watcher.execute(FRESH_ACTIVITY)  # (the read is a transaction: see there)
            return claim_of_b.done() or bool(await watcher.scalar(WAITING_ON_A_LOCK))

        await eventually(b_back_or_waiting, 30, "B's claim back or waiting on A's lock", 0.01)
    await claim_of_a.commit()
    await conn.close()
    claimed = await claim_of_b
    assert claimed is not None and claimed["id"] == second["id"]


# Within a transaction ``pg_stat_activity`` lists the sessions of its first reading (one
# that connects later is never shown): drop that snapshot before each reading.
FRESH_ACTIVITY = text("SELECT pg_stat_clear_snapshot()")
WAITING_ON_A_LOCK = text(
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
)


async def test_progress_is_refused_unless_running(alice, job):
    task = await alice.submit(JOB)
    response = await alice.patch(f"/tasks/{task['id']}", json={"progress": 0.1})
    assert_problem(response, 403, "forbidden")  # pending: nobody's worker runs it yet
    await alice.claim(job["worker_id"])
    response = await alice.patch(f"/tasks/{task['id']}", json={"progress": 0.1})
    assert_problem(response, 409, "invalid-task-transition")
    assert (await alice.task(task["id"]))["progress"] is None


async def test_progress_by_the_submitter_is_forbidden(alice, bob, job):
    task = await bob.submit(JOB)
    await alice.claim(job["worker_id"])
    await alice.transition(task["id"], "running")
    assert_problem(
        await bob.patch(f"/tasks/{task['id']}", json={"progress": 0.3}), 403, "forbidden"
    )
    # Nor with the cancel the submitter may send.
    cancel = {"status": "cancelled", "progress": 1.0, "progress_message": "done by worker"}
    assert_problem(await bob.patch(f"/tasks/{task['id']}", json=cancel), 422, "validation-error")
    assert (await alice.task(task["id"]))["status"] == "running"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"progress": 1.5},
        {"progress": -0.1},
        {"status": "running", "result": {"x": 1}},
        {"progress_message": "x" * 1001},
    ],
)
async def test_malformed_updates_are_422(alice, job, body):
    task = await alice.submit(JOB)
    assert_problem(await alice.patch(f"/tasks/{task['id']}", json=body), 422, "validation-error")


async def test_payload_is_validated_against_the_jobs_schema(alice):
    schema = {
        "type": "object",
        "properties": {"angle": {"type": "number"}, "axis": {"enum": ["x", "y", "z"]}},
        "required": ["angle"],
    }
    await alice.register(schema=schema)
    response = await alice.post(
        f"/rooms/room1/tasks/{JOB}", json={"payload": {"angle": "steep", "axis": "w"}}
    )
    problem = assert_problem(response, 422, "validation-error")
    assert {tuple(e["loc"]) for e in problem["errors"]} == {
        ("body", "payload", "angle"),
        ("body", "payload", "axis"),
    }
    missing = await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {}})
    assert_problem(missing, 422, "validation-error")
    assert (await alice.get("/rooms/room1/tasks")).json()["total"] == 0
    assert (await alice.submit(JOB, payload={"angle": 1.5, "axis": "z"}))["status"] == "pending"


async def test_a_revived_job_validates_against_its_new_schema(alice, job):
    await alice.delete(f"/workers/{job['worker_id']}")
    await alice.register(schema={"type": "object", "required": ["v2"]})
    assert_problem(
        await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {}}), 422, "validation-error"
    )


async def _orphan(alice, task_id: str) -> None:
    """Cancel the job's one task and remove its workers: the job is soft-deleted."""
    await alice.transition(task_id, "cancelled")
    for worker_id in (await alice.get(f"/rooms/room1/jobs/{JOB}")).json()["workers"]:
        assert (await alice.delete(f"/workers/{worker_id}")).status_code == 204
    assert await alice.room_jobs() == []


# Submits skip the job lookup while the job is as the hub last read it (the insert checks
# that it still is): a job deleted or revived since must be seen as it is now.


async def test_a_submit_sees_a_revival_after_the_hub_last_read_the_job(alice):
    await alice.register(schema={**SCHEMA, "required": ["angle"], "additionalProperties": False})
    first = await alice.submit(JOB, payload={"angle": 1})
    await _orphan(alice, first["id"])
    revived = {"type": "object", "properties": {"turns": {"type": "integer"}}}
    await alice.register(schema={**revived, "required": ["turns"]})
    task = await alice.submit(JOB, payload={"turns": 2})
    assert (task["status"], task["queue_position"]) == ("pending", 1)
    stale = await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {"angle": 1}})
    assert_problem(stale, 422, "validation-error")


async def test_a_submit_sees_a_deletion_after_the_hub_last_read_the_job(alice, job):
    await _orphan(alice, (await alice.submit(JOB))["id"])
    response = await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {}})
    assert_problem(response, 404, "job-not-found")
    assert (await alice.get("/rooms/room1/tasks", params={"status": "pending"})).json()[
        "total"
    ] == 0


async def test_a_submit_takes_the_jobs_current_default_attempts(alice, job):
    assert (await alice.submit(JOB))["max_attempts"] == 1
    response = await alice.put(
        "/rooms/room1/jobs",
        json={"category": "modifiers", "name": "Rotate", "schema": SCHEMA, "max_attempts": 3},
    )
    assert response.status_code == 200
    assert (await alice.submit(JOB))["max_attempts"] == 3


async def test_joining_another_users_job_does_not_rewrite_its_attempts(alice, bob, admin, job):
    body = {"category": "modifiers", "name": "Rotate", "schema": SCHEMA}
    assert (
        await alice.put("/rooms/room1/jobs", json={**body, "max_attempts": 3})
    ).status_code == 200
    workers = (await alice.get(f"/rooms/room1/jobs/{JOB}")).json()["workers"]
    refused = await bob.put("/rooms/room1/jobs", json={**body, "max_attempts": 1})
    assert_problem(refused, 409, "schema-conflict")
    assert (await alice.submit(JOB))["max_attempts"] == 3
    assert (await alice.get(f"/rooms/room1/jobs/{JOB}")).json()["workers"] == workers
    joined = await bob.put("/rooms/room1/jobs", json=body)  # joining as it is: fine
    assert joined.status_code == 200 and joined.json()["max_attempts"] == 3
    changed = await admin.put("/rooms/room1/jobs", json={**body, "max_attempts": 2})
    assert changed.status_code == 200 and (await alice.submit(JOB))["max_attempts"] == 2


async def test_idempotency_key_returns_the_original_task(alice, bob, job):
    key = {"Idempotency-Key": "order-42"}
    first = await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {}}, headers=key)
    again = await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {}}, headers=key)
    assert (first.status_code, again.status_code) == (202, 200)
    assert again.json()["id"] == first.json()["id"]
    assert again.headers["location"] == first.headers["location"]
    other_user = await bob.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {}}, headers=key)
    assert other_user.status_code == 202 and other_user.json()["id"] != first.json()["id"]
    assert (await alice.get("/rooms/room1/tasks")).json()["total"] == 2


async def test_a_replay_reports_the_tasks_current_state(alice, job):
    key = {"Idempotency-Key": "k1"}
    task = (await alice.post(f"/rooms/room1/tasks/{JOB}", json={}, headers=key)).json()
    await alice.claim(job["worker_id"])
    replay = await alice.post(f"/rooms/room1/tasks/{JOB}", json={}, headers=key)
    assert replay.json()["id"] == task["id"] and replay.json()["status"] == "claimed"


@pytest.mark.parametrize("cached", [True, False], ids=["job cached", "job read afresh"])
async def test_a_replay_answers_the_original_task_after_its_job_went(app, alice, job, cached):
    """The job was soft-deleted since (its last worker left): a replay still gets what its
    first request got, on a replica that remembers the job and on one that reads it afresh;
    a new submit is 404."""
    key = {"Idempotency-Key": "k1"}
    task = (await alice.post(f"/rooms/room1/tasks/{JOB}", json={}, headers=key)).json()
    await alice.claim(job["worker_id"])
    await alice.transition(task["id"], "running")
    await alice.transition(task["id"], "completed")
    assert (await alice.delete(f"/workers/{job['worker_id']}")).status_code == 204
    assert await alice.room_jobs() == []
    if not cached:
        app.hub.known_jobs.forget(JOB)  # as another replica, or after a restart
    replay = await alice.post(f"/rooms/room1/tasks/{JOB}", json={}, headers=key)
    assert replay.status_code == 200, replay.text
    assert replay.json()["id"] == task["id"] and replay.json()["status"] == "completed"
    other_key = {"Idempotency-Key": "k2"}
    fresh = await alice.post(f"/rooms/room1/tasks/{JOB}", json={}, headers=other_key)
    assert_problem(fresh, 404, "job-not-found")


async def test_concurrent_duplicates_create_one_task(alice, job):
    import asyncio

    key = {"Idempotency-Key": "burst"}
    answers = await asyncio.gather(
        *(alice.post(f"/rooms/room1/tasks/{JOB}", json={}, headers=key) for _ in range(8))
    )
    assert sorted(a.status_code for a in answers) == [200] * 7 + [202]
    assert len({a.json()["id"] for a in answers}) == 1
    assert (await alice.get("/rooms/room1/tasks")).json()["total"] == 1


COUNT_SCHEMA = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}


@pytest.mark.parametrize("cached", [True, False], ids=["job cached", "job read afresh"])
async def test_a_replay_answers_the_original_task_after_its_job_came_back_stricter(
    app, alice, cached
):
    """The job was soft-deleted and registered again with a schema the original payload no
    longer passes: a replay still answers the original task, whatever the job cache holds."""
    first = await alice.register(schema=COUNT_SCHEMA)
    key = {"Idempotency-Key": "K"}
    original = await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {}}, headers=key)
    assert original.status_code == 202, original.text
    await alice.transition(original.json()["id"], "cancelled")
    assert (await alice.delete(f"/workers/{first['worker_id']}")).status_code == 204
    await alice.register(schema={**COUNT_SCHEMA, "required": ["n"]})
    await alice.submit(JOB, payload={"n": 1})
    if not cached:
        app.hub.known_jobs.forget(JOB)
    replay = await alice.post(f"/rooms/room1/tasks/{JOB}", json={"payload": {}}, headers=key)
    assert replay.status_code == 200, replay.text
    assert replay.json()["id"] == original.json()["id"]
    assert replay.json()["status"] == "cancelled"


@pytest.mark.parametrize(
    "changed",
    [
        {"payload": {"angle": 4}},
        {"priority": 5},
        {"max_attempts": 3},
        {"delay_seconds": 60},
        {"run_at": (utcnow() + timedelta(days=1)).isoformat()},
    ],
    ids=["payload", "priority", "max_attempts", "delay_seconds", "run_at"],
)
async def test_a_key_reused_with_another_request_is_422(alice, job, changed):
    """IETF Idempotency-Key draft: the same key with another request is refused, not
    answered the original task as if it matched; the original request still replays."""
    key = {"Idempotency-Key": "k1"}
    body = {"payload": {"angle": 3}}
    first = await alice.post(f"/rooms/room1/tasks/{JOB}", json=body, headers=key)
    assert first.status_code == 202, first.text
    reused = await alice.post(f"/rooms/room1/tasks/{JOB}", json={**body, **changed}, headers=key)
    assert_problem(reused, 422, "idempotency-key-reused")
    again = await alice.post(f"/rooms/room1/tasks/{JOB}", json=body, headers=key)
    assert again.status_code == 200 and again.json()["id"] == first.json()["id"]
    assert (await alice.get("/rooms/room1/tasks")).json()["total"] == 1


async def test_a_replay_matches_the_request_as_sent(alice, job):
    """The same request repeated matches, whatever its payload's key order, and a delay is
    compared as sent (not as the moment it gives)."""
    key = {"Idempotency-Key": "k1"}
    body = {"payload": {"a": 1, "b": [1, 2]}, "delay_seconds": 30, "priority": 2}
    first = await alice.post(f"/rooms/room1/tasks/{JOB}", json=body, headers=key)
    assert first.status_code == 202, first.text
    await asyncio.sleep(0.01)  # the clock moves on: the same delay now gives a later moment
    reordered = {**body, "payload": {"b": [1, 2], "a": 1}}
    again = await alice.post(f"/rooms/room1/tasks/{JOB}", json=reordered, headers=key)
    assert again.status_code == 200, again.text
    assert again.json()["id"] == first.json()["id"]


@pytest.mark.parametrize("key", [b"", b"x" * 256, b"tab\there", "naïve".encode("latin-1")])
async def test_malformed_idempotency_key_is_422(alice, job, key):
    response = await alice.post(
        f"/rooms/room1/tasks/{JOB}", json={}, headers={"Idempotency-Key": key}
    )
    problem = assert_problem(response, 422, "validation-error")
    assert problem["errors"][0]["loc"] == ["header", "Idempotency-Key"]
    assert (await alice.get("/rooms/room1/tasks")).json()["total"] == 0


@pytest.mark.parametrize(
    "path", ["/rooms/room1/tasks", "/rooms/room1/jobs", "/workers", "/rooms/room1/workers"]
)
async def test_a_page_past_the_end_or_of_no_items_still_counts_them_all(alice, job, path):
    await alice.submit(JOB)
    full = (await alice.get(path)).json()
    assert full["total"] >= 1 and full["items"]
    for query in ("limit=500&offset=999999999", f"offset={full['total']}", "limit=0"):
        page = (await alice.get(f"{path}?{query}")).json()
        assert (page["items"], page["total"]) == ([], full["total"]), query
