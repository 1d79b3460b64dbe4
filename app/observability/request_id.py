"""A request id per HTTP request and per Socket.IO connection, carried by every log line
written while it is handled (a context variable) and echoed as ``X-Request-ID``."""

from __future__ import annotations

import itertools
import re
import secrets
from collections.abc import Awaitable, Callable, Iterator, MutableMapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

HEADER = "X-Request-ID"
_HEADER_KEY = HEADER.lower().encode()
# What an incoming id may look like: bounded, and safe to copy into logs and headers.
_WELL_FORMED = re.compile(r"[A-Za-z0-9._:-]{1,128}")

current_request_id: ContextVar[str | None] = ContextVar("taskhub_request_id", default=None)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


# 32 hex digits: a random prefix per process and a counter (a fresh uuid4 per request
# costs a system call for its randomness).
_PROCESS_PREFIX = secrets.token_hex(8)
_sequence = itertools.count(secrets.randbelow(1 << 32))


def new_request_id() -> str:
    return f"{_PROCESS_PREFIX}{next(_sequence) & 0xFFFF_FFFF_FFFF_FFFF:016x}"


def accepted_request_id(value: str | None) -> str:
    """The incoming id when it is well formed, else a fresh one."""
    if value is not None and _WELL_FORMED.fullmatch(value):
        return value
    return new_request_id()


def socket_request_id(sid: str) -> str:
    """The id of a Socket.IO connection's log lines, derived from its sid."""
    return f"sio-{sid}"


@contextmanager
def bound(request_id: str) -> Iterator[str]:
    """Log lines written inside carry ``request_id``."""
    token = current_request_id.set(request_id)
    try:
        yield request_id
    finally:
        current_request_id.reset(token)


def _incoming(scope: Scope) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == _HEADER_KEY:
            return str(value.decode("latin-1"))
    return None


class RequestIdMiddleware:
    """Pure ASGI (cheap, and fine for long-polls): binds the id for the whole call and adds
    it to the response headers, problem responses included."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = accepted_request_id(_incoming(scope))
        encoded = request_id.encode()

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", ()) if k != _HEADER_KEY]
                headers.append((_HEADER_KEY, encoded))
                message["headers"] = headers
            await send(message)

        with bound(request_id):
            await self.app(scope, receive, send_with_id)
