"""One write per answer: uvicorn's HTTP protocol with its socket writes gathered per event
loop turn.

uvicorn writes an answer's status line and headers as soon as the app sends
``http.response.start`` and its body on ``http.response.body``: two ``send`` calls and two
TCP segments per answer. Both messages come in the same turn of the event loop, so the
writes a connection makes within one turn are gathered and sent together at the end of it:
one system call and one segment per answer. Anything written goes out at the end of that
same turn (nothing waits for a timer), in the order it was written, and before the
connection is closed.

Served with ``uvicorn --http taskhub.transport.http.coalescing:CoalescingHttpToolsProtocol``
(``taskhub serve`` does).
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

PROTOCOL = f"{__name__}:CoalescingHttpToolsProtocol"


class CoalescingTransport:
    """A transport whose writes are sent together once the current loop turn is done; every
    other call goes to the transport it wraps (a WebSocket upgrade keeps this one)."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def flush(self) -> None:
        """Send what was written so far (nothing once the connection is closing)."""
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class CoalescingHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol on a ``CoalescingTransport``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(CoalescingTransport(transport, self.loop))  # type: ignore[arg-type]
