"""Task push on real ``taskhub serve`` processes (SQLite and PostgreSQL, and two replicas).

The task-push extension (``app/realtime/task_push.py``): a worker whose socket joined a job
room grants the hub slots with ``worker_ready {worker_id, slots}``; while the hub holds
some, it claims **and starts** the worker's tasks for it (the fenced statement of
``POST /tasks/claim`` with ``"start": true``) as soon as they are available, and sends them
to that socket as ``task_pushed {worker_id, tasks}``, each task as a claim answers it
(``running``, ``started_at``, ``worker_id``, a fresh ``claim_token``). ``worker_pause``
takes the grant back; a socket's grants lapse when it disconnects. Errors (``worker_ready``
before joining: 409 ``worker-not-joined``; bad data: 422 ``validation-error``; a hub with
``TASKHUB_WORKER_SHORTCUTS=false``: 404 ``not-found``) change nothing.

"Not pushed" is shown without waiting for a time: the task stays ``pending``, proven by a
REST claim of the same worker that then takes it. A wrong push would have been under way
before that claim was even sent (a submit, and a grant, start the hub's push before they
are answered), and the claim would come back empty.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.support.api import ApiClient, assert_problem
from tests.support.databases import REDIS_URL
from tests.support.metrics import Samples
from tests.support.names import unique
from tests.support.server import HubServer, running_replicas
from tests.support.sockets import SocketProbe, assert_problem_ack
from tests.support.waiting import eventually

PUSHED_KEYS = frozenset({"worker_id", "tasks"})
PUSH_METRIC = "taskhub_worker_shortcuts_total"
SOCKETS_METRIC = "taskhub_connected_sockets"
# The most slots the hub holds for one worker (``MAX_GRANTED_SLOTS``).
MAX_SLOTS = 100


# -- helpers -------------------------------------------------------------------------------


@dataclass
class Owner:
    """A user's REST client, their worker, and the one job (of its own room) it serves."""

    api: ApiClient
    token: str
    room: str
    job: str
    worker_id: str


async def new_owner(http: httpx.AsyncClient, token: str) -> Owner:
    """Register ``<room>:modifiers:R`` with a new worker of the token's user."""
    api = ApiClient(http, token)
    room = unique("push")
    worker_id = (await api.register(room=room, name="R", schema={}))["worker_id"]
    return Owner(api, token, room, f"{room}:modifiers:R", worker_id)


async def ready(probe: SocketProbe, worker_id: str, slots: int) -> int:
    """``worker_ready``, acknowledged with ``{worker_id, slots}``: the slots held now."""
    ack = await probe.call("worker_ready", {"worker_id": worker_id, "slots": slots})
    assert isinstance(ack, dict) and set(ack) == {"worker_id", "slots"}, ack
    assert ack["worker_id"] == worker_id, ack
    return int(ack["slots"])


async def pause(probe: SocketProbe, worker_id: str) -> int:
    """``worker_pause``, acknowledged with ``{worker_id, slots}``: the slots returned."""
    ack = await probe.call("worker_pause", {"worker_id": worker_id})
    assert isinstance(ack, dict) and set(ack) == {"worker_id", "slots"}, ack
    assert ack["worker_id"] == worker_id, ack
    return int(ack["slots"])


async def pushed(
    probe: SocketProbe, worker_id: str, count: int, *, after: int
) -> list[dict[str, Any]]:
    """The tasks of the ``task_pushed`` events at index ``>= after``, in the order they
    came, once there are ``count`` of them; every event is for ``worker_id``."""

    def enough(_data: Any) -> bool:
        return sum(len(data["tasks"]) for data in named_after(probe, "task_pushed", after)) >= count

    await probe.wait_for("task_pushed", enough, after=after)
    tasks: list[dict[str, Any]] = []
    for data in named_after(probe, "task_pushed", after):
        assert set(data) == PUSHED_KEYS, data
        assert data["worker_id"] == worker_id, data
        assert isinstance(data["tasks"], list) and data["tasks"], data
        tasks.extend(data["tasks"])
    return tasks


async def both_refused(probe: SocketProbe, worker_id: str, status: int, slug: str) -> None:
    """``worker_ready`` (2 slots) and ``worker_pause`` for ``worker_id`` are both answered
    with the problem ``status`` / ``slug``."""
    grant = {"worker_id": worker_id, "slots": 2}
    assert_problem_ack(await probe.call("worker_ready", grant), status, slug)
    assert_problem_ack(await probe.call("worker_pause", {"worker_id": worker_id}), status, slug)


