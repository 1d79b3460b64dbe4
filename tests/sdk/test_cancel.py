"""Cooperative cancel: the run sees it (via the ``task_cancelled`` event, or via the
heartbeat reply when Socket.IO is off) and its outcome is dropped."""

from __future__ import annotations

import time

import httpx
import pytest

from taskhub.sdk import AsyncClient, Client, InvalidTransition, TaskCancelled, Worker
from tests.sdk.conftest import Hub
from tests.sdk.extensions import OBSERVED_CANCEL, STARTED, AsyncSpin, Echo, Gate
from tests.support.waiting import eventually, eventually_sync

# The heartbeat is far too slow to explain a cancel seen within seconds: only the event can.
SLOW_HEARTBEAT = 15.0


def test_cancel_reaches_a_sync_run_through_the_event(hub: Hub, room: str, key: str) -> None:
    with (
        Worker(
            hub.url, hub.user_token, [Gate, Echo], room=room, heartbeat_interval=SLOW_HEARTBEAT
        ) as serving,
        Client(hub.url, hub.user_token) as client,
    ):
        # The event can only reach a worker whose socket is in its rooms already (a slow
        # machine may start the run by a poll before the socket is up).
        eventually_sync(lambda: serving.listening, 10, "the worker's socket to join its rooms")
        handle = client.submit(Gate(key=key), room=room)
        assert STARTED[key].wait(10)
        cancelled_at = time.monotonic()
        assert handle.cancel().status == "cancelled"
        assert OBSERVED_CANCEL[key].wait(5), "the run never saw the cancel"
        assert time.monotonic() - cancelled_at < SLOW_HEARTBEAT / 3
        with pytest.raises(TaskCancelled):
            handle.result(timeout=5)
        # the worker is free again, and serves the next task
        assert client.submit(Echo(text="next"), room=room).result(timeout=10)["echo"] == "next"
    task = hub.task(handle.id)
    assert task["status"] == "cancelled"
    assert task["result"] is None, "the cancelled run's outcome was dropped"


async def test_cancel_reaches_an_async_run_through_the_heartbeat(
    hub: Hub, room: str, key: str
) -> None:
    async with (
        Worker(
            hub.url,
            hub.user_token,
            [AsyncSpin],
            room=room,
            sockets=False,
            poll_interval=0.2,
            heartbeat_interval=0.3,
        ),
        AsyncClient(hub.url, hub.user_token) as client,
    ):
        handle = await client.submit(AsyncSpin(key=key), room=room)
        await eventually(STARTED[key].is_set, 10, "the run to start")
        await handle.cancel()
        await eventually(OBSERVED_CANCEL[key].is_set, 5, "the run to see the cancel")
        with pytest.raises(TaskCancelled):
            await handle.result(timeout=5)
    task = hub.task(handle.id)
    assert (task["status"], task["result"]) == ("cancelled", None)


class LosesFirstPatchAnswer(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """Forwards to the hub, but drops the answer of the first PATCH as a reset connection
    would: after the hub has applied it."""

    def __init__(self) -> None:
        self.sync, self.aio = httpx.HTTPTransport(), httpx.AsyncHTTPTransport()
        self.patches = 0

    def _seen(self, request: httpx.Request) -> None:
        if request.method == "PATCH":
            self.patches += 1
            if self.patches == 1:
                raise httpx.ReadError("connection reset", request=request)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.sync.handle_request(request)
        response.read()
        self._seen(request)
        return response

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.aio.handle_async_request(request)
        await response.aread()
        self._seen(request)
        return response

    def close(self) -> None:
        self.sync.close()

    async def aclose(self) -> None:
        await self.aio.aclose()


def _pending_task(hub: Hub, room: str) -> str:
    with hub.rest() as rest:
        job = rest.put(
            f"/rooms/{room}/jobs", json={"category": "analysis", "name": "n", "schema": {}}
        )
        assert job.status_code == 201, job.text
        return str(
            rest.post(f"/rooms/{room}/tasks/{room}:analysis:n", json={"payload": {}}).json()["id"]
        )


def test_a_cancel_whose_answer_was_lost_succeeds_on_retry(hub: Hub, room: str) -> None:
    """The retry finds the task cancelled (by the first attempt): that is success."""
    task_id = _pending_task(hub, room)
    transport = LosesFirstPatchAnswer()
    with Client(hub.url, hub.user_token) as client:
        http = client._hub._http
        client._hub._http = httpx.Client(
            base_url=http.base_url, headers=http.headers, transport=transport
        )
        http.close()
        assert client.cancel(task_id).status == "cancelled"
        assert transport.patches == 2, "the lost answer was retried"
        with pytest.raises(InvalidTransition):  # a cancel that was not retried still refuses
            client.cancel(task_id)


async def test_an_async_cancel_whose_answer_was_lost_succeeds_on_retry(hub: Hub, room: str) -> None:
    task_id = _pending_task(hub, room)
    transport = LosesFirstPatchAnswer()
    async with AsyncClient(hub.url, hub.user_token) as client:
        http = client._hub._http
        client._hub._http = httpx.AsyncClient(
            base_url=http.base_url, headers=http.headers, transport=transport
        )
        await http.aclose()
        assert (await client.cancel(task_id)).status == "cancelled"
        assert transport.patches == 2, "the lost answer was retried"
