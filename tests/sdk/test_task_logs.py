"""Task logs from the SDK against a real hub: ``ctx.log`` and the run's ``logging`` records
arrive in order, each run's under its own task (concurrency 3), the last lines before the
task ends; a hub that does not take them never fails a run; dropped lines are counted; a
worker reports its slots."""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from taskhub.sdk import Client, Worker
from taskhub.sdk import execution as sdk_execution
from taskhub.sdk.errors import HubUnavailable, problem_error
from taskhub.sdk.extension import JobSpec
from taskhub.sdk.http import AsyncHub
from taskhub.sdk.logs import TaskLog, hub_sender
from tests.sdk.conftest import Hub
from tests.sdk.extensions import BARRIERS
from tests.sdk.log_extensions import RUN_LOGGER, AsyncChatty, Chatty, Flood, Traceback
from tests.support.server import free_port
from tests.support.waiting import eventually_sync


def task_lines(hub: Hub, task_id: str) -> list[dict[str, Any]]:
    """Every stored line of the task, page after page."""
    items: list[dict[str, Any]] = []
    after = 0
    with hub.rest() as rest:
        while True:
            params = {"limit": 1000, "after": after}
            response = rest.get(f"/tasks/{task_id}/logs", params=params)
            response.raise_for_status()
            page = response.json()
            if page["next"] is None:
                return items
            items.extend(page["items"])
            after = page["next"]


def expected_chatty(tag: str, count: int) -> list[tuple[str, str | None, str]]:
    lines: list[tuple[str, str | None, str]] = []
    for i in range(count):
        lines.append(("warning" if i % 2 else "info", None, f"{tag} ctx {i}"))
        lines.append(("info", RUN_LOGGER, f"{tag} logging {i}"))
    return lines


def test_lines_arrive_in_order_under_their_own_task_with_concurrency(
    hub: Hub, room: str, key: str
) -> None:
    BARRIERS[key] = threading.Barrier(3)  # the three runs overlap
    spec = JobSpec.of(Chatty, room)
    with hub.rest() as rest:
        body = {"category": spec.category, "name": spec.name, "schema": spec.schema}
        assert rest.put(f"/rooms/{room}/jobs", json=body).status_code == 201
    with Client(hub.url, hub.user_token) as client:
        handles = {
            tag: client.submit(Chatty(tag=tag, count=30, key=key), room=room)
            for tag in ("alpha", "beta", "gamma")
        }
        with Worker(
            hub.url, hub.user_token, [Chatty, AsyncChatty], room=room, concurrency=3, sockets=False
        ):
            assert {tag: h.result(timeout=30) for tag, h in handles.items()} == {
                tag: tag for tag in handles
            }
            solo = client.submit(AsyncChatty(tag="delta", count=4), room=room)
            assert solo.result(timeout=30) == "delta"
    for tag, handle in handles.items():
        items = task_lines(hub, handle.id)
        got = [(item["level"], item["logger"], item["message"]) for item in items]
        # Nothing of the other runs, the SDK's loggers, httpx, DEBUG records, or the thread
        # the run started without its context; every line of this run, in order.
        assert got == expected_chatty(tag, 30)
        assert {item["attempt"] for item in items} == {1}
        assert all(item["dropped"] == 0 for item in items)
    delta = [(i["level"], i["message"]) for i in task_lines(hub, solo.id)]
    assert delta == [
        *[
            pair
            for n in range(4)
            for pair in (("info", f"delta ctx {n}"), ("info", f"delta logging {n}"))
        ],
        ("error", "delta child"),
    ]


def test_the_last_lines_are_stored_before_the_task_ends(hub: Hub, room: str) -> None:
    with (
        Worker(hub.url, hub.user_token, [Flood], room=room, sockets=False),
        Client(hub.url, hub.user_token) as client,
    ):
        handle = client.submit(Flood(count=60), room=room)
        assert handle.result(timeout=20) == 60
        # Read at once: the task is completed, so its lines are all there already.
        assert [item["message"] for item in task_lines(hub, handle.id)] == [
            f"line {i}" for i in range(60)
        ]


