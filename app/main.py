"""The ASGI application: REST routes, problem handlers, health, metrics, the room page."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any, cast

import socketio
from engineio import packet as engineio_packet
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route, request_response
from starlette.staticfiles import StaticFiles

from taskhub import __version__, runtime
from taskhub.embedding import API_PREFIX, ENDPOINTS, EmbeddedHub, wire
from taskhub.observability.request_id import Receive, RequestIdMiddleware, Scope, Send
from taskhub.observability.scrape import metrics_endpoint
from taskhub.realtime import socket_json
from taskhub.realtime.redis_clients import socket_manager
from taskhub.realtime.room_fanout import RoomFanout, RoomFanoutManager
from taskhub.runtime import Hub
from taskhub.settings import Settings
from taskhub.shutdown import StopSignals
from taskhub.transport.http.openapi import openapi_endpoint
from taskhub.transport.http.problems import EXCEPTION_HANDLERS, problem_response
from taskhub.transport.page_security import PageSecurity, SecurityHeaders, security_headers
from taskhub.transport.page_sign_in import provider_origin, sign_in_config
from taskhub.transport.sockets.admission import SocketAdmission
from taskhub.transport.sockets.bounded_queue import bounded_packet_queue

# The room page ships inside the package (``app/static`` is ``static/`` in a checkout); its
# browser libraries are in ``static/vendor/``, copied there from npm by ``npm ci``.
STATIC_DIR = Path(__file__).resolve().parent / "static"
VENDOR_DIR = STATIC_DIR / "vendor"
# uvicorn stops accepting within 0.1 s of the signal; polls are answered after that.
POLL_RELEASE_DELAY_SECONDS = 0.5
log = logging.getLogger(__name__)


async def healthz(_request: Request) -> Response:
    return JSONResponse({"status": "ok", "version": __version__})


async def room_page(_request: Request) -> Response:
    return FileResponse(STATIC_DIR / "index.html")


async def readyz(request: Request) -> Response:
    """Ready when the database and (if configured) Redis — which also carries the taskiq
    broker — answer within two seconds, until a graceful shutdown begins (a load balancer
    then stops sending new work to a replica whose keep-alive connections are still open)."""
    hub: Hub = request.app.state.hub
    if hub.draining:
        return problem_response(503, "not-ready", "Service Unavailable", "shutting down")
    checks: dict[str, Awaitable[Any]] = {"database": hub.db.ping()}
    if hub.wake_bus is not None:
        checks["redis"] = hub.wake_bus.ping()
    names = list(checks)
    outcomes = await asyncio.gather(
        *(asyncio.wait_for(check, 2.0) for check in checks.values()), return_exceptions=True
    )
    failed = [name for name, outcome in zip(names, outcomes, strict=True) if outcome is not None]
    if failed:
        return problem_response(
            503, "not-ready", "Service Unavailable", f"unreachable: {', '.join(failed)}"
        )
    return JSONResponse(
        {"status": "ready", "version": __version__, "checks": dict.fromkeys(names, "ok")}
    )


class TaskhubApp(socketio.ASGIApp):
    """The REST API's requests to their endpoints, Socket.IO at ``/socket.io/``, everything
    else (and the lifespan) to Starlette; a request id around every HTTP request and socket
    connection. The hub is wired in as into any host (``taskhub.embedding.wire``)."""

    def __init__(
        self,
        sio: socketio.AsyncServer,
        web: Starlette,
        embedded: EmbeddedHub,
        admission: SocketAdmission,
        *,
        drain_on_signals: bool = False,
        freeze_start_up: bool = False,
    ) -> None:
        self.sio = sio
        self.web = web
        self.embedded = embedded
        self.hub = embedded.hub
        self.sockets = embedded.sockets
        self.api = embedded.api
        self.admission = admission
        super().__init__(sio, other_asgi_app=web)
        self._entry = SecurityHeaders(RequestIdMiddleware(self._dispatch))
        self._stop_signals = StopSignals(self.begin_shutdown) if drain_on_signals else None
        self._freeze_start_up = freeze_start_up

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._entry(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Requests under the API prefix straight to the API's router (``ApiRoutes``, past
        Starlette's); the rest (Socket.IO, the page, health, metrics) to Starlette."""
        if self.api.owns(scope):
            await self.api(scope, receive, send)
        elif self.admission.owns(scope):  # Engine.IO: handshakes counted, bounded
            await self.admission(scope, receive, send, super().__call__)
        else:
            await super().__call__(scope, receive, send)

    def lifespan_context(self) -> AbstractAsyncContextManager[None]:
        """Start and stop the hub without a server (tests, tools)."""
        return cast(AbstractAsyncContextManager[None], self.web.router.lifespan_context(self.web))

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """What a server process adds inside the hub's lifespan: signals that start the
        graceful shutdown, the start-up objects frozen; the shutdown's first step."""
        try:
            if self._stop_signals is not None:
                self._stop_signals.install()
            if self._freeze_start_up:
                runtime.freeze_start_up()
            yield
        finally:
            if self._stop_signals is not None:
                self._stop_signals.uninstall()
            await self.begin_shutdown()

    async def begin_shutdown(self) -> None:
        """The first step of a graceful shutdown: answer waiting long-polls with their
        task's current state and stop the sweeper; then end Socket.IO polls. In-flight
        requests finish on their own."""
        await self.embedded.begin_shutdown()
        await self._end_socket_polls()

    async def _end_socket_polls(self) -> None:
        """Websocket connections are closed by the server as it shuts down (code 1012,
        "service restart", so clients reconnect, e.g. to another replica). A client on
        the HTTP long-polling transport has a poll that Engine.IO would hold until its next
        ping: once the server has stopped accepting, answer it (a no-op packet), so its
        connection ends and the client's next poll finds the server gone. No Engine.IO
        CLOSE packet: Python clients take that for a deliberate disconnect and would not
        reconnect."""
        polling = [
            socket
            for socket in list(self.sio.eio.sockets.values())
            if not socket.upgraded and not socket.closed
        ]
        if not polling:
            return
        await asyncio.sleep(POLL_RELEASE_DELAY_SECONDS)
        for socket in polling:
            with contextlib.suppress(Exception):
                await socket.send(engineio_packet.Packet(engineio_packet.NOOP))


