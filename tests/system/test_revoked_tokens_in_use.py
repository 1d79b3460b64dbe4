"""A token revoked while it is in use, on real ``taskhub serve`` processes (SQLite and
PostgreSQL; issue #44, L2): what it holds open ends within the authentication cache's
lifetime (``TASKHUB_AUTH_CACHE_SECONDS``, re-checked at least a second apart).

- A long-poll waiting with it is answered 401 ``unauthorized`` instead of the task when
  its wait is over.
- A socket that connected with it is disconnected, and the task-push grant it held
  (``worker_ready``) lapses: a task submitted after is not pushed to it; it stays pending
  for the worker's own claim (with another token of the same user).
"""

from __future__ import annotations

import asyncio

import httpx

from taskhub.services import users
from taskhub.settings import Settings
from taskhub.store.database import Database
from tests.support.api import ApiClient, assert_problem
from tests.support.metrics import Samples
from tests.support.names import unique
from tests.support.server import HubServer, run_async
from tests.support.sockets import SocketProbe
from tests.support.waiting import eventually

AUTH_CACHE_SECONDS = 1.0
LONG_WAIT = 120
SERVER_ENV = {
    "TASKHUB_AUTH_CACHE_SECONDS": str(AUTH_CACHE_SECONDS),
    "TASKHUB_LONG_POLL_MAX_WAIT_SECONDS": str(LONG_WAIT),
}
# One re-check period, a read, and room for a slow machine; the old code answered a
# revoked token's long-poll only when its wait was over (200, LONG_WAIT seconds later).
REVOKED_WITHIN = AUTH_CACHE_SECONDS + 1 + 8


def another_token(database_url: str, name: str) -> str:
    """A second token of the user called ``name`` (as ``taskhub tokens create`` issues)."""

    async def create() -> str:
        db = Database(Settings(database_url=database_url))
        try:
            return await users.create_token(db, name)
        finally:
            await db.dispose()

    return run_async(create())


async def waiters(http: httpx.AsyncClient) -> float:
    """The long-polls waiting on the server now (the module's tests run one at a time)."""
    return Samples((await http.get("/metrics")).text).count("taskhub_long_poll_waiters")


async def waiters_now(http: httpx.AsyncClient, count: float) -> bool:
    return await waiters(http) == count


async def test_a_long_poll_whose_token_is_revoked_is_answered_401(
    shared_server: HubServer, http: httpx.AsyncClient, lab: str
) -> None:
    alice_token = shared_server.create_user(unique("alice"))
    bob_token = shared_server.create_user(unique("bob"))
    alice = ApiClient(http, alice_token)
    await alice.register(room=lab, name="R", schema={})
    task = await alice.submit(f"{lab}:modifiers:R", room=lab)
    prefer = {"Prefer": f"wait={LONG_WAIT}"}
    before = await waiters(http)
    async with httpx.AsyncClient(
        base_url=shared_server.base_url, timeout=LONG_WAIT + 30, trust_env=False
    ) as waiting:
        alices = asyncio.create_task(
            ApiClient(waiting, alice_token).get(f"/tasks/{task['id']}", headers=prefer)
        )
        bobs = asyncio.create_task(
            ApiClient(waiting, bob_token).get(f"/tasks/{task['id']}", headers=prefer)
        )
        await eventually(lambda: waiters_now(http, before + 2), 10, "both long-polls waiting", 0.02)
        shared_server.revoke_token(alice_token)
        answer = await asyncio.wait_for(alices, REVOKED_WITHIN)
        assert_problem(answer, 401, "unauthorized")
        assert not bobs.done(), "another user's long-poll must wait on"
        admin = ApiClient(http, shared_server.admin_token)
        assert (await admin.transition(task["id"], "cancelled")).status_code == 200
        ended = await asyncio.wait_for(bobs, 10)
        assert ended.status_code == 200 and ended.json()["status"] == "cancelled"


async def test_a_socket_holding_a_push_grant_is_disconnected_and_pushed_nothing_after(
    shared_server: HubServer, http: httpx.AsyncClient, lab: str
) -> None:
    name = unique("worker-owner")
    socket_token = shared_server.create_user(name)
    rest_token = another_token(shared_server.database_url, name)
    owner = ApiClient(http, rest_token)
    admin = ApiClient(http, shared_server.admin_token)
    job = f"{lab}:modifiers:R"
    worker_id = (await owner.register(room=lab, name="R", schema={}))["worker_id"]

    async with SocketProbe("worker") as worker:
        await worker.connect(shared_server.base_url, socket_token)
        await worker.join_job_room(job, worker_id)
        ack = await worker.call("worker_ready", {"worker_id": worker_id, "slots": 2})
        assert ack == {"worker_id": worker_id, "slots": 2}, ack
        # The grant works: a task submitted now is pushed (claimed and started for it).
        first = await admin.submit(job, room=lab)
        pushed = await worker.wait_for("task_pushed")
        assert [task["id"] for task in pushed.data["tasks"]] == [first["id"]]

        gone = asyncio.Event()
        worker.client.on("disconnect", lambda *_reason: gone.set())
        shared_server.revoke_token(socket_token)
        await asyncio.wait_for(gone.wait(), REVOKED_WITHIN)
        assert not worker.client.connected

        # The slot it still held lapsed with the socket: the next task is not pushed
        # (a push would have been under way before the submit was answered).
        second = await admin.submit(job, room=lab)
        assert (await owner.task(second["id"]))["status"] == "pending"
        claimed = await owner.claim(worker_id)
        assert claimed is not None and claimed["id"] == second["id"], claimed
        assert [data["tasks"][0]["id"] for data in worker.named("task_pushed")] == [first["id"]]
