"""The room dashboard's API: a room's aggregates, the filtered room listing, re-runs, bulk
actions and the room's workers (docs/protocol.md, "Room dashboard")."""

from __future__ import annotations

import itertools
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from taskhub.clock import utcnow
from taskhub.realtime.event_payloads import event_payload
from taskhub.rules.events import JobsInvalidate, TaskAvailable, TaskStatusChanged
from taskhub.services import bulk
from tests.support.api import JOB, assert_problem
from tests.support.rows import add_job, add_tasks
from tests.support.waiting import eventually


def _at(start: str) -> datetime:
    return datetime.fromisoformat(start.replace("Z", "+00:00"))


def _bucket(stats: dict[str, Any], start: datetime) -> dict[str, Any]:
    [found] = [b for b in stats["buckets"] if _at(b["start"]) == start]
    return found


# ---- GET /rooms/{room_id}/stats ---------------------------------------------------------


async def _stats_room(db) -> tuple[uuid.UUID, datetime]:
    """A room1 job and tasks around ``b0``, a minute bucket ten minutes back: see the test."""
    job_id = await add_job(db)
    now = utcnow()
    b0 = datetime.fromtimestamp(int(now.timestamp()) // 60 * 60 - 600, UTC)
    s = timedelta(seconds=1)
    b1 = b0 + 60 * s
    await add_tasks(
        db,
        job_id,
        [b0 + 1 * s],
        status="completed",
        started_at=b0 + 3 * s,
        completed_at=b0 + 10 * s,
    )  # wait 2 s, run 7 s
    await add_tasks(
        db,
        job_id,
        [b0 + 2 * s],
        status="failed",
        started_at=b0 + 6 * s,
        completed_at=b0 + 20 * s,
        error="boom",
    )  # wait 4 s, run 14 s
    await add_tasks(db, job_id, [b0 + 5 * s], status="cancelled", completed_at=b0 + 30 * s)
    await add_tasks(db, job_id, [b0 + 40 * s])  # still pending
    await add_tasks(
        db, job_id, [b0 + 50 * s], status="running", started_at=b1 + 5 * s, worker_id=uuid.uuid4()
    )
    # finished long before any window: counted all-time only
    old = now - timedelta(days=3)
    await add_tasks(db, job_id, [old], status="completed", started_at=old, completed_at=old)
    return job_id, b0


async def test_stats_buckets_equal_what_the_tasks_imply(db, alice):
    _job_id, b0 = await _stats_room(db)
    response = await alice.get("/rooms/room1/stats", params={"window": "1h"})
    assert response.status_code == 200, response.text
    stats = response.json()
    assert stats["room_id"] == "room1" and stats["window"] == "1h"
    assert stats["bucket_seconds"] == 60
    assert len(stats["buckets"]) == 60
    starts = [_at(b["start"]) for b in stats["buckets"]]
    assert starts == sorted(starts) and _at(stats["since"]) == starts[0]
    assert all(b - a == timedelta(seconds=60) for a, b in itertools.pairwise(starts))
    assert starts[-1] <= _at(stats["until"]) < starts[-1] + timedelta(seconds=60)
    first = _bucket(stats, b0)
    assert (first["completed"], first["failed"], first["cancelled"]) == (1, 1, 1)
    assert first["wait_p50"] == pytest.approx(3.0)
    assert first["wait_p95"] == pytest.approx(3.9)
    assert first["run_p50"] == pytest.approx(10.5)
    assert first["run_p95"] == pytest.approx(13.65)
    # pending at the end of each bucket: nothing before b0, the pending and the one not yet
    # started at the end of b0, the pending one after
    assert _bucket(stats, b0 - timedelta(seconds=60))["queue_depth"] == 0
    assert first["queue_depth"] == 2
    later = [b for b in stats["buckets"] if _at(b["start"]) > b0]
    assert [b["queue_depth"] for b in later] == [1] * len(later)
    quiet = [b for b in stats["buckets"] if _at(b["start"]) != b0]
    assert all(b["completed"] == b["failed"] == b["cancelled"] == 0 for b in quiet)
    assert all(b["wait_p50"] is None and b["run_p95"] is None for b in quiet)
    [counts] = stats["counts"]
    assert counts["job"].startswith("room1:modifiers:Job")
    assert {k: v for k, v in counts.items() if k != "job"} == {
        "pending": 1,
        "claimed": 0,
        "running": 1,
        "completed": 2,
        "failed": 1,
        "cancelled": 1,
    }


async def test_stats_windows_and_since(db, alice):
    _job_id, b0 = await _stats_room(db)
    for window, step, count in (("15m", 60, 15), ("24h", 1200, 72)):
        stats = (await alice.get("/rooms/room1/stats", params={"window": window})).json()
        assert stats["bucket_seconds"] == step and len(stats["buckets"]) == count
        assert sum(b["completed"] + b["failed"] + b["cancelled"] for b in stats["buckets"]) == 3
    since = b0 + timedelta(seconds=70)  # inside the bucket after b0
    response = await alice.get(
        "/rooms/room1/stats", params={"window": "1h", "since": since.isoformat()}
    )
    assert response.status_code == 200, response.text
    tail = response.json()
    assert _at(tail["since"]) == b0 + timedelta(seconds=60)
    assert _at(tail["buckets"][0]["start"]) == b0 + timedelta(seconds=60)
    assert all(b["queue_depth"] == 1 and b["completed"] == 0 for b in tail["buckets"])


async def test_stats_of_an_empty_room(alice):
    stats = (await alice.get("/rooms/nobody/stats", params={"window": "15m"})).json()
    assert stats["counts"] == []
    assert [b["queue_depth"] for b in stats["buckets"]] == [0] * 15


@pytest.mark.parametrize(
    "params",
    [
        {"window": "2h"},
        {"window": "1h", "since": "yesterday"},
        {"window": "1h", "since": (utcnow() - timedelta(hours=3)).isoformat()},
        {"window": "1h", "since": (utcnow() + timedelta(hours=1)).isoformat()},
        {"window": "1h", "extra": "1"},
    ],
)
async def test_stats_refuses_bad_input(alice, params):
    assert_problem(await alice.get("/rooms/room1/stats", params=params), 422, "validation-error")


async def test_stats_room_id_rules(alice, anonymous):
    assert_problem(await alice.get("/rooms/a:b/stats"), 400, "invalid-room-id")
    assert_problem(await anonymous.get("/rooms/room1/stats"), 401, "unauthorized")


# ---- the room listing's filters ---------------------------------------------------------


async def _listing_room(alice, bob, job) -> dict[str, dict[str, Any]]:
    """Tasks of two jobs by two users; one failed with an error, one cancelled."""
    other = await alice.register(name="Other", worker_id=job["worker_id"])
    tasks = {
        "percent": await alice.submit(JOB, payload={"note": "50% off"}),
        "plain": await alice.submit(JOB, payload={"note": "50x off"}),
        "underscore": await bob.submit(JOB, payload={"note": "a_b"}),
        "other": await bob.submit(other["full_name"], payload={"note": "axb"}),
    }
    claimed = await alice.claim(job["worker_id"])
    assert claimed["id"] == tasks["percent"]["id"]
    await alice.transition(claimed["id"], "running")
    failed = await alice.transition(claimed["id"], "failed", error="Disk FULL on node7")
    assert failed.status_code == 200, failed.text
    cancelled = await bob.transition(tasks["underscore"]["id"], "cancelled")
    assert cancelled.status_code == 200, cancelled.text
    return tasks


async def _ids(client, **params: Any) -> list[str]:
    response = await client.get("/rooms/room1/tasks", params=params)
    assert response.status_code == 200, response.text
    page = response.json()
    assert page["total"] == len(page["items"])
    return [item["id"] for item in page["items"]]


async def test_listing_filters_narrow_exactly(alice, bob, job):
    tasks = await _listing_room(alice, bob, job)
    ids = {name: task["id"] for name, task in tasks.items()}
    assert await _ids(alice, status="failed") == [ids["percent"]]
    assert set(await _ids(alice, status="failed,cancelled")) == {ids["percent"], ids["underscore"]}
    assert set(await _ids(alice, job=JOB)) == {ids["percent"], ids["plain"], ids["underscore"]}
    assert set(await _ids(alice, submitted_by="me")) == {ids["percent"], ids["plain"]}
    assert set(await _ids(bob, submitted_by="me")) == {ids["underscore"], ids["other"]}
    assert await _ids(alice, worker_id=job["worker_id"]) == [ids["percent"]]
    assert await _ids(alice, q="disk full") == [ids["percent"]]  # the error, any case
    assert await _ids(alice, q="50%") == [ids["percent"]]  # % taken literally
    assert await _ids(alice, q="a_b") == [ids["underscore"]]  # _ taken literally
    assert await _ids(alice, q="nothing like it") == []
    assert await _ids(alice, status="pending", job=JOB, submitted_by="me") == [ids["plain"]]


async def test_listing_sorts(alice, bob, job):
    tasks = await _listing_room(alice, bob, job)
    newest_first = await _ids(alice)
    assert newest_first == [tasks[n]["id"] for n in ("other", "underscore", "plain", "percent")]
    assert await _ids(alice, sort="created_at") == newest_first[::-1]
    # only "percent" started: the others come last, either way
    assert (await _ids(alice, sort="started_at"))[0] == tasks["percent"]["id"]
    assert (await _ids(alice, sort="-started_at"))[0] == tasks["percent"]["id"]
    by_status = await alice.get("/rooms/room1/tasks", params={"sort": "status"})
    statuses = [item["status"] for item in by_status.json()["items"]]
    assert statuses == sorted(statuses)
    finished = await _ids(alice, sort="-completed_at")
    assert finished[:2] == [tasks["underscore"]["id"], tasks["percent"]["id"]]


async def test_summary_view(alice, bob, job):
    tasks = await _listing_room(alice, bob, job)
    response = await alice.get("/rooms/room1/tasks", params={"view": "summary", "limit": 2})
    assert response.status_code == 200, response.text
    page = response.json()
    assert page["total"] == 4 and len(page["items"]) == 2
    first = page["items"][0]
    assert "payload" not in first and "result" not in first
    assert first["id"] == tasks["other"]["id"]
    assert first["submitter"] == "bob"
    assert first["queue_position"] == 1 and first["status"] == "pending"
    full = (await alice.get("/rooms/room1/tasks", params={"limit": 1})).json()["items"][0]
    assert {k: v for k, v in full.items() if k not in ("payload", "result")} == {
        k: v for k, v in first.items() if k != "submitter"
    }


async def test_listing_refuses_bad_parameters(alice, job):
    for params in (
        {"q": "x" * 201},
        {"q": ""},
        {"status": "failed,nope"},
        {"sort": "payload"},
        {"view": "tiny"},
        {"submitted_by": "someone"},
        {"worker_id": "not-a-uuid"},
        {"job": "no-colons"},
        {"unknown": "1"},
    ):
        response = await alice.get("/rooms/room1/tasks", params=params)
        assert_problem(response, 422, "validation-error")
    # what the zndraw-joblib SDK sends still works
    ok = await alice.get(
        "/rooms/room1/tasks", params={"limit": 5, "offset": 0, "status": "pending"}
    )
    assert ok.status_code == 200
    assert (
        await alice.get(f"/rooms/room1/jobs/{JOB}/tasks", params={"extra": "1"})
    ).status_code == 200


# ---- POST /tasks/{id}/rerun -------------------------------------------------------------


async def _failed_task(alice, job, payload: dict[str, Any] | None = None, **extra: Any) -> dict:
    task = await alice.submit(JOB, payload=payload or {"angle": 1.5}, **extra)
    await alice.claim(job["worker_id"])
    response = await alice.transition(task["id"], "failed", error="boom")
    assert response.status_code == 200, response.text
    return response.json()


async def test_rerun_submits_the_same_task_again(alice, bob, job, published):
    original = await _failed_task(alice, job, priority=7)
    response = await bob.post(f"/tasks/{original['id']}/rerun")
    assert response.status_code == 202, response.text
    again = response.json()
    assert response.headers["location"] == f"/v1/joblib/tasks/{again['id']}"
    assert again["id"] != original["id"]
    assert again["rerun_of"] == original["id"]
    assert again["status"] == "pending" and again["queue_position"] == 1
    assert (again["job_name"], again["room_id"], again["payload"], again["priority"]) == (
        JOB,
        "room1",
        {"angle": 1.5},
        7,
    )
    me = (await bob.get("/users/me")).json()
    assert again["submitted_by"] == me["id"]
    assert (await alice.task(again["id"]))["rerun_of"] == original["id"]
    assert (await alice.task(original["id"]))["rerun_of"] is None
    events = [
        e
        for e in published
        if getattr(e, "task_id", None) == again["id"]
        or (isinstance(e, TaskStatusChanged) and str(e.task.id) == again["id"])
    ]
    assert any(isinstance(e, TaskAvailable) for e in events)
    [status] = [e for e in events if isinstance(e, TaskStatusChanged)]
    assert event_payload(status)["rerun_of"] == original["id"] and status.previous is None


async def test_rerun_of_a_cancelled_task(alice, job):
    task = await alice.submit(JOB)
    await alice.transition(task["id"], "cancelled")
    response = await alice.post(f"/tasks/{task['id']}/rerun")
    assert response.status_code == 202, response.text


async def test_rerun_refusals(alice, anonymous, job):
    pending = await alice.submit(JOB)
    assert_problem(await alice.post(f"/tasks/{pending['id']}/rerun"), 409, "task-not-rerunnable")
    unknown = uuid.uuid4()
    assert_problem(await alice.post(f"/tasks/{unknown}/rerun"), 404, "task-not-found")
    assert_problem(await alice.post("/tasks/nope/rerun"), 422, "validation-error")
    assert_problem(await anonymous.post(f"/tasks/{pending['id']}/rerun"), 401, "unauthorized")
    listed = (await alice.get("/rooms/room1/tasks")).json()["total"]
    assert listed == 1  # nothing was submitted


async def test_rerun_of_a_task_whose_job_is_gone(alice, job):
    failed = await _failed_task(alice, job)
    assert (await alice.delete(f"/workers/{job['worker_id']}")).status_code == 204
    assert_problem(await alice.post(f"/tasks/{failed['id']}/rerun"), 404, "job-not-found")


# ---- POST /rooms/{id}/tasks/bulk --------------------------------------------------------


async def _statuses(client, ids: list[str]) -> list[str]:
    return [(await client.task(task_id))["status"] for task_id in ids]


async def test_bulk_cancel_by_ids_counts_refusals(alice, bob, job):
    mine = [(await alice.submit(JOB))["id"] for _ in range(3)]
    theirs = (await bob.submit(JOB))["id"]
    done = mine[2]
    assert (await alice.transition(done, "cancelled")).status_code == 200
    far = await alice.register(room="room2", name="Far", worker_id=job["worker_id"])
    elsewhere = (await alice.submit(far["full_name"], room="room2"))["id"]
    ids = [*mine, theirs, elsewhere, mine[0]]  # a repeated id counts once
    response = await alice.post("/rooms/room1/tasks/bulk", json={"action": "cancel", "ids": ids})
    assert response.status_code == 200, response.text
    outcome = response.json()
    assert (outcome["matched"], outcome["succeeded"], outcome["refused"]) == (5, 2, 3)
    refusals = {r["task_id"]: (r["status"], r["type"]) for r in outcome["refusals"]}
    assert refusals == {
        done: (409, "/v1/problems/invalid-task-transition"),
        theirs: (403, "/v1/problems/forbidden"),
        elsewhere: (404, "/v1/problems/task-not-found"),
    }
    assert outcome["created"] == []
    assert await _statuses(alice, [*mine, theirs, elsewhere]) == [
        "cancelled",
        "cancelled",
        "cancelled",
        "pending",
        "pending",
    ]


async def test_bulk_by_filter_and_dry_run(alice, bob, job, published):
    failed = [(await _failed_task(alice, job))["id"] for _ in range(2)]
    pending = (await alice.submit(JOB))["id"]
    body = {"action": "rerun", "filter": {"status": "failed"}, "dry_run": True}
    count = len(published)
    dry = (await bob.post("/rooms/room1/tasks/bulk", json=body)).json()
    assert dry == {"matched": 2, "succeeded": 0, "refused": 0, "refusals": [], "created": []}
    assert len(published) == count
    assert (await alice.get("/rooms/room1/tasks")).json()["total"] == 3
    body["dry_run"] = False
    outcome = (await bob.post("/rooms/room1/tasks/bulk", json=body)).json()
    assert (outcome["matched"], outcome["succeeded"], outcome["refused"]) == (2, 2, 0)
    reruns = [await alice.task(task_id) for task_id in outcome["created"]]
    assert sorted(task["rerun_of"] for task in reruns) == sorted(failed)
    assert all(task["status"] == "pending" for task in reruns)
    # bob cancels by filter: only his own (the re-runs) succeed
    cancel = {"action": "cancel", "filter": {"status": "pending"}}
    outcome = (await bob.post("/rooms/room1/tasks/bulk", json=cancel)).json()
    assert (outcome["matched"], outcome["succeeded"], outcome["refused"]) == (3, 2, 1)
    assert outcome["refusals"] == [
        {"task_id": pending, "status": 403, "type": "/v1/problems/forbidden"}
    ]


async def test_bulk_over_the_limit_changes_nothing(alice, job, monkeypatch):
    ids = [(await alice.submit(JOB))["id"] for _ in range(3)]
    monkeypatch.setattr(bulk, "MAX_BULK_TASKS", 2)
    response = await alice.post(
        "/rooms/room1/tasks/bulk", json={"action": "cancel", "filter": {"status": "pending"}}
    )
    body = assert_problem(response, 422, "too-many-tasks")
    assert "3" in body["detail"]
    assert await _statuses(alice, ids) == ["pending"] * 3
    many = [str(uuid.uuid4()) for _ in range(10_001)]
    too_long = await alice.post("/rooms/room1/tasks/bulk", json={"action": "cancel", "ids": many})
    assert_problem(too_long, 422, "validation-error")


@pytest.mark.parametrize(
    "body",
    [
        {"action": "delete", "ids": []},
        {"action": "cancel"},
        {"action": "cancel", "ids": [], "filter": {}},
        {"action": "cancel", "filter": {"status": "nope"}},
        {"action": "cancel", "filter": {"q": "x" * 201}},
        {"action": "cancel", "filter": {"colour": "red"}},
        {"action": "cancel", "ids": ["not-a-uuid"]},
    ],
)
async def test_bulk_refuses_bad_bodies(alice, job, body):
    task = await alice.submit(JOB)
    response = await alice.post("/rooms/room1/tasks/bulk", json=body)
    assert_problem(response, 422, "validation-error")
    assert (await alice.task(task["id"]))["status"] == "pending"


# ---- workers: slots and the room's list -------------------------------------------------


async def test_worker_slots_on_registration_and_heartbeat(alice):
    plain = await alice.post("/workers")
    assert plain.status_code == 201 and plain.json()["slots"] is None
    created = await alice.post("/workers", json={"slots": 4})
    assert created.status_code == 201 and created.json()["slots"] == 4
    worker_id = created.json()["id"]
    assert (await alice.patch(f"/workers/{worker_id}")).json()["slots"] == 4  # kept
    beat = await alice.patch(f"/workers/{worker_id}", json={"slots": 8})
    assert beat.status_code == 200 and beat.json()["slots"] == 8
    listed = {w["id"]: w["slots"] for w in (await alice.get("/workers")).json()["items"]}
    assert listed == {plain.json()["id"]: None, worker_id: 8}
    for bad in (0, 1025, "many"):
        assert_problem(await alice.post("/workers", json={"slots": bad}), 422, "validation-error")
        response = await alice.patch(f"/workers/{worker_id}", json={"slots": bad})
        assert_problem(response, 422, "validation-error")


async def test_room_workers(alice, bob, admin, published):
    worker = (await alice.post("/workers", json={"slots": 2})).json()
    job = await alice.register(worker_id=worker["id"])
    shared = await admin.register(room="@global", name="Shared")
    other_room = await alice.register(room="room2", name="Elsewhere", worker_id=worker["id"])
    task = await bob.submit(JOB)
    await bob.submit(other_room["full_name"], room="room2")
    await alice.claim(worker["id"])
    await alice.claim(worker["id"])
    page = (await bob.get("/rooms/room1/workers")).json()
    assert page["total"] == 2
    items = {item["id"]: item for item in page["items"]}
    mine = items[worker["id"]]
    assert mine["owner"] == "alice" and mine["owned_by"] == mine["user_id"]
    assert mine["slots"] == 2 and mine["job_count"] == 2
    assert mine["jobs"] == [job["full_name"]]  # room2's job is not visible from room1
    assert mine["used"] == 2 and len(mine["running"]) == 2 and task["id"] in mine["running"]
    assert items[shared["worker_id"]]["jobs"] == [shared["full_name"]]
    assert items[shared["worker_id"]]["owner"] == "root"
    assert items[shared["worker_id"]]["running"] == [] and items[shared["worker_id"]]["used"] == 0
    # a worker that leaves is gone from the list at once, and the room is told
    count = len(published)
    assert (await alice.delete(f"/workers/{worker['id']}")).status_code == 204
    assert JobsInvalidate("room1") in published[count:]
    page = (await bob.get("/rooms/room1/workers")).json()
    assert [item["id"] for item in page["items"]] == [shared["worker_id"]]


async def test_rerun_of_an_internal_task_is_dispatched(db, alice):
    name = "@internal:analysis:RoomSummary"
    job = (await alice.get(f"/rooms/room1/jobs/{name}")).json()
    [failed] = await add_tasks(
        db,
        uuid.UUID(job["id"]),
        [utcnow()],
        status="failed",
        payload={"failures": 2},
        attempt=1,
        error="boom",
        completed_at=utcnow(),
    )
    response = await alice.post(f"/tasks/{failed}/rerun")
    assert response.status_code == 202, response.text
    again = response.json()
    assert again["job_name"] == name and again["rerun_of"] == str(failed)

    async def ran() -> bool:
        return (await alice.task(again["id"]))["status"] == "completed"

    await eventually(ran, 10, "the re-run of an @internal task runs")
    assert (await alice.task(again["id"]))["payload"] == {"failures": 2}


async def test_stats_buckets_split_exactly_at_their_edges(db, alice):
    job_id = await add_job(db)
    now = utcnow()
    b0 = datetime.fromtimestamp(int(now.timestamp()) // 1200 * 1200 - 2400, UTC)
    edge = b0 + timedelta(seconds=1200)
    just_before = edge - timedelta(microseconds=1)
    for moment in (b0, just_before, edge):
        await add_tasks(db, job_id, [b0], status="cancelled", completed_at=moment)
    stats = (await alice.get("/rooms/room1/stats", params={"window": "24h"})).json()
    assert _bucket(stats, b0)["cancelled"] == 2
    assert _bucket(stats, edge)["cancelled"] == 1
    minutes = (await alice.get("/rooms/room1/stats", params={"window": "1h"})).json()
    assert _bucket(minutes, edge - timedelta(seconds=60))["cancelled"] == 1
    assert _bucket(minutes, edge)["cancelled"] == 1