def create_app(
    settings: Settings | None = None,
    *,
    drain_on_signals: bool = False,
    freeze_start_up: bool = False,
) -> TaskhubApp:
    """The application. ``drain_on_signals``: SIGTERM/SIGINT start the graceful shutdown at
    once (``taskhub serve``) rather than when the server gets to the lifespan shutdown.
    ``freeze_start_up``: the app is its process's server (``taskhub serve``): once started,
    ``runtime.freeze_start_up``."""
    settings = settings or Settings()
    hub = Hub.create(settings)
    manager: RoomFanout = socket_manager(settings) if settings.redis_url else RoomFanoutManager()
    sio = socketio.AsyncServer(
        async_mode="asgi",
        client_manager=manager,
        # Loggers of the process's logging set-up (a bool would have the libraries add a
        # stderr handler of their own, past the log format and the secrets filter).
        logger=logging.getLogger("socketio.server"),
        engineio_logger=logging.getLogger("engineio.server"),
        json=socket_json,
        # A message past it closes its connection (docs/operations.md, "Limits").
        max_http_buffer_size=settings.max_socket_message_bytes,
    )
    # Each session's outgoing packets: 3 KiB a socket less than engineio's asyncio.Queue,
    # and bounded for a client that stops reading (docs/operations.md, "Limits").
    sio.eio.create_queue = bounded_packet_queue(sio.eio, settings.socket_queue_limit)
    # A room event goes straight onto each such queue (no task per recipient).
    manager.direct_queue = sio.eio.create_queue
    admission = SocketAdmission(
        sio,
        connect_timeout=settings.socket_connect_timeout_seconds,
        max_per_address=settings.max_unauthenticated_per_address,
    )
    app: TaskhubApp | None = None

    @asynccontextmanager
    async def serving(_web: Starlette) -> AsyncIterator[None]:
        assert app is not None
        async with app.serving():
            yield

    web = create_web_app(hub, serving)
    embedded = wire(web, sio, hub, admission=admission)
    app = TaskhubApp(
        sio,
        web,
        embedded,
        admission,
        drain_on_signals=drain_on_signals,
        freeze_start_up=freeze_start_up,
    )
    return app


def create_web_app(
    hub: Hub, lifespan: Callable[[Starlette], AbstractAsyncContextManager[None]]
) -> Starlette:
    """The Starlette app: health, metrics, the OpenAPI document and the room page."""
    page_headers = security_headers(STATIC_DIR / "index.html", provider_origin(hub.settings))
    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/auth/config.json", sign_in_config, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_endpoint, methods=["GET"]),
        Route(
            "/openapi.json",
            openapi_endpoint(ENDPOINTS, API_PREFIX, hub.settings.allowed_categories),
            methods=["GET"],
        ),
        Route("/", PageSecurity(request_response(room_page), page_headers), methods=["GET"]),
        Mount(
            "/static",
            PageSecurity(StaticFiles(directory=STATIC_DIR), page_headers),
            name="static",
        ),
    ]
    if VENDOR_DIR.is_dir():
        routes.append(
            Mount("/vendor", PageSecurity(StaticFiles(directory=VENDOR_DIR), page_headers))
        )
    web = Starlette(routes=routes, exception_handlers=EXCEPTION_HANDLERS, lifespan=lifespan)
    web.state.hub = hub
    return web
