"""The host application: FastAPI + python-socketio, Taskhub embedded in a few lines.

``uvicorn examples.host_app.main:asgi_app`` builds it from the environment on first use
(``HOST_APP_*`` for the host, ``TASKHUB_*`` for Taskhub: docs/embedding.md)."""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import socketio
from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

import taskhub
import taskhub.embedding as th
from examples.host_app.accounts import Accounts
from examples.host_app.config import HostConfig
from examples.host_app.problems import EXCEPTION_HANDLERS
from examples.host_app.rooms import MemoryRooms, RedisRooms, RoomRegistry
from examples.host_app.routes import router
from examples.host_app.sockets import HostSockets, host_room
from examples.host_app.taskhub_hooks import authenticate_with, room_policy_of
from taskhub.embedding import TaskEnded, WorkerGone
from taskhub.settings import Settings

# The Socket.IO browser client Taskhub's own page uses (``npm ci`` puts it there).
VENDOR = Path(taskhub.__file__).resolve().parent / "static" / "vendor"
REMEMBERED = 1000  # the latest ended tasks and gone workers the host keeps
log = logging.getLogger(__name__)


@dataclass
class Notices:
    """What the host does when Taskhub tells it of a committed change: it remembers the
    latest, and tells a room's members when one of its tasks ended."""

    sio: socketio.AsyncServer
    ended: deque[TaskEnded] = field(default_factory=lambda: deque(maxlen=REMEMBERED))
    gone: deque[WorkerGone] = field(default_factory=lambda: deque(maxlen=REMEMBERED))

    async def task_ended(self, task: TaskEnded) -> None:
        self.ended.append(task)
        body = {"id": str(task.id), "status": task.status.value, "job_name": task.job_name}
        await self.sio.emit("task_ended", body, room=host_room(task.room_id))

    async def worker_gone(self, gone: WorkerGone) -> None:
        self.gone.append(gone)
        log.info("worker %s gone with jobs %s", gone.worker_id, ", ".join(gone.jobs))


@dataclass
class Host:
    asgi: socketio.ASGIApp  # what the server runs: Socket.IO, else the FastAPI app
    web: FastAPI
    sio: socketio.AsyncServer
    taskhub: th.EmbeddedHub
    accounts: Accounts
    rooms: RoomRegistry
    notices: Notices


def create_host(config: HostConfig | None = None, settings: Settings | None = None) -> Host:
    """The host on ``config`` (else ``HOST_APP_*``) with Taskhub on ``settings`` (else
    ``TASKHUB_*``). With Taskhub's Redis the host can run as replicas: its rooms live
    there, and its Socket.IO server fans out on Taskhub's channel (which Taskhub's other
    processes, the taskiq worker, publish on too)."""
    config = config or HostConfig.from_env()
    settings = settings or Settings()
    accounts = Accounts(config)
    redis_url = settings.redis_url
    rooms: RoomRegistry = RedisRooms(redis_url, config.redis_prefix) if redis_url else MemoryRooms()
    manager = (
        socketio.AsyncRedisManager(redis_url, channel=settings.socket_channel)
        if redis_url
        else None
    )
    # Taskhub's JSON module (orjson) writes its records (ids, times) as its REST answers do.
    sio = socketio.AsyncServer(async_mode="asgi", client_manager=manager)
    sockets = HostSockets(sio, accounts, rooms)  # the host's events first: they stay

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await rooms.close()

    web = FastAPI(title="Host app", lifespan=lifespan, exception_handlers=EXCEPTION_HANDLERS)
    web.state.accounts, web.state.rooms = accounts, rooms
    web.include_router(router)
    web.mount("/vendor", StaticFiles(directory=VENDOR, check_dir=False), name="vendor")
    notices = Notices(sio)
    sockets.hub = th.embed(
        web,
        sio,
        settings=settings,
        authenticate=authenticate_with(accounts),
        room_policy=room_policy_of(rooms),
        on_task_ended=notices.task_ended,
        on_worker_gone=notices.worker_gone,
    )
    asgi = socketio.ASGIApp(sio, other_asgi_app=web)
    return Host(asgi, web, sio, sockets.hub, accounts, rooms, notices)


def __getattr__(name: str) -> socketio.ASGIApp:
    """``asgi_app``: the host built from the environment, once, when a server asks for it."""
    if name != "asgi_app":
        raise AttributeError(name)
    app = create_host().asgi
    globals()["asgi_app"] = app
    return app
