"""Engine.IO sessions before sign-in (docs/operations.md, "Connections before sign-in").

A socket is authenticated at its Socket.IO CONNECT (``handlers.SocketHandlers.connect``),
but an Engine.IO session exists from its handshake on, and python-socketio would keep one
that never sends CONNECT for as long as it answers pings. ``SocketAdmission`` bounds them:

- a session that has not completed an authenticated CONNECT within
  ``TASKHUB_SOCKET_CONNECT_TIMEOUT_SECONDS`` of its handshake (or of its Socket.IO
  disconnect, if its Engine.IO session stays) is closed;
- at most ``TASKHUB_MAX_UNAUTHENTICATED_PER_ADDRESS`` of them per client address (the
  ASGI scope's ``client``: the peer, or what uvicorn's ``--forwarded-allow-ips`` lets a
  proxy's ``X-Forwarded-For`` say) at once: one more handshake is answered HTTP 429
  ``too-many-connections`` before Engine.IO sees it;
- before sign-in only CONNECT packets are read.

And on every session: binary Socket.IO packets (BINARY_EVENT, BINARY_ACK), which the
protocol has none of, are dropped with their attachments unread (python-socketio would
buffer up to 9,999,999,999 attachments of any packet that announces them); a binary event
that asks for an acknowledgement is answered 422 ``validation-error``.

Hooks: the Engine.IO ``connect``, ``message`` and ``disconnect`` handlers that
python-socketio registers on its Engine.IO server (``sio.eio.handlers``) are wrapped; the
handshake gate is an ASGI step in front of Engine.IO (``TaskhubApp``). A session is closed
by ending its websocket through the ASGI channel (a client that ignores Engine.IO's CLOSE
packet could otherwise keep it open), or, on HTTP long-polling, by ``sio.eio.disconnect``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import socketio
from socketio import packet as sio_packet

from taskhub.observability import metrics
from taskhub.observability.request_id import ASGIApp, Receive, Scope, Send
from taskhub.rules.errors import ValidationFailed
from taskhub.transport.http.problems import problem_body, problem_response

log = logging.getLogger(__name__)
EngineHandler = Callable[..., Awaitable[Any]]
# The handshake's pending entry, from the gate to the Engine.IO connect hook (ASGI scope).
_ENTRY_KEY = "taskhub.socket_admission"
# The Engine.IO session id in its handshake environ (the one Socket.IO's connect handler
# gets), for ``signed_in`` and ``signed_out``.
EIO_SID_KEY = "taskhub.eio_sid"
_CONNECT = str(sio_packet.CONNECT)
_BINARY = (str(sio_packet.BINARY_EVENT), str(sio_packet.BINARY_ACK))
# How long closing one session may take (a websocket close; a poll's CLOSE packet).
CLOSE_SECONDS = 5.0
# The websocket close code of a session closed for its timeout: 1008, policy violation.
POLICY_VIOLATION = 1008
BINARY_REFUSED = problem_body(
    ValidationFailed.status,
    ValidationFailed.slug,
    ValidationFailed.title,
    "Binary data is not accepted: send the event's data as JSON (no bytes).",
    [{"loc": ["data"], "msg": "binary data is not accepted"}],
)


@dataclass(slots=True, eq=False)
class _Pending:
    """A session (or a handshake under way) before sign-in, counted for its address."""

    address: str
    sid: str | None = None
    timer: asyncio.TimerHandle | None = None
    counted: bool = False


def client_address(scope: Scope) -> str:
    """The client's address as the ASGI server reports it ("" when it reports none)."""
    client = scope.get("client")
    return str(client[0]) if client else ""


def _query_sid(scope: Scope) -> str | None:
    """The ``sid`` query parameter, read as Engine.IO reads it."""
    try:
        query = (scope.get("query_string") or b"").decode("utf-8")
    except UnicodeDecodeError:
        query = ""
    values = parse_qs(query).get("sid")
    return values[0] if values else None


