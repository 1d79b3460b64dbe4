"""SIGTERM to a real ``taskhub serve`` (SQLite and PostgreSQL): a waiting long-poll is
answered at once with the task's current state, Socket.IO clients are disconnected, and the
process exits with status 0 — well before uvicorn's graceful timeout."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable

import httpx
import socketio

from tests.support.metrics import Samples
from tests.support.server import HubServer
from tests.support.sockets import SocketProbe

JOB = "lab:modifiers:Slow"


def _record_reason(future: asyncio.Future[str]) -> Callable[..., None]:
    def record(reason: str = "") -> None:
        if not future.done():
            future.set_result(reason)

    return record


async def wait_for_metric(http: httpx.AsyncClient, name: str, value: float) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if Samples((await http.get("/metrics")).text).value(name) == value:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{name} never reached {value}")


async def test_sigterm_answers_long_polls_closes_sockets_and_exits_zero(
    hub_server: HubServer,
) -> None:
    headers = hub_server.admin_headers
    async with httpx.AsyncClient(base_url=hub_server.base_url, timeout=40, trust_env=False) as http:
        registered = await http.put(
            "/v1/joblib/rooms/lab/jobs",
            headers=headers,
            json={"category": "modifiers", "name": "Slow", "schema": {}},
        )
        assert registered.status_code == 201, registered.text
        submitted = await http.post(f"/v1/joblib/rooms/lab/tasks/{JOB}", headers=headers, json={})
        task_id = submitted.json()["id"]

        async with SocketProbe("browser") as browser, SocketProbe("poller") as poller:
            reasons: dict[str, asyncio.Future[str]] = {}
            for name, probe in (("websocket", browser), ("polling", poller)):
                reasons[name] = asyncio.get_running_loop().create_future()
                probe.client.on("disconnect", _record_reason(reasons[name]))
            await browser.connect(hub_server.base_url, hub_server.admin_token)
            await browser.room_join("lab")
            await asyncio.wait_for(
                poller.client.connect(
                    hub_server.base_url,
                    auth={"token": hub_server.admin_token},
                    transports=["polling"],
                ),
                10,
            )
            await wait_for_metric(http, "taskhub_connected_sockets", 2)

            poll = asyncio.create_task(
                http.get(f"/v1/joblib/tasks/{task_id}", headers={**headers, "Prefer": "wait=30"})
            )
            await wait_for_metric(http, "taskhub_long_poll_waiters", 1)

            assert hub_server.process is not None
            hub_server.process.send_signal(signal.SIGTERM)
            sent = time.monotonic()
            response = await asyncio.wait_for(poll, 15)
            answered_after = time.monotonic() - sent
            # Both transports are dropped promptly, not as a deliberate server disconnect
            # (after which clients would not try to reconnect to another replica).
            dropped = await asyncio.wait_for(asyncio.gather(*reasons.values()), 15)
            server_disconnect = socketio.AsyncClient.reason.SERVER_DISCONNECT
            assert server_disconnect not in dropped, dropped

    assert response.status_code == 200, response.text
    assert response.json()["id"] == task_id
    assert response.json()["status"] == "pending"
    # Answered by the release, not by its 30 s wait (a bound loose enough for a busy CI box;
    # without the release uvicorn would cancel the request after its graceful timeout).
    assert answered_after < 15, answered_after
    returncode = await asyncio.to_thread(hub_server.stop)
    assert not hub_server.killed, hub_server.output()
    assert returncode == 0, hub_server.output()