def assert_started_for(task: dict[str, Any], worker_id: str) -> None:
    """A pushed task is claimed and started for the worker, with a claim token."""
    assert task["status"] == "running", task
    assert task["started_at"] is not None, task
    assert task["worker_id"] == worker_id, task
    assert uuid.UUID(task["claim_token"]), task
    assert task["queue_position"] is None, task


def pushed_ids(probe: SocketProbe) -> set[str]:
    return {task["id"] for data in probe.named("task_pushed") for task in data["tasks"]}


async def still_pending(owner: Owner, task_id: str) -> None:
    """``task_id`` was not pushed: it is pending, and the worker's REST claim takes it."""
    assert (await owner.api.task(task_id))["status"] == "pending"
    claimed = await owner.api.claim(owner.worker_id)
    assert claimed is not None and claimed["id"] == task_id, claimed
    assert claimed["status"] == "claimed", claimed


async def push_count(http: httpx.AsyncClient) -> float:
    return Samples((await http.get("/metrics")).text).count(PUSH_METRIC, {"kind": "push"})


async def connected_sockets(http: httpx.AsyncClient) -> float:
    return Samples((await http.get("/metrics")).text).count(SOCKETS_METRIC)


async def fewer_sockets(http: httpx.AsyncClient, than: float) -> bool:
    return await connected_sockets(http) < than


def named_after(probe: SocketProbe, event: str, after: int) -> list[Any]:
    """Payloads of every ``event`` at index ``>= after``."""
    return [item.data for item in probe.received[after:] if item.event == event]


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture
async def alice(shared_server: HubServer, http: httpx.AsyncClient) -> Owner:
    """A new user with a worker registered for the job of a room of its own."""
    return await new_owner(http, shared_server.create_user(unique("alice")))


@pytest.fixture
async def worker(shared_server: HubServer, alice: Owner) -> AsyncIterator[SocketProbe]:
    """Alice's worker's socket, joined to the job room of its job (it granted nothing)."""
    async with SocketProbe("worker") as probe:
        await probe.connect(shared_server.base_url, alice.token)
        await probe.join_job_room(alice.job, alice.worker_id)
        yield probe


# -- on one hub, both engines ---------------------------------------------------------------


async def test_an_idle_workers_grant_gets_the_next_submitted_task_pushed_running(
    http: httpx.AsyncClient, alice: Owner, worker: SocketProbe
) -> None:
    """A worker with nothing to do grants 2 slots: the ack says the hub holds 2. A task
    submitted then is claimed and started for the worker and sent in ``task_pushed``:
    ``running``, ``started_at``, ``worker_id`` and a ``claim_token``, the task body as a
    claim answers it, as a REST read answers it (plus the token); the push is counted."""
    before = await push_count(http)
    assert await ready(worker, alice.worker_id, 2) == 2
    start = worker.mark()

    task = await alice.api.submit(alice.job, room=alice.room, payload={"angle": 90})
    [got] = await pushed(worker, alice.worker_id, 1, after=start)

    assert got["id"] == task["id"]
    assert_started_for(got, alice.worker_id)
    assert (got["attempt"], got["payload"], got["job_name"]) == (1, {"angle": 90}, alice.job)
    read = await alice.api.task(task["id"])
    assert {key: value for key, value in got.items() if key != "claim_token"} == read
    assert await push_count(http) == before + 1


async def test_tasks_pending_before_the_grant_are_pushed_by_it_in_queue_order(
    alice: Owner, worker: SocketProbe
) -> None:
    """Three tasks wait; a grant of 2 pushes the two oldest at once (no more than the slots
    granted: the third stays pending); the next grant of 1 pushes the third."""
    ids = [(await alice.api.submit(alice.job, room=alice.room))["id"] for _ in range(3)]
    start = worker.mark()

    assert await ready(worker, alice.worker_id, 2) == 2
    first = await pushed(worker, alice.worker_id, 2, after=start)
    assert [task["id"] for task in first] == ids[:2]
    for task in first:
        assert_started_for(task, alice.worker_id)
        assert (await alice.api.task(task["id"]))["status"] == "running"
    assert (await alice.api.task(ids[2]))["status"] == "pending"

    start = worker.mark()
    assert await ready(worker, alice.worker_id, 1) == 1
    [third] = await pushed(worker, alice.worker_id, 1, after=start)
    assert third["id"] == ids[2]
    assert_started_for(third, alice.worker_id)
    assert sorted(pushed_ids(worker)) == sorted(ids)  # each pushed once
    assert sum(len(data["tasks"]) for data in worker.named("task_pushed")) == 3


