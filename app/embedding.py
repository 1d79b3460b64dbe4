"""Taskhub inside a host application: its REST routes in the host's Starlette (or FastAPI)
app, its Socket.IO events on the host's ``AsyncServer``, its background work in the
host's lifespan, and the host's own sign-in and room rules as hooks (docs/embedding.md).

``taskhub serve`` is built the same way (``taskhub.main.create_app``): its own Starlette
app and Socket.IO server, embedded with ``wire``."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import socketio
from starlette.applications import Starlette
from starlette.routing import BaseRoute, Match, NoMatchFound

from taskhub.observability import metrics
from taskhub.observability.request_id import Receive, Scope, Send
from taskhub.realtime.host_events import HostEvents, TaskEnded, WorkerGone
from taskhub.realtime.socket_sink import SocketSink
from taskhub.rules.authorisation import RoomAction
from taskhub.rules.errors import RoomRefused
from taskhub.rules.records import Principal
from taskhub.runtime import Hub
from taskhub.services.identities import Caller, HostAuthenticate
from taskhub.services.room_access import RoomPolicy, RoomRequest
from taskhub.settings import Settings
from taskhub.transport.http import (
    dashboard,
    jobs,
    providers,
    rooms,
    task_logs,
    tasks,
    users,
    workers,
)
from taskhub.transport.http.router import ApiRoutes
from taskhub.transport.sockets.admission import SocketAdmission
from taskhub.transport.sockets.handlers import SocketHandlers
from taskhub.transport.sockets.providers import ProviderSocketHandlers
from taskhub.validation import payload_checks

API_PREFIX = "/v1/joblib"
# Order matters: ".../jobs/{full_name}/tasks" must be tried before ".../jobs/{full_name}".
# The dashboard's ".../tasks/bulk" before the submit's ".../tasks/{full_name}".
ENDPOINTS = [
    *dashboard.api.endpoints,
    *tasks.api.endpoints,
    *task_logs.api.endpoints,
    *jobs.api.endpoints,
    *workers.api.endpoints,
    *users.api.endpoints,
    *providers.api.endpoints,
    *rooms.api.endpoints,
]
log = logging.getLogger(__name__)
# What a host's hooks take and give, importable from here.
__all__ = [
    "Caller",
    "EmbeddedHub",
    "HostAuthenticate",
    "Principal",
    "RoomAction",
    "RoomPolicy",
    "RoomRefused",
    "RoomRequest",
    "TaskEnded",
    "WorkerGone",
    "embed",
]


class ApiRoute(BaseRoute):
    """Every request under the API prefix, answered by Taskhub's router with the path as
    sent (no ``Mount``: the host's ``root_path`` and paths stay as they are)."""

    def __init__(self, api: ApiRoutes) -> None:
        self.api = api

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        return (Match.FULL, {}) if self.api.owns(scope) else (Match.NONE, {})

    def url_path_for(self, name: str, /, **path_params: Any) -> Any:
        raise NoMatchFound(name, path_params)

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.api(scope, receive, send)


@dataclass
class EmbeddedHub:
    """A hub wired into a web app and a Socket.IO server."""

    hub: Hub
    sockets: SocketHandlers
    api: ApiRoutes
    _stopping: bool = field(default=False, init=False)

    @property
    def settings(self) -> Settings:
        return self.hub.settings

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """The hub's background work (sweeper, due announcer, presence, wake bus, outbox,
        token re-checks) from start to graceful stop."""
        try:
            await self.hub.start()
            self.sockets.start()
            yield
        finally:
            await self.begin_shutdown()
            await self.sockets.stop()
            await self.hub.close()
            metrics.process_exiting()

    async def watch_room(self, sid: str, room_id: str) -> str:
        """Let a host's socket receive the events of a room (what Taskhub's ``room_join``
        does, for a host that answers ``room_join`` itself): signed in by the
        ``authenticate`` hook, allowed by the room policy. The valid room id; a refusal
        raises ``taskhub.rules.errors.DomainError`` (its ``status``, ``slug``, ``detail``)."""
        return await self.sockets.watch_room(sid, room_id)

    async def begin_shutdown(self) -> None:
        """Answer waiting long-polls with their task's current state, stop the timers."""
        if self._stopping:
            return
        self._stopping = True
        log.info("shutting down: answering long-polls")
        await self.hub.begin_shutdown()


def embed(
    app: Starlette,
    sio: socketio.AsyncServer,
    *,
    settings: Settings | None = None,
    authenticate: HostAuthenticate | None = None,
    room_policy: RoomPolicy | None = None,
    on_worker_gone: Callable[[WorkerGone], Awaitable[None]] | None = None,
    on_task_ended: Callable[[TaskEnded], Awaitable[None]] | None = None,
    take_over_events: bool = False,
) -> EmbeddedHub:
    """Serve Taskhub from a host's Starlette or FastAPI ``app`` and Socket.IO ``sio``.

    - REST under ``/v1/joblib`` in ``app`` (tried before the host's routes);
    - Taskhub's Socket.IO events on ``sio``; the host's ``connect``, ``disconnect`` and
      events stay theirs (register them before calling ``embed``; with
      ``take_over_events`` Taskhub's replace a host's of the same names);
    - the hub's background work runs inside ``app``'s lifespan;
    - ``authenticate(caller)``: the principal of a request or socket, or None (Taskhub's
      ``th_`` tokens and JWTs are tried beside it); ``room_policy(request)``: raise
      ``RoomRefused`` to refuse; ``on_worker_gone`` and ``on_task_ended``: told after the
      change has committed.
    """
    settings = settings or Settings()
    embedded = wire(
        app,
        sio,
        Hub.create(settings, authenticate=authenticate, room_policy=room_policy),
        admission=None,
        take_over_events=take_over_events,
    )
    if on_worker_gone is not None or on_task_ended is not None:
        embedded.hub.publisher.add_sink(HostEvents(on_worker_gone, on_task_ended))
    return embedded


def wire(
    app: Starlette,
    sio: socketio.AsyncServer,
    hub: Hub,
    *,
    admission: SocketAdmission | None,
    take_over_events: bool = False,
) -> EmbeddedHub:
    """The one wiring of a hub into a web app and a Socket.IO server (``embed`` for a
    host's, ``create_app`` for Taskhub's own, which passes its ``admission``)."""
    sockets = SocketHandlers(sio, hub, admission, take_over=take_over_events)
    ProviderSocketHandlers(sockets, take_over=take_over_events)
    if hub.settings.worker_shortcuts:
        hub.publisher.add_sink(sockets.pusher)  # first: a pushed task goes out soonest
    hub.publisher.add_sink(SocketSink(sio, hub.rooms.is_private))
    payload_checks.PROCESS_CHECKS.configure(hub.settings)
    payload_checks.PROCESS_CHECKS.observe(metrics.PayloadThreadMetrics())
    api = ApiRoutes(ENDPOINTS, API_PREFIX, hub)
    embedded = EmbeddedHub(hub, sockets, api)
    app.router.routes.insert(0, ApiRoute(api))
    app.state.hub = hub
    host_lifespan = app.router.lifespan_context

    @asynccontextmanager
    async def lifespan(host: Any) -> AsyncIterator[Any]:
        async with embedded.running(), host_lifespan(host) as state:
            yield state

    app.router.lifespan_context = lifespan
    return embedded
