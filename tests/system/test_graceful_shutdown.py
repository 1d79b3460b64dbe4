"""SIGTERM to a real ``taskhub serve`` (SQLite and PostgreSQL): a waiting long-poll is
answered at once with the task's current state, Socket.IO clients are disconnected, and the
process exits with status 0 — well before uvicorn's graceful timeout; the workers whose
sockets it closed keep their registration and tasks."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

import httpx
import socketio
from sqlalchemy import select

from taskhub.settings import Settings
from taskhub.store.database import Database
from taskhub.store.tables import task_table, worker_table
from tests.support.metrics import Samples
from tests.support.server import HubServer, running_hub
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


async def test_workers_whose_sockets_the_stopping_hub_closes_keep_their_tasks(
    tmp_path: Path,
) -> None:
    """The hub closes its sockets itself as it stops: that starts no disconnect grace, so a
    worker whose socket it closed keeps its registration and its running task even while
    a slow request holds the stop up well past the grace (the worker reconnects to another
    replica, or to this one once it is back)."""
    grace = 0.5
    env = {
        "TASKHUB_SOCKET_DISCONNECT_GRACE_SECONDS": str(grace),
        # uvicorn waits this long for the slow request: far longer than the test needs the
        # hub to keep running after it closed the socket, however slow the machine.
        "TASKHUB_GRACEFUL_SHUTDOWN_SECONDS": "60",
    }
    with running_hub("sqlite", tmp_path, env=env) as server:
        headers = server.admin_headers
        async with httpx.AsyncClient(
            base_url=f"{server.base_url}/v1/joblib", headers=headers, timeout=10, trust_env=False
        ) as http:
            body = {"category": "modifiers", "name": "Slow", "schema": {}}
            worker_id = (await http.put("/rooms/lab/jobs", json=body)).json()["worker_id"]
            task_id = (await http.post(f"/rooms/lab/tasks/{JOB}", json={})).json()["id"]
            claimed = (await http.post("/tasks/claim", json={"worker_id": worker_id})).json()
            token = claimed["task"]["claim_token"]
            running = {"status": "running", "claim_token": token}
            assert (await http.patch(f"/tasks/{task_id}", json=running)).status_code == 200

        worker_socket = socketio.AsyncClient(reconnection=False)
        closed = asyncio.Event()
        worker_socket.on("disconnect", lambda *_reason: closed.set())
        await worker_socket.connect(
            server.base_url, auth={"token": server.admin_token}, transports=["websocket"]
        )
        joined = await worker_socket.call(
            "join_job_room", {"job_name": JOB, "worker_id": worker_id}, timeout=10
        )
        assert joined is not None, "the socket now stands for the worker"
        # Another client's request still in flight: its body comes slowly, so uvicorn
        # waits for it (up to its graceful timeout) before the hub closes.
        _reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(
            f"PATCH /v1/joblib/workers/{worker_id} HTTP/1.1\r\nHost: hub\r\n"
            f"Authorization: Bearer {server.admin_token}\r\nContent-Type: application/json\r\n"
            "Content-Length: 20\r\n\r\n{".encode()
        )
        await writer.drain()
        assert server.process is not None
        server.process.send_signal(signal.SIGTERM)
        await asyncio.wait_for(closed.wait(), 30)  # the hub closed the worker's socket
        await asyncio.sleep(grace * 6)  # a grace period started by that would be over
        assert server.process.poll() is None, "the slow request no longer holds the stop up"
        writer.close()
        assert await asyncio.to_thread(server.stop) == 0, server.output()
        await worker_socket.disconnect()

        db = Database(Settings(database_url=server.database_url))
        try:
            async with db.read() as conn:
                sa = await conn.sa()
                workers = (await sa.execute(select(worker_table.c.id))).scalars().all()
                task = (
                    await sa.execute(
                        select(task_table.c.status, task_table.c.error).where(
                            task_table.c.id == UUID(task_id)
                        )
                    )
                ).one()
        finally:
            await db.dispose()
    assert workers == [UUID(worker_id)], server.output()
    assert tuple(task) == ("running", None), server.output()
