"""The REST API has one router: every request under its prefix — an endpoint, a 404, a
405, a trailing slash to redirect — is answered by it; everything else (Socket.IO, the
page, health) goes through Starlette. Both answer alike: the same problems, the same
request ids."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import httpx
import pytest

from taskhub.main import TaskhubApp
from taskhub.services import workers as worker_service
from tests.support.api import PREFIX, ApiClient, assert_problem


class CountingApp:
    """Wraps Starlette to count the requests that reach it."""

    def __init__(self, inner: object) -> None:
        self.inner = inner
        self.paths: list[str] = []

    async def __call__(self, scope, receive, send):  # type: ignore[no-untyped-def]
        if scope["type"] == "http":
            self.paths.append(scope["path"])
        await self.inner(scope, receive, send)  # type: ignore[operator]


@pytest.fixture
def starlette_requests(app: TaskhubApp) -> list[str]:
    counting = CountingApp(app.other_asgi_app)
    app.other_asgi_app = counting
    return counting.paths


async def test_api_requests_do_not_pass_through_starlette(alice, starlette_requests):
    job = await alice.register()
    task = await alice.submit(job["full_name"])
    assert (await alice.claim(job["worker_id"]))["id"] == task["id"]
    assert (await alice.transition(task["id"], "running")).status_code == 200
    assert (await alice.get("/workers")).status_code == 200
    assert starlette_requests == []


async def test_api_misses_are_answered_by_the_api_router_the_rest_by_starlette(
    http, alice, starlette_requests
):
    assert (await http.get("/healthz")).status_code == 200
    missing = assert_problem(await alice.get("/no/such/thing"), 404, "not-found")
    assert missing["detail"] == f"No route for {PREFIX}/no/such/thing."
    response = await alice.delete("/tasks/claim")
    assert_problem(response, 405, "method-not-allowed")
    assert response.headers["allow"] == "POST"
    assert response.headers["x-request-id"]
    assert starlette_requests == ["/healthz"]


async def test_a_trailing_slash_is_redirected_to_the_route_without_it(alice, starlette_requests):
    response = await alice.get("/workers/")
    assert response.status_code == 307
    assert response.headers["location"].endswith(f"{PREFIX}/workers")
    assert starlette_requests == []


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [
        ("DELETE", "/rooms/room1/jobs", {"GET", "HEAD", "PUT"}),
        ("OPTIONS", "/tasks/01a21772-9eca-7784-bb61-e3d7034a662c", {"GET", "HEAD", "PATCH"}),
        ("PUT", "/workers", {"GET", "HEAD", "POST"}),
        ("POST", "/workers/01a21772-9eca-7784-bb61-e3d7034a662c", {"PATCH", "DELETE"}),
        ("DELETE", "/rooms/room1/tasks/room1:modifiers:Rotate", {"POST"}),
    ],
)
async def test_a_405_lists_every_method_of_the_path_in_allow(alice, method, path, allowed):
    """RFC 9110: the methods the resource supports, not those of the first endpoint
    registered on its path."""
    response = await alice.request(method, path)
    assert_problem(response, 405, "method-not-allowed")
    assert set(response.headers["allow"].split(", ")) == allowed


async def test_every_method_of_a_path_answers_under_a_root_path(mounted):
    worker = (await mounted.post("/workers")).json()
    assert (await mounted.request("PATCH", f"/workers/{worker['id']}")).status_code == 200
    assert (await mounted.request("HEAD", "/workers")).status_code == 200
    assert (await mounted.delete(f"/workers/{worker['id']}")).status_code == 204
    assert (await mounted.get("/workers")).json()["items"] == []


async def test_an_endpoint_that_fails_unexpectedly_answers_a_500_problem(
    alice, monkeypatch, caplog
):
    async def broken(*_args, **_kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(worker_service, "list_workers", broken)
    with caplog.at_level(logging.ERROR):
        response = await alice.get("/workers")
    body = assert_problem(response, 500, "internal-error")
    assert "disk on fire" not in response.text and "fire" not in body["detail"]
    assert response.headers["x-request-id"]
    assert any(
        record.exc_info and "disk on fire" in str(record.exc_info[1]) for record in caplog.records
    )


async def test_head_answers_a_get_endpoint_with_its_headers(alice):
    get = await alice.get("/workers")
    head = await alice.request("HEAD", "/workers")
    assert head.status_code == 200
    assert head.headers["content-type"] == get.headers["content-type"]
    assert head.content == b""


@pytest.fixture
async def mounted(app: TaskhubApp, tokens) -> AsyncIterator[ApiClient]:  # type: ignore[no-untyped-def]
    """A client of the hub served under ``/hub`` (a proxy's root path)."""
    transport = httpx.ASGITransport(app=app, root_path="/hub")  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://hub.test/hub") as client:
        yield ApiClient(client, tokens.alice)


async def test_the_api_answers_under_a_root_path(mounted):
    worker = await mounted.post("/workers")
    assert worker.status_code == 201, worker.text
    listed = await mounted.get("/workers")
    assert listed.status_code == 200, listed.text
    assert [item["id"] for item in listed.json()["items"]] == [worker.json()["id"]]


async def test_a_room_id_may_hold_a_slash_sent_as_percent_2f(alice, starlette_requests):
    registered = await alice.put(
        "/rooms/lab%2F7/jobs", json={"category": "modifiers", "name": "Rotate", "schema": {}}
    )
    assert registered.status_code == 201, registered.text
    job = registered.json()
    assert job["room_id"] == "lab/7" and job["full_name"] == "lab/7:modifiers:Rotate"
    submitted = await alice.post("/rooms/lab%2F7/tasks/lab%2F7%3Amodifiers%3ARotate", json={})
    assert submitted.status_code == 202, submitted.text
    listed = (await alice.get("/rooms/lab%2F7/tasks")).json()["items"]
    assert [task["id"] for task in listed] == [submitted.json()["id"]]
    assert starlette_requests == []


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/rooms//jobs"),
        ("GET", "/rooms//jobs"),
        ("GET", "/rooms//jobs/lab:modifiers:Rotate"),
        ("GET", "/rooms//jobs/lab:modifiers:Rotate/tasks"),
        ("GET", "/rooms//workers"),
        ("POST", "/rooms//tasks/lab:modifiers:Rotate"),
        ("GET", "/rooms//tasks"),
    ],
)
async def test_an_empty_room_id_is_an_invalid_room_not_an_unknown_route(alice, method, path):
    body = {"category": "modifiers", "name": "Rotate", "schema": {}} if method == "PUT" else {}
    response = await alice.request(method, path, json=body if method != "GET" else None)
    assert_problem(response, 400, "invalid-room-id")
