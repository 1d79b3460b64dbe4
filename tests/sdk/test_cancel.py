"""Cooperative cancel: the run sees it (via the ``task_cancelled`` event, or via the
heartbeat reply when Socket.IO is off) and its outcome is dropped."""

from __future__ import annotations

import time

import pytest

from app.sdk import AsyncClient, Client, TaskCancelled, Worker
from tests.sdk.conftest import Hub, async_eventually
from tests.sdk.extensions import OBSERVED_CANCEL, STARTED, AsyncSpin, Echo, Gate

# The heartbeat is far too slow to explain a cancel seen within seconds: only the event can.
SLOW_HEARTBEAT = 15.0


def test_cancel_reaches_a_sync_run_through_the_event(hub: Hub, room: str, key: str) -> None:
    with (
        Worker(hub.url, hub.user_token, [Gate, Echo], room=room, heartbeat_interval=SLOW_HEARTBEAT),
        Client(hub.url, hub.user_token) as client,
    ):
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
        await async_eventually(STARTED[key].is_set, 10, "the run to start")
        await handle.cancel()
        await async_eventually(OBSERVED_CANCEL[key].is_set, 5, "the run to see the cancel")
        with pytest.raises(TaskCancelled):
            await handle.result(timeout=5)
    task = hub.task(handle.id)
    assert (task["status"], task["result"]) == ("cancelled", None)
