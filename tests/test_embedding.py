"""Taskhub inside a host application (``taskhub.embedding``): its REST routes in the
host's app with paths unchanged, its events on the host's Socket.IO server beside the
host's own, its work in the host's lifespan, and the host's sign-in and room rules as
hooks. (The example host of examples/host_app, its sockets, browsers and replicas:
tests/embedding/.)"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import socketio
from sqlalchemy import func, select
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from taskhub.embedding import ApiRoute, EmbeddedHub, embed
from taskhub.main import create_app
from taskhub.realtime.host_events import WorkerGone
from taskhub.rules.errors import RoomRefused
from taskhub.rules.records import Principal, TaskRecord
from taskhub.services.identities import Caller
from taskhub.services.room_access import RoomRequest
from taskhub.settings import Settings
from taskhub.store.tables import task_table
from tests.support.api import ApiClient, assert_problem
from tests.support.waiting import eventually

HOST_USERS = {
    "host-token-alice": Principal(
        uuid.UUID("0e4b5c1a-0000-4000-8000-00000000a11c"), "alice", False
    ),
    "host-token-root": Principal(uuid.UUID("0e4b5c1a-0000-4000-8000-000000000001"), "root", True),
}
LOCKED = "locked-room"


class Host:
    """A small host application: its own route, ``connect`` and ``room_join``, its sign-in
    (a table of tokens) and a room lock; what its hooks saw."""

    def __init__(self) -> None:
        self.sio = socketio.AsyncServer(async_mode="asgi")
        self.app = Starlette(routes=[Route("/hello", self.hello)])
        self.connected: list[str] = []
        self.ended: list[TaskRecord] = []
        self.gone: list[WorkerGone] = []
        self.fail_sign_in = False
        self.fail_policy = False

        @self.sio.on("connect")
        async def connect(sid: str, environ: dict[str, Any]) -> None:
            self.connected.append(sid)

        @self.sio.on("room_join")
        async def room_join(sid: str, data: Any) -> str:
            return "the host's own room_join"

    async def hello(self, _request: Request) -> PlainTextResponse:
        return PlainTextResponse("the host's own route")

    async def authenticate(self, caller: Caller) -> Principal | None:
        if self.fail_sign_in:
            raise ConnectionError("the host's user table is unreachable")
        return HOST_USERS.get(caller.token or "")

    async def room_policy(self, request: RoomRequest) -> None:
        if self.fail_policy:
            raise LookupError("the host's room table is unreachable")
        if request.room_id == "unknown-room":
            raise RoomRefused(404, "room-not-found", "Room Not Found", "No such room.")
        key = request.caller.connection.headers.get("lock-token")
        if request.room_id == LOCKED and request.action.writes and key != "the-key":
            raise RoomRefused(423, "room-locked", "Room Locked", "The room is locked.")

    async def task_ended(self, record: TaskRecord) -> None:
        self.ended.append(record)

    async def worker_gone(self, gone: WorkerGone) -> None:
        self.gone.append(gone)


@pytest.fixture
async def host(settings: Settings) -> AsyncIterator[tuple[Host, EmbeddedHub]]:
    host = Host()
    embedded = embed(
        host.app,
        host.sio,
        settings=settings,
        authenticate=host.authenticate,
        room_policy=host.room_policy,
        on_task_ended=host.task_ended,
        on_worker_gone=host.worker_gone,
    )
    async with host.app.router.lifespan_context(host.app):
        yield host, embedded


@pytest.fixture
async def through_host(host: tuple[Host, EmbeddedHub]) -> AsyncIterator[httpx.AsyncClient]:
    asgi = socketio.ASGIApp(host[0].sio, other_asgi_app=host[0].app)
    transport = httpx.ASGITransport(app=asgi)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://host.test") as client:
        yield client


def client(http: httpx.AsyncClient, token: str | None) -> ApiClient:
    return ApiClient(http, token)


async def tasks_in(embedded: EmbeddedHub) -> int:
    async with embedded.hub.db.read() as conn:
        return int(await conn.scalar(select(func.count()).select_from(task_table)) or 0)


async def test_the_rest_api_is_served_under_its_prefix_beside_the_hosts_routes(host, through_host):
    alice = client(through_host, "host-token-alice")
    me = await alice.get("/users/me")
    assert me.status_code == 200, me.text
    assert me.json()["name"] == "alice"
    assert (await through_host.get("/hello")).text == "the host's own route"
    assert isinstance(host[0].app.router.routes[0], ApiRoute)


async def test_the_hosts_sign_in_and_taskhubs_tokens_work_side_by_side(through_host, tokens):
    job = await client(through_host, "host-token-alice").register()
    task = await client(through_host, tokens.bob).submit(job["full_name"])
    assert task["status"] == "pending"


async def test_a_hook_that_knows_nobody_is_401_and_one_that_raises_is_503(host, through_host):
    assert_problem(await client(through_host, "who-is-this").get("/users/me"), 401, "unauthorized")
    host[0].fail_sign_in = True
    refused = await client(through_host, "host-token-alice").get("/users/me")
    assert_problem(refused, 503, "identity-unavailable")


async def test_a_locked_room_refuses_a_submit_with_423_and_nothing_changes(host, through_host):
    alice = client(through_host, "host-token-alice")
    job = await client(through_host, "host-token-root").register(room="@global", name="Open")
    refused = await alice.post(f"/rooms/{LOCKED}/tasks/{job['full_name']}", json={"payload": {}})
    assert_problem(refused, 423, "room-locked")
    assert refused.json()["detail"] == "The room is locked."
    assert await tasks_in(host[1]) == 0
    with_key = await alice.post(
        f"/rooms/{LOCKED}/tasks/{job['full_name']}",
        json={"payload": {}},
        headers={"Lock-Token": "the-key"},
    )
    assert with_key.status_code == 202, with_key.text
    assert (await alice.get(f"/rooms/{LOCKED}/tasks")).status_code == 200  # reading is free


async def test_a_room_the_host_does_not_know_is_404_for_reads_and_task_reads(host, through_host):
    alice = client(through_host, "host-token-alice")
    assert_problem(await alice.get("/rooms/unknown-room/jobs"), 404, "room-not-found")


async def test_a_policy_that_raises_is_503_and_nothing_changes(host, through_host):
    alice = client(through_host, "host-token-alice")
    job = await client(through_host, "host-token-root").register(room="@global", name="Open")
    host[0].fail_policy = True
    refused = await alice.post(f"/rooms/room1/tasks/{job['full_name']}", json={"payload": {}})
    assert_problem(refused, 503, "room-policy-unavailable")
    assert await tasks_in(host[1]) == 0


async def test_the_host_is_told_when_a_task_ends(host, through_host):
    root = client(through_host, "host-token-root")
    job = await root.register()
    task = await root.submit(job["full_name"])
    cancelled = await root.patch(f"/tasks/{task['id']}", json={"status": "cancelled"})
    assert cancelled.status_code == 200, cancelled.text
    await eventually(lambda: host[0].ended, 10, "the host told of the ended task")
    assert [str(record.id) for record in host[0].ended] == [task["id"]]


async def test_the_host_is_told_when_a_worker_goes_with_its_jobs(host, through_host):
    alice = client(through_host, "host-token-alice")
    job = await alice.register()
    second = await alice.register(name="Scale", worker_id=job["worker_id"])
    assert (await alice.delete(f"/workers/{job['worker_id']}")).status_code == 204
    await eventually(lambda: host[0].gone, 10, "the host told of the worker gone")
    assert host[0].gone == [
        WorkerGone(
            uuid.UUID(job["worker_id"]), tuple(sorted([job["full_name"], second["full_name"]])), ()
        )
    ]


def test_the_hosts_socket_handlers_stay_and_taskhubs_join_them(host):
    handlers = host[0].sio.handlers["/"]
    assert "join_job_room" in handlers and "worker_ready" in handlers
    assert "join_provider_room" in handlers
    assert handlers["room_join"].__qualname__.startswith("Host.")  # the host's own


async def test_taskhubs_events_can_take_over_the_hosts(settings):
    host = Host()
    embed(host.app, host.sio, settings=settings, take_over_events=True)
    assert host.sio.handlers["/"]["room_join"].__qualname__ == "SocketHandlers.room_join"


def test_taskhub_serve_is_wired_as_any_host_is(settings):
    app = create_app(settings)
    assert isinstance(app.embedded, EmbeddedHub)
    assert isinstance(app.web.router.routes[0], ApiRoute)
    assert app.web.state.hub is app.hub