class SocketAdmission:
    """The gate and the timers of sessions before sign-in, and the binary refusal."""

    def __init__(
        self,
        sio: socketio.AsyncServer,
        *,
        connect_timeout: float,
        max_per_address: int,
        path: str = "/socket.io/",
    ) -> None:
        self.connect_timeout = connect_timeout
        self.max_per_address = max_per_address
        self.path = path
        self._eio = sio.eio
        self._packet_class = sio.packet_class
        self._pending: dict[str, _Pending] = {}
        self._per_address: dict[str, int] = {}
        # The ASGI send of each session's websocket, to close it by.
        self._channels: dict[str, Send] = {}
        self._closing: set[str] = set()  # Engine.IO sessions whose disconnect is under way
        self._tasks: set[asyncio.Task[None]] = set()
        handlers = self._eio.handlers
        self._on_connect: EngineHandler = handlers["connect"]
        self._on_message: EngineHandler = handlers["message"]
        self._on_disconnect: EngineHandler = handlers["disconnect"]
        self._eio.on("connect", self._connected)
        self._eio.on("message", self._message)
        self._eio.on("disconnect", self._disconnected)

    @property
    def pending(self) -> int:
        """Sessions before sign-in right now."""
        return len(self._pending)

    # -- the handshake gate (ASGI) -----------------------------------------------------

    def owns(self, scope: Scope) -> bool:
        """Whether the request is Engine.IO's (HTTP or websocket under ``path``)."""
        if scope["type"] not in ("http", "websocket"):
            return False
        path = str(scope.get("path", ""))
        return (path if path.endswith("/") else path + "/").startswith(self.path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send, app: ASGIApp) -> None:
        """Pass an Engine.IO request to ``app``: a handshake counted for its address (or
        refused 429), a websocket's channel kept for closing it."""
        sid = _query_sid(scope)
        if sid is not None:
            await self._session_request(sid, scope, receive, send, app)
            return
        if scope["type"] == "http" and scope.get("method") != "GET":
            await app(scope, receive, send)  # (no session comes of it)
            return
        address = client_address(scope)
        if self._per_address.get(address, 0) >= self.max_per_address:
            metrics.socket_session_refused("too-many-connections")
            log.debug("socket handshake refused: %d sessions before sign-in", self.max_per_address)
            await self._refuse(scope, receive, send)
            return
        entry = _Pending(address)
        self._count(entry)
        scope[_ENTRY_KEY] = entry
        try:
            await app(scope, receive, send)
        finally:
            if entry.sid is None:  # no session came of it (a bad request, a client gone)
                self._uncount(entry)

    async def _session_request(
        self, sid: str, scope: Scope, receive: Receive, send: Send, app: ASGIApp
    ) -> None:
        if scope["type"] != "websocket":
            await app(scope, receive, send)
            return
        self._channels[sid] = send  # an upgrade from polling: the session's websocket now
        try:
            await app(scope, receive, send)
        finally:
            if self._channels.get(sid) is send:
                del self._channels[sid]

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket" and "websocket.http.response" not in scope.get(
            "extensions", {}
        ):
            await send({"type": "websocket.close", "code": POLICY_VIOLATION})
            return
        retry_after = max(1, math.ceil(self.connect_timeout))
        response = problem_response(
            429,
            "too-many-connections",
            "Too Many Connections",
            f"At most {self.max_per_address} connections from one address may wait for their "
            "Socket.IO CONNECT at once: sign in on the open ones, or try again later.",
            headers={"Retry-After": str(retry_after)},
        )
        await response(scope, receive, send)

    # -- Engine.IO's events ------------------------------------------------------------

    async def _connected(self, eio_sid: str, environ: dict[str, Any]) -> Any:
        scope = environ.get("asgi.scope") or {}
        entry = scope.get(_ENTRY_KEY)
        if not isinstance(entry, _Pending) or entry.sid is not None:
            entry = _Pending(client_address(scope))  # (a handshake the gate did not see)
            self._count(entry)
        entry.sid = eio_sid
        environ[EIO_SID_KEY] = eio_sid
        # The handshake's body reader, never read again: python-engineio makes a class for
        # each request's (2 KiB a socket, kept as long as the environ).
        environ.pop("wsgi.input", None)
        if scope.get("type") == "websocket":
            self._channels[eio_sid] = environ["asgi.send"]
        self._start(entry)
        return await self._on_connect(eio_sid, environ)

    async def _message(self, eio_sid: str, data: str | bytes) -> Any:
        if not isinstance(data, str):  # an attachment: never read, never kept
            metrics.socket_binary_attachment()
            return None
        kind = data[:1]
        if kind in _BINARY:
            metrics.socket_binary_packet()
            if eio_sid not in self._pending:
                await self._refuse_binary(eio_sid, data)
            return None
        if kind != _CONNECT and eio_sid in self._pending:
            return None  # before sign-in, only a CONNECT is read
        try:
            return await self._on_message(eio_sid, data)
        except (ValueError, LookupError, TypeError) as exc:
            # Not a Socket.IO packet, or an event that is not a list with a name: python-
            # socketio's decoder and dispatch fail on it (the events' handlers run in tasks
            # of their own: their errors are not here). Dropped, without a traceback.
            log.debug("socket message dropped: %r", exc)
            return None

    async def _refuse_binary(self, eio_sid: str, data: str) -> None:
        """Answer a binary event that asks for an acknowledgement with 422."""
        try:
            header = self._packet_class(encoded_packet=data)
        except Exception:  # not even a packet: nothing to answer
            return
        if header.packet_type != sio_packet.BINARY_EVENT or header.id is None:
            return
        if header.namespace not in (None, "/"):
            return
        ack = self._packet_class(
            sio_packet.ACK, namespace=header.namespace, id=header.id, data=[BINARY_REFUSED]
        )
        await self._eio.send(eio_sid, ack.encode())

    async def _disconnected(self, eio_sid: str, reason: Any = None) -> Any:
        self._closing.add(eio_sid)
        try:
            return await self._on_disconnect(eio_sid, reason)
        finally:
            self._closing.discard(eio_sid)
            self._channels.pop(eio_sid, None)
            entry = self._pending.pop(eio_sid, None)
            if entry is not None:
                self._settle(entry)

    # -- sign-in (called by the Socket.IO handlers) ------------------------------------

    def signed_in(self, environ: dict[str, Any]) -> None:
        """The session of ``environ`` (its handshake's) completed an authenticated CONNECT."""
        entry = self._pending.pop(environ.get(EIO_SID_KEY, ""), None)
        if entry is not None:
            self._settle(entry)

    def signed_out(self, environ: dict[str, Any]) -> None:
        """The session of ``environ`` left the namespace: if its Engine.IO session stays
        open, it is before sign-in again (and closed unless it connects anew in time)."""
        eio_sid = environ.get(EIO_SID_KEY)
        if not isinstance(eio_sid, str) or eio_sid in self._closing or eio_sid in self._pending:
            return
        entry = _Pending(client_address(environ.get("asgi.scope") or {}), eio_sid)
        self._count(entry)
        self._start(entry)

    def stop(self) -> None:
        """Cancel the timers (the server is going away)."""
        for entry in self._pending.values():
            if entry.timer is not None:
                entry.timer.cancel()
                entry.timer = None

    # -- bookkeeping -------------------------------------------------------------------

    def _count(self, entry: _Pending) -> None:
        self._per_address[entry.address] = self._per_address.get(entry.address, 0) + 1
        entry.counted = True

    def _uncount(self, entry: _Pending) -> None:
        if not entry.counted:
            return
        entry.counted = False
        left = self._per_address.get(entry.address, 0) - 1
        if left > 0:
            self._per_address[entry.address] = left
        else:
            self._per_address.pop(entry.address, None)

    def _start(self, entry: _Pending) -> None:
        assert entry.sid is not None
        self._pending[entry.sid] = entry
        metrics.socket_session_pending()
        loop = asyncio.get_running_loop()
        entry.timer = loop.call_later(self.connect_timeout, self._expire, entry)

    def _settle(self, entry: _Pending) -> None:
        """An entry taken out of ``_pending``: no timer, not counted."""
        if entry.timer is not None:
            entry.timer.cancel()
            entry.timer = None
        self._uncount(entry)
        metrics.socket_session_settled()

    def _expire(self, entry: _Pending) -> None:
        sid = entry.sid
        if sid is None or self._pending.get(sid) is not entry:
            return
        del self._pending[sid]
        entry.timer = None
        self._settle(entry)
        metrics.socket_session_timed_out()
        log.debug("socket session %s closed: no sign-in within %ss", sid, self.connect_timeout)
        task = asyncio.get_running_loop().create_task(self._close(sid))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _close(self, sid: str) -> None:
        """End the session: its websocket through the ASGI channel (uvicorn then closes the
        connection even if the client ignores the close), else by Engine.IO."""
        channel = self._channels.get(sid)
        if channel is not None:
            close = {"type": "websocket.close", "code": POLICY_VIOLATION, "reason": "no sign-in"}
            try:
                await asyncio.wait_for(channel(close), CLOSE_SECONDS)
                return
            except Exception as exc:  # (a websocket that ended meanwhile)
                log.debug("closing socket session %s's websocket failed: %r", sid, exc)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._eio.disconnect(sid), CLOSE_SECONDS)