async def test_a_pushed_task_is_fenced_by_its_claim_token(
    alice: Owner, worker: SocketProbe
) -> None:
    """The pushed task's token is the one the hub checks: an outcome with another token
    is refused 409 ``stale-claim`` (nothing changes), the outcome with its token is
    accepted, and a second outcome is refused 409: none is accepted twice."""
    assert await ready(worker, alice.worker_id, 1) == 1
    start = worker.mark()
    task = await alice.api.submit(alice.job, room=alice.room)
    [got] = await pushed(worker, alice.worker_id, 1, after=start)
    token = got["claim_token"]

    wrong = await alice.api.transition(
        task["id"], "completed", result={"by": "stranger"}, claim_token=str(uuid.uuid4())
    )
    assert_problem(wrong, 409, "stale-claim")
    assert (await alice.api.task(task["id"]))["status"] == "running"

    done = await alice.api.transition(task["id"], "completed", result={"n": 1}, claim_token=token)
    assert done.status_code == 200, done.text
    assert (done.json()["status"], done.json()["result"]) == ("completed", {"n": 1})

    again = await alice.api.transition(task["id"], "completed", result={"n": 2}, claim_token=token)
    assert again.status_code == 409, again.text
    failed = await alice.api.transition(task["id"], "failed", error="late", claim_token=token)
    assert failed.status_code == 409, failed.text
    final = await alice.api.task(task["id"])
    assert (final["status"], final["result"], final["error"]) == ("completed", {"n": 1}, None)


async def test_a_pushed_task_that_fails_for_a_retry_is_pushed_again_as_its_next_attempt(
    alice: Owner, worker: SocketProbe
) -> None:
    """A pushed task reported failed with ``retry`` goes back to the queue (after the
    retry backoff); when it is due again it is pushed to the worker's grant as attempt 2
    with a fresh claim token, and attempt 1's token is refused from then on."""
    assert await ready(worker, alice.worker_id, 2) == 2
    start = worker.mark()
    task = await alice.api.submit(alice.job, room=alice.room, max_attempts=2)
    [first] = await pushed(worker, alice.worker_id, 1, after=start)
    assert first["attempt"] == 1

    start = worker.mark()
    failed = await alice.api.transition(
        task["id"], "failed", error="flaky", retry=True, claim_token=first["claim_token"]
    )
    assert failed.status_code == 200, failed.text
    assert failed.json()["status"] == "pending"
    [second] = await pushed(worker, alice.worker_id, 1, after=start)

    assert second["id"] == task["id"] and second["attempt"] == 2
    assert_started_for(second, alice.worker_id)
    assert second["claim_token"] != first["claim_token"]
    late = await alice.api.transition(task["id"], "completed", claim_token=first["claim_token"])
    assert_problem(late, 409, "stale-claim")
    done = await alice.api.transition(task["id"], "completed", claim_token=second["claim_token"])
    assert done.status_code == 200, done.text


async def test_the_hub_holds_at_most_100_slots_for_a_worker(
    alice: Owner, worker: SocketProbe
) -> None:
    """Grants add up to at most 100 slots held for one worker: 3, then 100 more, then 1
    more are answered 3, 100, 100 (nothing is pending, so no push takes any)."""
    assert await ready(worker, alice.worker_id, 3) == 3
    assert await ready(worker, alice.worker_id, MAX_SLOTS) == MAX_SLOTS
    assert await ready(worker, alice.worker_id, 1) == MAX_SLOTS
    assert worker.named("task_pushed") == []


async def test_a_pause_returns_every_slot_no_push_used(alice: Owner, worker: SocketProbe) -> None:
    """``worker_pause`` answers the slots it takes back: all of a grant that no push used
    (nothing is pending, so none ever will), then nothing, once nothing is granted."""
    assert await ready(worker, alice.worker_id, 3) == 3
    assert await pause(worker, alice.worker_id) == 3
    assert await pause(worker, alice.worker_id) == 0
    assert worker.named("task_pushed") == []


async def test_after_a_pause_new_tasks_are_not_pushed(alice: Owner, worker: SocketProbe) -> None:
    """A grant of 2 that one push used is taken back: at most the one slot left comes back,
    a second pause returns nothing, and a task submitted afterwards is not pushed (it stays
    pending)."""
    assert await ready(worker, alice.worker_id, 2) == 2
    start = worker.mark()
    used = await alice.api.submit(alice.job, room=alice.room)
    [got] = await pushed(worker, alice.worker_id, 1, after=start)
    assert got["id"] == used["id"]
    # 1 were nothing under way; but the hub looks for more tasks after a push, and a pause
    # meeting that look-up answers 0 (the previous test fails on that answer).
    assert await pause(worker, alice.worker_id) in (0, 1)
    assert await pause(worker, alice.worker_id) == 0

    start = worker.mark()
    task = await alice.api.submit(alice.job, room=alice.room)
    await worker.wait_for("task_available", lambda d: d["task_id"] == task["id"], after=start)
    await still_pending(alice, task["id"])
    assert pushed_ids(worker) == {used["id"]}