def test_a_flood_drops_the_oldest_lines_and_counts_them(hub: Hub, room: str) -> None:
    with (
        Worker(hub.url, hub.user_token, [Flood], room=room, sockets=False),
        Client(hub.url, hub.user_token) as client,
    ):
        handle = client.submit(Flood(count=5000), room=room)
        assert handle.result(timeout=30) == 5000
    items = task_lines(hub, handle.id)
    dropped = sum(item["dropped"] for item in items)
    assert dropped > 0
    assert len(items) + dropped == 5000  # every line is either there or counted
    assert items[-1]["message"] == "line 4999"  # the newest survive
    numbers = [int(item["message"].split()[1]) for item in items]
    assert numbers == sorted(numbers)


def test_tracebacks_long_lines_and_odd_levels(hub: Hub, room: str) -> None:
    with (
        Worker(hub.url, hub.user_token, [Traceback], room=room, sockets=False),
        Client(hub.url, hub.user_token) as client,
    ):
        handle = client.submit(Traceback(), room=room)
        assert handle.result(timeout=20) is None
    first, long_line, odd = task_lines(hub, handle.id)
    assert first["level"] == "error" and first["message"].startswith("it broke\nTraceback")
    assert "ValueError: inside the run" in first["message"]
    assert long_line["level"] == "info"  # an unknown level is info
    assert long_line["message"].endswith("[truncated]")
    assert len(long_line["message"]) <= 65_536
    assert odd["message"].startswith("<object object at")


