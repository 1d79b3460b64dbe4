"""Socket.IO event contract of a real ``taskhub serve`` (SQLite and PostgreSQL).

docs/protocol.md, "Socket.IO": a browser in ``room:lab`` sees ``jobs_invalidate`` and every
``task_status_event``; a worker in ``jobs:lab:modifiers:R`` gets ``task_available``; each
(event, room) pair is sent once per request, only after the commit, never for a request
that failed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

import httpx
import pytest

from tests.support.api import SCHEMA, ApiClient, assert_problem
from tests.support.names import unique
from tests.support.server import HubServer
from tests.support.sockets import SocketProbe, assert_task_status_payload


@dataclass
class Users:
    admin: str
    alice: str
    bob: str


@pytest.fixture
def users(shared_server: HubServer) -> Users:
    """The admin (browser user, submitter), alice (owns the worker) and bob (a stranger)."""
    return Users(
        shared_server.admin_token,
        shared_server.create_user(unique("alice")),
        shared_server.create_user(unique("bob")),
    )


@pytest.fixture
def side() -> str:
    return unique("side")


def same_instant(left: str, right: str) -> bool:
    return datetime.fromisoformat(left) == datetime.fromisoformat(right)


async def test_room_and_job_room_receive_the_whole_task_lifecycle_once(
    shared_server: HubServer, http: httpx.AsyncClient, users: Users, lab: str, job: str
) -> None:
    """Register → submit → claim → running → progress → completed → delete worker, live."""
    admin, alice = ApiClient(http, users.admin), ApiClient(http, users.alice)
    url = shared_server.base_url
    async with (
        SocketProbe("browser") as browser,
        SocketProbe("bystander") as bystander,
        SocketProbe("worker") as worker,
    ):
        await browser.connect(url, users.admin)
        await browser.room_join(lab)
        await bystander.connect(url, users.alice)  # in room:lab, not in the job room
        await bystander.room_join(lab)

        registration = await alice.register(room=lab, name="R", schema={})
        worker_id = registration["worker_id"]
        invalidated = await browser.wait_for("jobs_invalidate")
        assert invalidated.data == {}

        await worker.connect(url, users.alice)
        await worker.join_job_room(job, worker_id)
        await worker.join_job_room(job, worker_id)  # joining twice is still one membership
        await worker.room_join(lab)

        task = await admin.submit(job, room=lab)
        available = await worker.wait_for("task_available")
        assert available.data == {"job_name": job, "room_id": lab, "task_id": task["id"]}
        pending = (await browser.wait_status(task["id"], "pending")).data
        assert_task_status_payload(pending)
        assert pending["name"] == job
        assert pending["room_id"] == lab
        assert pending["queue_position"] == 1
        assert pending["worker_id"] is None
        assert pending["error"] is None
        assert pending["started_at"] is None and pending["completed_at"] is None
        assert same_instant(pending["created_at"], task["created_at"])

        claimed_task = await alice.claim(worker_id)
        assert claimed_task is not None and claimed_task["id"] == task["id"]
        claimed = (await browser.wait_status(task["id"], "claimed")).data
        assert_task_status_payload(claimed)
        assert claimed["worker_id"] == worker_id
        assert claimed["queue_position"] is None
        assert claimed["started_at"] is None

        assert (await alice.transition(task["id"], "running")).status_code == 200
        running = (await browser.wait_status(task["id"], "running")).data
        assert_task_status_payload(running)
        assert running["started_at"] is not None and running["completed_at"] is None

        progress = await alice.patch(
            f"/tasks/{task['id']}", json={"progress": 0.5, "progress_message": "half way"}
        )
        assert progress.status_code == 200, progress.text
        reported = (
            await browser.wait_for(
                "task_status_event", lambda data: data.get("progress") == 0.5, after=2
            )
        ).data
        assert_task_status_payload(reported)
        assert (reported["status"], reported["progress_message"]) == ("running", "half way")

        finished = await alice.transition(task["id"], "completed", result={"angle": 90})
        assert finished.status_code == 200, finished.text
        completed = (await browser.wait_status(task["id"], "completed")).data
        assert_task_status_payload(completed)
        assert completed["started_at"] is not None and completed["completed_at"] is not None
        assert completed["error"] is None
        assert completed["worker_id"] == worker_id
        assert completed["result"] == {"angle": 90}  # results reach the room (docs/protocol.md)

        deleted = await alice.delete(f"/workers/{worker_id}")
        assert deleted.status_code == 204, deleted.text
        # The last event each socket gets is the sentinel: everything before it is final.
        last = [await probe.wait_for("jobs_invalidate", after=1) for probe in (browser, bystander)]
        await worker.wait_for("jobs_invalidate")

        lifecycle = [
            ("jobs_invalidate", None),
            ("task_status_event", "pending"),
            ("task_status_event", "claimed"),
            ("task_status_event", "running"),
            ("task_status_event", "running"),  # the progress report
            ("task_status_event", "completed"),
            ("jobs_invalidate", None),
        ]
        for probe, sentinel in zip((browser, bystander), last, strict=True):
            seen = [(event, data.get("status")) for event, data in probe.between(0)]
            assert seen == lifecycle, probe.name
            assert sentinel.index == len(lifecycle) - 1
        # The worker socket is in both rooms: still exactly one event of each kind per request.
        assert [(event, data.get("status")) for event, data in worker.between(0)] in (
            [("task_available", None), *lifecycle[1:]],
            [lifecycle[1], ("task_available", None), *lifecycle[2:]],
        )
        assert worker.named("task_available") == [available.data]


async def test_a_single_submit_emits_one_status_event_and_one_wake_up(
    shared_server: HubServer, http: httpx.AsyncClient, users: Users, lab: str, job: str
) -> None:
    """Two submits are two requests (two of each event); nothing is sent twice."""
    admin, alice = ApiClient(http, users.admin), ApiClient(http, users.alice)
    url = shared_server.base_url
    worker_id = (await alice.register(room=lab, name="R", schema={}))["worker_id"]
    other_worker = (await alice.register(room=lab, name="Other", schema={}))["worker_id"]
    async with SocketProbe("worker") as worker, SocketProbe("other-worker") as other:
        await worker.connect(url, users.alice)
        await worker.join_job_room(job, worker_id)
        await worker.room_join(lab)
        await other.connect(url, users.alice)
        await other.join_job_room(f"{lab}:modifiers:Other", other_worker)
        await other.room_join(lab)

        first = await admin.submit(job, room=lab)
        second = await admin.submit(job, room=lab)
        assert (await admin.transition(first["id"], "cancelled")).status_code == 200
        for probe in (worker, other):
            await probe.wait_status(first["id"], "cancelled")

        statuses = [(d["id"], d["status"]) for d in worker.named("task_status_event")]
        assert statuses == [
            (first["id"], "pending"),
            (second["id"], "pending"),
            (first["id"], "cancelled"),
        ]
        queue = {d["id"]: d["queue_position"] for d in worker.named("task_status_event")[:2]}
        assert queue == {first["id"]: 1, second["id"]: 2}
        assert [d["task_id"] for d in worker.named("task_available")] == [
            first["id"],
            second["id"],
        ]
        assert other.named("task_available") == []  # another job's room hears nothing
        assert other.named("task_status_event") == worker.named("task_status_event")


async def test_failed_requests_emit_no_events(
    shared_server: HubServer, http: httpx.AsyncClient, users: Users, lab: str, job: str
) -> None:
    """409, 403, 404, 400, 422 change nothing and so announce nothing."""
    admin = ApiClient(http, users.admin)
    alice, bob = ApiClient(http, users.alice), ApiClient(http, users.bob)
    url = shared_server.base_url
    worker_id = (await alice.register(room=lab, name="R", schema=SCHEMA))["worker_id"]
    async with SocketProbe("browser") as browser, SocketProbe("worker") as worker:
        await browser.connect(url, users.admin)
        await browser.room_join(lab)
        await worker.connect(url, users.alice)
        await worker.join_job_room(job, worker_id)
        await worker.room_join(lab)
        claimed = await admin.submit(job, room=lab)
        waiting = await admin.submit(job, room=lab)
        assert (await alice.claim(worker_id) or {}).get("id") == claimed["id"]
        await browser.wait_status(claimed["id"], "claimed")
        await worker.wait_status(claimed["id"], "claimed")
        start = {probe.name: probe.mark() for probe in (browser, worker)}

        assert_problem(
            await alice.transition(claimed["id"], "completed"), 409, "invalid-task-transition"
        )
        assert_problem(
            await alice.transition(claimed["id"], "claimed"), 409, "invalid-task-transition"
        )
        assert_problem(await bob.transition(claimed["id"], "running"), 403, "forbidden")
        assert_problem(await bob.transition(waiting["id"], "cancelled"), 403, "forbidden")
        assert_problem(
            await bob.post("/tasks/claim", json={"worker_id": worker_id}), 403, "forbidden"
        )
        assert_problem(
            await admin.post(f"/rooms/{lab}/tasks/{lab}:modifiers:Missing", json={"payload": {}}),
            404,
            "job-not-found",
        )
        assert_problem(
            await admin.post(f"/rooms/a@b/tasks/{job}", json={"payload": {}}),
            400,
            "invalid-room-id",
        )
        assert_problem(
            await admin.post(f"/rooms/{lab}/tasks/{job}", json={"payload": "not an object"}),
            422,
            "validation-error",
        )
        assert_problem(
            await alice.put(
                f"/rooms/{lab}/jobs",
                json={"category": "modifiers", "name": "R", "schema": {"type": "object"}},
            ),
            409,
            "schema-conflict",
        )

        # Sentinel: a successful request; its event must be the first one after the failures.
        assert (await alice.transition(claimed["id"], "running")).status_code == 200
        for probe in (browser, worker):
            sentinel = await probe.wait_status(claimed["id"], "running")
            assert sentinel.index == start[probe.name], probe.between(start[probe.name])
        assert (await admin.task(waiting["id"]))["status"] == "pending"


async def test_removing_a_worker_sends_each_event_once_per_room_and_task(
    shared_server: HubServer, http: httpx.AsyncClient, users: Users, lab: str, job: str, side: str
) -> None:
    """A worker serving two jobs in ``lab`` and one in ``side`` is deleted: every claimed
    task fails once, each room gets a single ``jobs_invalidate``."""
    admin, alice = ApiClient(http, users.admin), ApiClient(http, users.alice)
    worker_id = (await alice.register(room=lab, name="R", schema={}))["worker_id"]
    await alice.register(room=lab, name="S", schema={}, worker_id=worker_id)
    await alice.register(room=side, name="Q", schema={}, worker_id=worker_id)
    for room in (lab, side):
        await admin.register(room=room, name="Sentinel", schema={})
    held = {
        (await admin.submit(job, room=lab))["id"]: lab,
        (await admin.submit(f"{lab}:modifiers:S", room=lab))["id"]: lab,
        (await admin.submit(f"{side}:modifiers:Q", room=side))["id"]: side,
    }
    for _ in held:
        assert await alice.claim(worker_id) is not None

    probes = {lab: SocketProbe("browser-lab"), side: SocketProbe("browser-side")}
    async with probes[lab], probes[side]:
        for room, probe in probes.items():
            await probe.connect(shared_server.base_url, users.admin)
            await probe.room_join(room)
        deleted = await alice.delete(f"/workers/{worker_id}")
        assert deleted.status_code == 204, deleted.text
        for room, probe in probes.items():
            sentinel = await admin.submit(f"{room}:modifiers:Sentinel", room=room)
            last = await probe.wait_status(sentinel["id"], "pending")
            seen = Counter(
                (event, data.get("id"), data.get("status"), data.get("error"))
                for event, data in probe.between(0, last.index)
            )
            expected = Counter(
                ("task_status_event", task_id, "failed", "Worker disconnected")
                for task_id, task_room in held.items()
                if task_room == room
            )
            expected[("jobs_invalidate", None, None, None)] = 1
            assert seen == expected, room
