"""The Socket.IO event ``task_update`` on real ``taskhub serve`` processes (SQLite and
PostgreSQL): ``PATCH /tasks/{task_id}`` over a socket (docs/protocol.md, "Task updates over
Socket.IO"). It is the same update by the same rules: answered with the PATCH's body,
fenced by the claim token, published to the room's watchers, and refused, changing
nothing, where the PATCH would be refused."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.support.api import assert_problem
from tests.support.metrics import Samples
from tests.support.names import unique
from tests.support.server import HubServer
from tests.support.sockets import SocketProbe, assert_problem_ack
from tests.support.waiting import eventually
from tests.system.test_task_push import Owner, new_owner

# A small body limit, so that a result past it is quick to send.
SERVER_ENV = {"TASKHUB_MAX_BODY_BYTES": "65536"}
UPDATES_METRIC = "taskhub_socket_task_updates_total"


async def update(probe: SocketProbe, task_id: str, **body: Any) -> Any:
    """The ack of ``task_update`` for ``task_id`` with ``body``."""
    return await probe.call("task_update", {"task_id": task_id, **body})


async def socket_updates(http: httpx.AsyncClient) -> float:
    return Samples((await http.get("/metrics")).text).count(UPDATES_METRIC)


async def claimed_task(
    owner: Owner, submit: dict[str, Any] | None = None, **claim: Any
) -> dict[str, Any]:
    """A new task of the owner's job (with ``submit``'s fields), claimed by its worker
    (with ``claim``'s)."""
    task = await owner.api.submit(owner.job, room=owner.room, **(submit or {}))
    got = await owner.api.claim(owner.worker_id, **claim)
    assert got is not None and got["id"] == task["id"], got
    return got


@pytest.fixture
async def alice(shared_server: HubServer, http: httpx.AsyncClient) -> Owner:
    return await new_owner(http, shared_server.create_user(unique("alice")))


@pytest.fixture
async def socket(shared_server: HubServer, alice: Owner) -> AsyncIterator[SocketProbe]:
    """A socket of Alice's (it joins no room: the event needs none)."""
    async with SocketProbe("alice") as probe:
        await probe.connect(shared_server.base_url, alice.token)
        yield probe


async def test_a_run_reported_over_the_socket_ends_as_by_patch(
    shared_server: HubServer, http: httpx.AsyncClient, alice: Owner, socket: SocketProbe
) -> None:
    """``running`` then ``completed`` with a result, over the socket: each ack is the task
    as a read answers it right after; the room's watcher sees both transitions; the
    counter counts both."""
    before = await socket_updates(http)
    task = await claimed_task(alice)
    token = task["claim_token"]
    async with SocketProbe("watcher") as watcher:
        await watcher.connect(shared_server.base_url, alice.token)
        await watcher.room_join(alice.room)

        running = await update(socket, task["id"], status="running", claim_token=token)
        assert running == await alice.api.task(task["id"])
        assert running["status"] == "running" and running["started_at"] is not None
        done = await update(
            socket, task["id"], status="completed", result={"n": 1}, claim_token=token
        )
        assert done == await alice.api.task(task["id"])
        assert (done["status"], done["result"]) == ("completed", {"n": 1})

        await watcher.wait_status(task["id"], "running")
        await watcher.wait_status(task["id"], "completed")
    assert await socket_updates(http) == before + 2


async def test_an_end_over_the_socket_claims_the_workers_next_tasks(
    alice: Owner, socket: SocketProbe
) -> None:
    """With ``claim_next`` the ack carries ``next``: the worker's next task, claimed and
    started for it with a fresh token, as a PATCH with ``claim_next`` answers."""
    first = await claimed_task(alice, start=True)
    second = await alice.api.submit(alice.job, room=alice.room)
    ask = {"worker_id": alice.worker_id, "max_tasks": 2, "start": True}

    ack = await update(
        socket, first["id"], status="completed", claim_token=first["claim_token"], claim_next=ask
    )

    assert ack["status"] == "completed" and ack["next_started"] is True, ack
    [got] = ack["next"]
    assert (got["id"], got["status"]) == (second["id"], "running")
    assert got["worker_id"] == alice.worker_id
    assert uuid.UUID(got["claim_token"]) != uuid.UUID(first["claim_token"])
    assert (await alice.api.task(second["id"]))["status"] == "running"


async def test_an_outcome_over_the_socket_is_fenced_and_accepted_once(
    alice: Owner, socket: SocketProbe
) -> None:
    """Another token: 409 ``stale-claim``, nothing changes. The task's own token: accepted.
    The same outcome again, over the socket or by PATCH: 409, the first one stands."""
    task = await claimed_task(alice, start=True)
    token = task["claim_token"]

    wrong = await update(socket, task["id"], status="completed", claim_token=str(uuid.uuid4()))
    assert_problem_ack(wrong, 409, "stale-claim")
    assert (await alice.api.task(task["id"]))["status"] == "running"

    done = await update(socket, task["id"], status="completed", result=1, claim_token=token)
    assert (done["status"], done["result"]) == ("completed", 1)
    again = await update(socket, task["id"], status="completed", result=2, claim_token=token)
    assert isinstance(again, dict) and again["status"] == 409, again
    by_patch = await alice.api.transition(task["id"], "failed", error="late", claim_token=token)
    assert by_patch.status_code == 409, by_patch.text
    final = await alice.api.task(task["id"])
    assert (final["status"], final["result"], final["error"]) == ("completed", 1, None)


async def test_a_failure_with_retry_over_the_socket_queues_the_next_attempt(
    alice: Owner, socket: SocketProbe
) -> None:
    """``failed`` with ``retry`` puts the task back in the queue, as the PATCH does: it is
    claimed again (after the retry backoff) as attempt 2 with a fresh token, and attempt
    1's token is refused from then on."""
    first = await claimed_task(alice, {"max_attempts": 2}, start=True)
    ack = await update(
        socket,
        first["id"],
        status="failed",
        error="flaky",
        retry=True,
        claim_token=first["claim_token"],
    )
    assert (ack["status"], ack["attempt"]) == ("pending", 1), ack

    second = await eventually(
        lambda: alice.api.claim(alice.worker_id, start=True),
        15,
        "the second attempt",
        interval=0.1,
    )
    assert (second["id"], second["attempt"]) == (first["id"], 2)
    late = await update(socket, first["id"], status="completed", claim_token=first["claim_token"])
    assert_problem_ack(late, 409, "stale-claim")
    done = await update(socket, first["id"], status="completed", claim_token=second["claim_token"])
    assert (done["status"], done["attempt"]) == ("completed", 2)


async def test_refused_updates_change_nothing(alice: Owner, socket: SocketProbe) -> None:
    """What the PATCH refuses the event refuses with the same problem (422 for a missing or
    malformed ``task_id`` or an invalid body, 413 past ``TASKHUB_MAX_BODY_BYTES``, 404 for
    an unknown task), and the task stays as it was; a valid update afterwards applies."""
    task = await claimed_task(alice)
    token = task["claim_token"]
    refused: list[tuple[dict[str, Any], int, str]] = [
        ({"status": "completed", "claim_token": token}, 422, "validation-error"),
        ({"task_id": "nope", "status": "completed", "claim_token": token}, 422, "validation-error"),
        ({"task_id": task["id"], "status": "bogus", "claim_token": token}, 422, "validation-error"),
        ({"task_id": task["id"], "status": "running", "result": 1}, 422, "validation-error"),
        ({"task_id": task["id"], "claim_token": token}, 422, "validation-error"),
        (
            {"task_id": task["id"], "status": "completed", "result": "x" * 70_000},
            413,
            "payload-too-large",
        ),
        ({"task_id": str(uuid.uuid4()), "status": "completed"}, 404, "task-not-found"),
    ]
    before = await alice.api.task(task["id"])
    assert before["status"] == "claimed"
    for data, status, slug in refused:
        assert_problem_ack(await socket.call("task_update", data), status, slug)
        assert await alice.api.task(task["id"]) == before, data

    ack = await update(socket, task["id"], status="failed", error="a\u0000b", claim_token=token)
    assert (ack["status"], ack["error"]) == ("failed", "a\ufffdb")  # as the PATCH stores it


async def test_another_users_socket_is_refused_as_their_patch_is(
    shared_server: HubServer, http: httpx.AsyncClient, alice: Owner
) -> None:
    """Bob, holding Alice's task's token: his update over the socket gets the problem his
    PATCH gets, and neither changes the task."""
    task = await claimed_task(alice)
    bob = shared_server.create_user(unique("bob"))
    body = {"status": "completed", "claim_token": task["claim_token"]}
    response = await http.patch(
        f"/v1/joblib/tasks/{task['id']}", json=body, headers={"Authorization": f"Bearer {bob}"}
    )
    problem = assert_problem(response, response.status_code, response.json()["type"].split("/")[-1])
    assert response.status_code in (403, 404)
    async with SocketProbe("bob") as probe:
        await probe.connect(shared_server.base_url, bob)
        ack = await update(probe, task["id"], **body)
    assert_problem_ack(ack, problem["status"], problem["type"].split("/")[-1])
    assert (await alice.api.task(task["id"]))["status"] == "claimed"


async def test_a_hub_without_worker_shortcuts_answers_404_and_keeps_the_patch(
    hub_without_shortcuts: HubServer,
) -> None:
    """With ``TASKHUB_WORKER_SHORTCUTS=false`` the event is answered 404 ``not-found``, as an
    older hub answers an unknown event; the task is unchanged, and the PATCH still works."""
    hub = hub_without_shortcuts
    async with httpx.AsyncClient(base_url=hub.base_url, timeout=15.0, trust_env=False) as http:
        alice = await new_owner(http, hub.create_user(unique("alice")))
        task = await claimed_task(alice)
        token = task["claim_token"]
        async with SocketProbe("alice") as probe:
            await probe.connect(hub.base_url, alice.token)
            ack = await update(probe, task["id"], status="running", claim_token=token)
            assert_problem_ack(ack, 404, "not-found")
        assert (await alice.api.task(task["id"]))["status"] == "claimed"
        response = await alice.api.transition(task["id"], "running", claim_token=token)
        assert response.status_code == 200, response.text
        assert await socket_updates(http) == 0