class _Failing(http.server.BaseHTTPRequestHandler):
    """Answers every request 500 with a problem document, counting them."""

    posts: list[str] = []

    def do_POST(self) -> None:
        self.posts.append(self.path)
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.dumps({"type": "/v1/problems/internal-error", "title": "x", "status": 500})
        self.send_response(500)
        self.send_header("content-type", "application/problem+json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def failing_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Failing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Failing.posts = []
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("where", ["answers-500", "gone"])
def test_a_hub_that_does_not_take_the_lines_never_fails_the_run(
    hub: Hub, room: str, where: str, failing_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = failing_url if where == "answers-500" else f"http://127.0.0.1:{free_port()}"

    def elsewhere(_hub: AsyncHub, task_id: str, claim_token: str, timeout: float) -> Any:
        return hub_sender(AsyncHub(url, "token", retry_for=0), task_id, claim_token, timeout)

    monkeypatch.setattr(sdk_execution, "hub_sender", elsewhere)
    with (
        Worker(hub.url, hub.user_token, [Chatty, Flood], room=room, sockets=False),
        Client(hub.url, hub.user_token) as client,
    ):
        assert client.submit(Chatty(tag="t", count=300), room=room).result(timeout=30) == "t"
        assert client.submit(Flood(count=3000), room=room).result(timeout=30) == 3000
    if where == "answers-500":
        assert _Failing.posts, "the lines were sent (and refused)"
        assert all(path.endswith("/logs") for path in _Failing.posts)


def test_a_log_line_never_raises_or_blocks() -> None:
    """Unit level: a sink whose sends fail in every way; ``add`` from threads, ``close``."""

    async def scenario() -> int:
        calls = 0

        async def send(lines: list[dict[str, Any]], dropped: int) -> None:
            nonlocal calls
            calls += 1
            if calls % 3 == 0:
                raise problem_error(500, {"title": "boom"})
            if calls % 3 == 1:
                raise HubUnavailable("gone")
            raise RuntimeError("a bug in the transport")

        task_log = TaskLog(send, asyncio.get_running_loop(), batch_lines=10, interval=0.01)
        threads = [
            threading.Thread(target=lambda: [task_log.add("info", "x") for _ in range(500)])
            for _ in range(4)
        ]
        for thread in threads:
            thread.start()
        await asyncio.to_thread(lambda: [thread.join() for thread in threads])
        await task_log.close()
        task_log.add("info", "after close")  # taken no more, without a fuss
        return calls

    assert asyncio.run(scenario()) > 1


def test_a_refused_batch_stops_the_runs_shipping() -> None:
    async def scenario() -> tuple[int, int]:
        calls = 0

        async def send(lines: list[dict[str, Any]], dropped: int) -> None:
            nonlocal calls
            calls += 1
            raise problem_error(409, {"type": "/v1/problems/stale-claim", "title": "stale"})

        task_log = TaskLog(send, asyncio.get_running_loop(), batch_lines=5, interval=0.01)
        for _ in range(50):
            task_log.add("info", "x")
        await task_log.close()
        return calls, task_log.sent

    assert asyncio.run(scenario()) == (1, 0)


def test_the_worker_reports_its_slots(hub: Hub, room: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sent: list[tuple[str, str, Any]] = []
    request = AsyncHub.request

    async def spy(self: AsyncHub, method: str, path: str, **kwargs: Any) -> Any:
        sent.append((method, path, kwargs.get("json")))
        return await request(self, method, path, **kwargs)

    monkeypatch.setattr(AsyncHub, "request", spy)
    with Worker(
        hub.url,
        hub.user_token,
        [Chatty],
        room=room,
        concurrency=4,
        sockets=False,
        server_timeout=1.2,
    ) as worker:
        worker_id = worker.worker_id

        def beat_sent() -> bool:
            return any(m == "PATCH" and p == f"/workers/{worker_id}" for m, p, _ in sent)

        eventually_sync(beat_sent, 10, "a heartbeat")
    registration = [body for method, path, body in sent if (method, path) == ("POST", "/workers")]
    assert registration == [{"slots": 4}]
    beats = [
        body for method, path, body in sent if path == f"/workers/{worker_id}" and method == "PATCH"
    ]
    assert beats and all(body["slots"] == 4 for body in beats)


@pytest.mark.parametrize("refusing", ["POST", "PATCH"])
def test_a_hub_that_refuses_slots_gets_none(
    hub: Hub, room: str, refusing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stricter hub (422 for the unknown field, at registration or in heartbeats): the
    worker goes on without it."""
    sent: list[tuple[str, str, Any]] = []
    request = AsyncHub.request

    async def strict(self: AsyncHub, method: str, path: str, **kwargs: Any) -> Any:
        body = kwargs.get("json")
        sent.append((method, path, body))
        refused = method == refusing and path.startswith("/workers")
        if refused and isinstance(body, dict) and "slots" in body:
            raise problem_error(422, {"type": "/v1/problems/validation-error", "title": "x"})
        return await request(self, method, path, **kwargs)

    monkeypatch.setattr(AsyncHub, "request", strict)
    with (
        Worker(
            hub.url, hub.user_token, [Flood], room=room, sockets=False, server_timeout=1.2
        ) as worker,
        Client(hub.url, hub.user_token) as client,
    ):
        worker_id = worker.worker_id
        assert client.submit(Flood(count=3), room=room).result(timeout=20) == 3
        eventually_sync(
            lambda: sum(m == "PATCH" and p == f"/workers/{worker_id}" for m, p, _ in sent) > 3,
            10,
            "heartbeats",
        )
    registrations = [body for method, path, body in sent if (method, path) == ("POST", "/workers")]
    beats = [b for m, p, b in sent if m == "PATCH" and p == f"/workers/{worker_id}"]
    if refusing == "POST":
        assert registrations == [{"slots": 1}, None]  # refused, then as before
        assert beats and all("slots" not in body for body in beats)
    else:
        assert registrations == [{"slots": 1}]
        assert beats[0]["slots"] == 1  # refused, then as before, and no more
        assert len(beats) > 2 and all("slots" not in body for body in beats[1:])
