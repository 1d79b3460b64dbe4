"""Requests publish their events after the commit, once each, and never for a refused one."""

import pytest

from taskhub.realtime.event_payloads import event_payload
from taskhub.rules.events import Event
from taskhub.rules.rooms import job_room, room_room, worker_room
from tests.support.api import JOB


@pytest.fixture
def published(app) -> list[list[Event]]:
    batches: list[list[Event]] = []

    async def record(batch: list[Event]) -> None:
        batches.append(batch)

    app.hub.publisher.add_sink(record)
    return batches


def names(batch: list[Event]) -> list[tuple[str, str]]:
    return [(event.name, event.room) for event in batch]


async def test_registration_invalidates_the_room(alice, published):
    await alice.register()
    assert names(published[-1]) == [("jobs_invalidate", room_room("room1"))]


async def test_identical_reregistration_by_the_same_worker_is_silent(alice, published):
    job = await alice.register()
    count = len(published)
    await alice.register(worker_id=job["worker_id"])
    assert len(published) == count


async def test_submit_announces_the_task(alice, published):
    await alice.register()
    task = await alice.submit(JOB)
    status, available = published[-1]
    assert (status.name, status.room) == ("task_status_event", room_room("room1"))
    assert (
        event_payload(status)["status"] == "pending"
        and event_payload(status)["queue_position"] == 1
    )
    assert (available.name, available.room) == ("task_available", job_room(JOB))
    assert event_payload(available) == {"job_name": JOB, "room_id": "room1", "task_id": task["id"]}


async def test_every_transition_is_published(alice, published):
    job = await alice.register()
    task = await alice.submit(JOB)
    await alice.claim(job["worker_id"])
    await alice.transition(task["id"], "running")
    await alice.transition(task["id"], "completed")
    statuses = [
        event_payload(event)["status"]
        for batch in published
        for event in batch
        if event.name == "task_status_event"
    ]
    assert statuses == ["pending", "claimed", "running", "completed"]


async def test_refused_requests_publish_nothing(alice, bob, published):
    job = await alice.register()
    task = await alice.submit(JOB)
    count = len(published)
    await bob.transition(task["id"], "running")  # 403
    await alice.transition(task["id"], "completed")  # 409
    await bob.put(
        "/rooms/room1/jobs", json={"category": "modifiers", "name": "Rotate", "schema": {"x": 1}}
    )
    await alice.post(f"/rooms/room1/tasks/{JOB}x", json={"payload": {}})  # 404
    await bob.post("/tasks/claim", json={"worker_id": job["worker_id"]})  # 403
    assert len(published) == count


async def test_deleting_a_worker_publishes_failures_and_invalidation(alice, published):
    job = await alice.register()
    task = await alice.submit(JOB)
    await alice.claim(job["worker_id"])
    await alice.delete(f"/workers/{job['worker_id']}")
    batch = published[-1]
    assert ("task_status_event", room_room("room1")) in names(batch)
    assert ("jobs_invalidate", room_room("room1")) in names(batch)
    (failed,) = [e for e in batch if e.name == "task_status_event"]
    assert event_payload(failed)["id"] == task["id"]
    assert event_payload(failed)["error"] == "Worker disconnected"


async def test_cancelling_a_claimed_task_tells_its_worker(alice, bob, published):
    job = await alice.register()
    task = await bob.submit(JOB)
    await alice.claim(job["worker_id"])
    await bob.transition(task["id"], "cancelled")
    cancelled = [e for e in published[-1] if e.name == "task_cancelled"]
    assert [(e.room, event_payload(e)) for e in cancelled] == [
        (
            worker_room(job["worker_id"]),
            {"task_id": task["id"], "job_name": JOB, "worker_id": job["worker_id"]},
        )
    ]


async def test_cancelling_a_pending_task_tells_no_worker(alice, bob, published):
    await alice.register()
    task = await bob.submit(JOB)
    await bob.transition(task["id"], "cancelled")
    assert "task_cancelled" not in [e.name for e in published[-1]]