async def test_refused_grants_change_nothing(shared_server: HubServer, alice: Owner) -> None:
    """``worker_ready`` / ``worker_pause`` for a worker that has not joined through this
    socket: 409 ``worker-not-joined``; a ``slots`` that is not an integer from 0 to 100, or a
    ``worker_id`` that is not a UUID: 422 ``validation-error``. After each refusal a task
    waiting at the time is not pushed (it stays pending); a valid grant afterwards pushes."""
    invalid: list[dict[str, Any]] = [
        {"worker_id": alice.worker_id, "slots": -1},
        {"worker_id": alice.worker_id, "slots": MAX_SLOTS + 1},
        {"worker_id": alice.worker_id, "slots": "2"},
        {"worker_id": alice.worker_id, "slots": 2.0},
        {"worker_id": alice.worker_id, "slots": True},
        {"worker_id": alice.worker_id, "slots": None},
        {"worker_id": alice.worker_id},
        {"worker_id": "not-a-uuid", "slots": 2},
        {"worker_id": 7, "slots": 2},
        {"slots": 2},
    ]
    async with SocketProbe("worker") as worker:
        await worker.connect(shared_server.base_url, alice.token)

        async def refused(event: str, data: Any, status: int, slug: str) -> None:
            task = await alice.api.submit(alice.job, room=alice.room)
            assert_problem_ack(await worker.call(event, data), status, slug)
            await still_pending(alice, task["id"])

        ready_data = {"worker_id": alice.worker_id, "slots": 2}
        await refused("worker_ready", ready_data, 409, "worker-not-joined")
        await refused("worker_pause", {"worker_id": alice.worker_id}, 409, "worker-not-joined")

        await worker.join_job_room(alice.job, alice.worker_id)
        for data in invalid:
            await refused("worker_ready", data, 422, "validation-error")
        await refused("worker_pause", {"worker_id": "not-a-uuid"}, 422, "validation-error")
        other = {"worker_id": str(uuid.uuid4()), "slots": 2}  # not joined here (nor anywhere)
        await refused("worker_ready", other, 409, "worker-not-joined")
        assert worker.named("task_pushed") == []

        task = await alice.api.submit(alice.job, room=alice.room)  # the control
        start = worker.mark()
        assert await ready(worker, alice.worker_id, 1) == 1
        [got] = await pushed(worker, alice.worker_id, 1, after=start)
        assert got["id"] == task["id"]


async def test_another_users_socket_cannot_grant_for_a_worker_it_does_not_own(
    shared_server: HubServer, alice: Owner, worker: SocketProbe
) -> None:
    """Bob cannot join the job room of Alice's worker (403), so his ``worker_ready`` for it
    is refused 409 ``worker-not-joined``; Alice's waiting task is not pushed to anyone."""
    task = await alice.api.submit(alice.job, room=alice.room)
    async with SocketProbe("bob") as bob:
        await bob.connect(shared_server.base_url, shared_server.create_user(unique("bob")))
        join = {"job_name": alice.job, "worker_id": alice.worker_id}
        assert_problem_ack(await bob.call("join_job_room", join), 403, "forbidden")
        await both_refused(bob, alice.worker_id, 409, "worker-not-joined")

        await still_pending(alice, task["id"])
        assert bob.named("task_pushed") == []
        assert worker.named("task_pushed") == []


async def test_a_socket_that_disconnects_loses_its_grants(
    shared_server: HubServer, http: httpx.AsyncClient, alice: Owner
) -> None:
    """A socket grants 2 slots and disconnects; the worker's new socket joins and grants
    nothing. A task submitted then is pushed to neither: it stays pending."""
    async with SocketProbe("old") as old, SocketProbe("new") as new:
        await old.connect(shared_server.base_url, alice.token)
        await old.join_job_room(alice.job, alice.worker_id)
        assert await ready(old, alice.worker_id, 2) == 2
        await new.connect(shared_server.base_url, alice.token)
        connected = await connected_sockets(http)

        await old.disconnect()
        await eventually(  # the hub has seen the disconnect
            lambda: fewer_sockets(http, connected), 10, "the old socket's end on the hub"
        )
        await new.join_job_room(alice.job, alice.worker_id)  # within the presence grace

        task = await alice.api.submit(alice.job, room=alice.room)
        await new.wait_for("task_available", lambda d: d["task_id"] == task["id"])
        await still_pending(alice, task["id"])
        assert new.named("task_pushed") == []
        assert old.named("task_pushed") == []


