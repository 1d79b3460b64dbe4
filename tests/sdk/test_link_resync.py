"""The worker's Socket.IO link takes the hub's ``resync`` (events it dropped for a link
that read too slowly, a ``task_available`` perhaps among them) for a wake-up: the worker
claims, as on ``task_available`` (a Socket.IO server of the test's own, over a real
connection)."""

from __future__ import annotations

from typing import Any

import socketio

from taskhub.sdk.realtime import SocketLink
from tests.realtime.hubs import served
from tests.support.waiting import eventually


async def test_a_resync_wakes_the_worker_as_a_task_available_does() -> None:
    sio = socketio.AsyncServer(async_mode="asgi")
    connected: list[str] = []

    async def connect(sid: str, _environ: Any, _auth: Any = None) -> None:
        connected.append(sid)

    async def join_job_room(_sid: str, data: Any) -> Any:
        return data  # as the hub acknowledges a join

    sio.on("connect", connect)
    sio.on("join_job_room", join_job_room)
    wakes: list[str] = []
    joined: list[bool] = []
    async with served(socketio.ASGIApp(sio)) as base_url:
        link = SocketLink(
            base_url,
            "token",
            on_task_available=lambda: wakes.append("woken"),
            on_task_cancelled=lambda _task, _worker: None,
            on_joined=lambda: joined.append(True),
            on_dropped=lambda: None,
        )
        link.bind("w1", ["r:c:J"])
        link.start()
        try:
            await eventually(lambda: joined, 10, "the link joined its job room")
            [sid] = connected
            await sio.emit("resync", {"dropped": 250}, to=sid)
            await eventually(lambda: wakes == ["woken"], 10, "the resync woke the worker")
            await sio.emit("task_available", {"job_name": "r:c:J"}, to=sid)
            await eventually(lambda: wakes == ["woken"] * 2, 10, "task_available woke it")
        finally:
            await link.close()
            await sio.shutdown()
