"""Raw Socket.IO sessions over one websocket each (``/socket.io/?EIO=4&transport=websocket``),
as light per session as a client gets: what the memory and scale scenarios hold by the
thousand. A session answers the server's pings, may sign in (a Socket.IO CONNECT with a
token), call events and wait for their acknowledgements, and hands the server's events to
a callback.

Clients offer permessage-deflate when asked, as browsers do (python-socketio's aiohttp
client does not): the hub's uvicorn then keeps zlib state for the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import orjson
import websockets

OPEN_TIMEOUT_SECONDS = 30.0
CALL_TIMEOUT_SECONDS = 30.0
BATCH = 50  # sessions opened at once by ``open_sessions``

# (session, event name, its data), called from the session's reader: it must not wait.
EventHandler = Callable[["Session", str, Any], None]


class SessionError(RuntimeError):
    """The server refused a CONNECT, or a session closed while a call waited."""


def websocket_url(base_url: str) -> str:
    """The Engine.IO websocket endpoint of a hub at ``base_url`` (``http://host:port``)."""
    return base_url.replace("http://", "ws://", 1) + "/socket.io/?EIO=4&transport=websocket"


class Session:
    """One Engine.IO websocket session in namespace ``/``: opened, optionally signed in,
    answering pings until closed."""

    def __init__(self, url: str, *, deflate: bool, on_event: EventHandler | None = None) -> None:
        self.url = url
        self.deflate = deflate
        self.on_event = on_event
        self.ws: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._connected: asyncio.Future[str] | None = None
        self._acks: dict[int, asyncio.Future[Any]] = {}
        self._ids = itertools.count()

    async def open(self, token: str | None) -> None:
        """Open the websocket; with a ``token``, sign in (CONNECT) and wait for the answer."""
        compression = "deflate" if self.deflate else None
        self.ws = await websockets.connect(
            self.url, max_size=None, open_timeout=OPEN_TIMEOUT_SECONDS, compression=compression
        )
        opening = await self.ws.recv()
        if not (isinstance(opening, str) and opening.startswith("0")):
            raise SessionError(f"not an Engine.IO opening: {opening!r}")
        if token is not None:
            self._connected = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read())
        if self._connected is not None:
            await self.ws.send("40" + orjson.dumps({"token": token}).decode())
            answer = await asyncio.wait_for(self._connected, CALL_TIMEOUT_SECONDS)
            if not answer.startswith("40"):
                raise SessionError(f"CONNECT refused: {answer[:300]}")

    async def call(self, event: str, data: Any) -> Any:
        """Send ``event`` with ``data`` and return its acknowledgement's data."""
        ack_id = next(self._ids)
        answer = asyncio.get_running_loop().create_future()
        self._acks[ack_id] = answer
        try:
            await self.ws.send(f"42{ack_id}" + orjson.dumps([event, data]).decode())
            return await asyncio.wait_for(answer, CALL_TIMEOUT_SECONDS)
        finally:
            self._acks.pop(ack_id, None)

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                if message == "2":
                    await self.ws.send("3")
                elif message.startswith("42"):
                    if self.on_event is not None:
                        event, data = orjson.loads(message[2:])[:2]
                        self.on_event(self, event, data)
                elif message.startswith("43"):
                    self._acknowledged(message[2:])
                elif message.startswith("4") and self._connected and not self._connected.done():
                    self._connected.set_result(message)  # 40{sid} or 44{error}
        except websockets.ConnectionClosed:
            pass
        finally:
            self._fail_waiting()

    def _acknowledged(self, body: str) -> None:
        digits = len(body) - len(body.lstrip("0123456789"))
        answer = self._acks.get(int(body[:digits]))
        if answer is not None and not answer.done():
            data = orjson.loads(body[digits:])
            answer.set_result(data[0] if data else None)

    def _fail_waiting(self) -> None:
        gone = SessionError("the session closed")
        waiting = [*self._acks.values(), *([self._connected] if self._connected else [])]
        for answer in waiting:
            if not answer.done():
                answer.set_exception(gone)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader


async def open_in_batches(sessions: Sequence[Session], opener: Callable[[Session], Any]) -> None:
    """Run ``opener(session)`` (a coroutine) for every session, ``BATCH`` at a time."""
    for start in range(0, len(sessions), BATCH):
        await asyncio.gather(*(opener(session) for session in sessions[start : start + BATCH]))


async def open_sessions(
    url: str, count: int, token: str | None, room: str, deflate: bool
) -> list[Session]:
    """``count`` sessions, each signed in with ``token`` and in ``room`` (``room_join``);
    without a token, left before sign-in."""

    async def opened(session: Session) -> None:
        await session.open(token)
        if token is not None:
            ack = await session.call("room_join", {"room_id": room})
            if ack != {"room_id": room}:
                raise SessionError(f"room_join refused: {ack}")

    sessions = [Session(url, deflate=deflate) for _ in range(count)]
    await open_in_batches(sessions, opened)
    return sessions


async def close_sessions(sessions: Sequence[Session]) -> None:
    await asyncio.gather(*(session.close() for session in sessions), return_exceptions=True)