async def test_a_pushed_task_cancelled_over_rest_is_cancelled_on_the_socket(
    alice: Owner, worker: SocketProbe
) -> None:
    """Cancelling a pushed (running) task sends ``task_cancelled`` to the worker's socket;
    the worker's later outcome with the task's claim token is refused 409."""
    assert await ready(worker, alice.worker_id, 1) == 1
    start = worker.mark()
    task = await alice.api.submit(alice.job, room=alice.room)
    [got] = await pushed(worker, alice.worker_id, 1, after=start)

    cancelled = await alice.api.transition(task["id"], "cancelled")
    assert cancelled.status_code == 200, cancelled.text
    notice = await worker.wait_for("task_cancelled", after=start)
    assert notice.data == {
        "task_id": task["id"],
        "job_name": alice.job,
        "worker_id": alice.worker_id,
    }

    late = await alice.api.transition(
        task["id"], "completed", result={"late": True}, claim_token=got["claim_token"]
    )
    assert late.status_code == 409, late.text
    final = await alice.api.task(task["id"])
    assert (final["status"], final["result"]) == ("cancelled", None)


# -- a hub without the worker shortcuts -------------------------------------------------------


async def test_a_hub_without_worker_shortcuts_answers_404_and_pushes_nothing(
    hub_without_shortcuts: HubServer,
) -> None:
    """With ``TASKHUB_WORKER_SHORTCUTS=false`` the events are answered 404 ``not-found``
    (also for a joined worker with valid data) and a waiting task is not pushed."""
    hub = hub_without_shortcuts
    async with httpx.AsyncClient(base_url=hub.base_url, timeout=15.0, trust_env=False) as http:
        alice = await new_owner(http, hub.create_user(unique("alice")))
        async with SocketProbe("worker") as worker:
            await worker.connect(hub.base_url, alice.token)
            await worker.join_job_room(alice.job, alice.worker_id)
            task = await alice.api.submit(alice.job, room=alice.room)

            await both_refused(worker, alice.worker_id, 404, "not-found")

            await still_pending(alice, task["id"])
            assert worker.named("task_pushed") == []
            assert await push_count(http) == 0


# -- two replicas ---------------------------------------------------------------------------


@dataclass
class Cluster:
    a: HubServer
    b: HubServer
    alice_token: str


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """Replicas A and B on one PostgreSQL database and Redis, under a Redis namespace of
    their own (its keys are deleted afterwards)."""
    directory: Path = tmp_path_factory.mktemp("replicas")
    namespace = f"test-{uuid.uuid4().hex[:12]}"
    env = {"TASKHUB_REDIS_URL": REDIS_URL, "TASKHUB_REDIS_NAMESPACE": namespace}
    try:
        with running_replicas("postgres", directory, 2, env=env) as (a, b):
            yield Cluster(a, b, a.create_user(unique("alice")))
    finally:
        with redis.Redis.from_url(REDIS_URL) as client:
            keys = list(client.scan_iter(f"{namespace}:*"))
            if keys:
                client.delete(*keys)


async def test_a_task_submitted_on_one_replica_is_pushed_by_the_replica_holding_the_grant(
    cluster: Cluster,
) -> None:
    """The worker's socket on A grants a slot; a task submitted through B is claimed,
    started and pushed to it by A, which hears of the available task from B through Redis."""
    async with (
        httpx.AsyncClient(base_url=cluster.a.base_url, timeout=15.0, trust_env=False) as http_a,
        httpx.AsyncClient(base_url=cluster.b.base_url, timeout=15.0, trust_env=False) as http_b,
    ):
        alice = await new_owner(http_a, cluster.alice_token)
        on_b = ApiClient(http_b, cluster.alice_token)
        async with SocketProbe("worker-on-a") as worker:
            await worker.connect(cluster.a.base_url, alice.token)
            await worker.join_job_room(alice.job, alice.worker_id)
            assert await ready(worker, alice.worker_id, 1) == 1
            pushes_on_a, pushes_on_b = await push_count(http_a), await push_count(http_b)
            start = worker.mark()

            task = await on_b.submit(alice.job, room=alice.room)
            [got] = await pushed(worker, alice.worker_id, 1, after=start)

            assert got["id"] == task["id"]
            assert_started_for(got, alice.worker_id)
            read = await on_b.task(task["id"])
            assert (read["status"], read["worker_id"]) == ("running", alice.worker_id)
            assert await push_count(http_a) == pushes_on_a + 1
            assert await push_count(http_b) == pushes_on_b
