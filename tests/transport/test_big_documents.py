"""Answers that carry big payloads and results write them as stored, never decoding them.
Listings of a room's or a job's tasks hold the same tasks as read one by one, written
while their documents are read a group at a time: the hub holds one group of them, not
the page (up to 500 tasks of up to a MiB each)."""

import tracemalloc
from typing import Any

import pytest

from taskhub.services import task_listing
from taskhub.services.task_listing import list_room_tasks
from taskhub.transport.http.schemas import task_listing_response
from tests.support.api import JOB, ApiClient
from tests.support.big_tasks import BIG, completed, points


async def a_room_of_big_and_small_tasks(alice: ApiClient, job: dict[str, Any]) -> list[str]:
    """Task ids, oldest first: a completed task with a big result, one running with a big
    payload, pending ones big and small (with queue positions), a small completed one."""
    ids = [(await alice.submit(JOB, payload=points(BIG, seed=1)))["id"]]
    await completed(alice, job["worker_id"], points(BIG, seed=2))
    ids.append((await alice.submit(JOB, payload=points(BIG, seed=3)))["id"])
    claimed = await alice.claim(job["worker_id"])
    token = claimed["claim_token"]
    assert (await alice.transition(ids[1], "running", claim_token=token)).status_code == 200
    for i in range(6):
        payload = points(BIG, seed=10 + i) if i % 2 else {"angle": i}
        ids.append((await alice.submit(JOB, payload=payload))["id"])
    ids.append((await alice.submit(JOB, payload={"angle": 99}))["id"])
    await completed(alice, job["worker_id"], {"small": True})  # the oldest pending one
    return ids


async def test_a_page_of_big_tasks_lists_each_task_as_it_reads_alone(alice, job):
    ids = await a_room_of_big_and_small_tasks(alice, job)
    alone = [await alice.task(task_id) for task_id in reversed(ids)]  # newest first
    for path in ("/rooms/room1/tasks", f"/rooms/room1/jobs/{JOB}/tasks"):
        response = await alice.get(path, params={"limit": 500})
        assert response.status_code == 200, response.text[:300]
        assert response.headers["content-type"] == "application/json"
        assert "content-length" not in response.headers, "written as it is read"
        page = response.json()
        assert page["items"] == alone
        assert (page["total"], page["limit"], page["offset"]) == (len(ids), 500, 0)
    oldest, running = alone[-1], alone[-2]
    assert oldest["status"] == "completed" and len(oldest["result"]["points"]) == BIG
    assert running["status"] == "running" and running["result"] is None
    assert len(running["payload"]["points"]) == BIG
    pending = [task["queue_position"] for task in alone if task["status"] == "pending"]
    assert sorted(pending) == [1, 2, 3, 4, 5, 6]


async def test_a_head_of_a_page_of_big_tasks_reads_none_of_their_documents(alice, job, monkeypatch):
    for seed in range(2):
        await alice.submit(JOB, payload=points(BIG, seed=seed))
    groups_read = []
    groups = task_listing.TaskListing.groups

    def counted(listing: task_listing.TaskListing) -> Any:
        groups_read.append(listing)
        return groups(listing)

    monkeypatch.setattr(task_listing.TaskListing, "groups", counted)
    for path in ("/rooms/room1/tasks", f"/rooms/room1/jobs/{JOB}/tasks"):
        head = await alice.request("HEAD", path)
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-type"] == "application/json"
        assert "content-length" not in head.headers, "as the GET: written as it is read"
    assert groups_read == []
    page = (await alice.get("/rooms/room1/tasks")).json()
    assert [len(task["payload"]["points"]) for task in page["items"]] == [BIG, BIG]
    assert len(groups_read) == 1


async def test_a_page_of_small_tasks_is_written_at_once(alice, job):
    for i in range(3):
        await alice.submit(JOB, payload={"angle": i})
    response = await alice.get("/rooms/room1/tasks")
    assert int(response.headers["content-length"]) == len(response.content)
    assert [task["payload"] for task in response.json()["items"]] == [
        {"angle": 2},
        {"angle": 1},
        {"angle": 0},
    ]


@pytest.mark.parametrize(
    "params",
    [
        {"status": "pending"},
        {"status": "completed"},
        {"limit": 3, "offset": 2},
        {"limit": 1, "offset": 1},
        {"status": "pending", "limit": 2, "offset": 1},
    ],
)
async def test_filters_and_pages_of_big_tasks_hold_what_they_did(alice, job, params):
    ids = await a_room_of_big_and_small_tasks(alice, job)
    alone = [await alice.task(task_id) for task_id in reversed(ids)]
    if "status" in params:
        alone = [task for task in alone if task["status"] == params["status"]]
    offset, limit = params.get("offset", 0), params.get("limit", 50)
    page = (await alice.get("/rooms/room1/tasks", params=params)).json()
    assert page["items"] == alone[offset : offset + limit]
    assert page["total"] == len(alone)


async def test_a_listing_holds_one_group_of_big_documents_not_the_page(
    alice, job, app, monkeypatch
):
    """24 payloads of 520 kB (12 MB of JSON), in groups of at most 1 MiB: the hub's memory
    grows by a few MB while the whole answer is written. (Read at once and decoded, as it
    was before, one GET of this page peaked at 118 MB in-process, its client's copy of the
    answer included, and held the event loop for 0.8 s.)"""
    monkeypatch.setattr(task_listing, "GROUP_BYTES", 1024 * 1024)
    for seed in range(24):
        await alice.submit(JOB, payload=points(24_000, seed=seed))
    listing = await list_room_tasks(app.hub.db, "room1", None, 500, 0)
    assert len(listing.deferred) == 24
    written = 0
    tracemalloc.start()
    try:
        async for part in task_listing_response(listing).body_iterator:
            written += len(part)
            del part
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert written > 12_000_000
    assert peak < 5_000_000, f"held {peak / 1e6:.1f} MB to write {written / 1e6:.1f} MB"


async def test_a_task_read_alone_is_written_from_its_stored_documents(alice, job):
    """A task of two 0.8 MB documents: read, decoded and written again, one GET had held
    the event loop for 37 ms (SQLite; 45 ms on PostgreSQL) and peaked at 24 MB here; 4 MB
    now, the client's copy of the answer included."""
    big = points(36_000)
    task = await alice.submit(JOB, payload=big)
    await completed(alice, job["worker_id"], big)
    tracemalloc.start()
    try:
        response = await alice.get(f"/tasks/{task['id']}")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert response.status_code == 200
    assert len(response.content) > 1_500_000
    assert peak < 10_000_000, f"held {peak / 1e6:.1f} MB"
    read = response.json()
    assert read["payload"] == read["result"] == big
