"""A TCP proxy on 127.0.0.1 in front of a server (a private ``redis-server``, a hub), for
network faults a real server cannot be asked to show:

- ``black_hole()``: the connections it carries now go half-open: whatever either side sends
  is swallowed and nothing is closed (Redis failed over behind a partition, a NAT that
  silently forgot an idle connection); new connections go through;
- ``partition()``: the same for every connection, and for every one opened until
  ``heal()`` (a dead network link: nothing answered, closed or refused); connections that
  saw the partition stay dead after ``heal()``;
- ``cut()``: every connection is reset and new ones are closed at once, until ``mend()``
  (the server unreachable for a moment, its data kept).

It runs its own event loop in a thread, so a server process can go through it while the
test blocks (``HubServer.start``), and tests of either colour can drive it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

HOST = "127.0.0.1"
CHUNK = 65536
T = TypeVar("T")


@dataclass
class _Link:
    """One client connection and its connection upstream."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    silent: bool = False
    pumps: list[asyncio.Task[None]] = field(default_factory=list)

    def reset(self) -> None:
        for writer in (self.client, self.upstream):
            writer.transport.abort()


class TcpProxy:
    """Use as ``with TcpProxy(server.port) as proxy: ... proxy.url("redis") ...``."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._links: list[_Link] = []
        self._refusing = False
        self._partitioned = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    def url(self, scheme: str) -> str:
        """A URL that goes through the proxy (``redis`` or ``http``)."""
        return (
            f"redis://{HOST}:{self.port}/0" if scheme == "redis" else f"http://{HOST}:{self.port}"
        )

    def start(self) -> TcpProxy:
        self._thread.start()
        self._server = self._call(lambda: asyncio.start_server(self._accept, HOST, 0))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def black_hole(self) -> None:
        """Swallow everything sent on the connections open now, closing none of them."""
        self._call(self._silence)

    def partition(self) -> None:
        """Every connection goes dead, and so does every one opened until ``heal()``."""

        async def partition() -> None:
            self._partitioned = True
            await self._silence()

        self._call(partition)

    def heal(self) -> None:
        async def heal() -> None:
            self._partitioned = False

        self._call(heal)

    def cut(self) -> None:
        """Reset every connection; close new ones at once until ``mend``."""

        async def cut() -> None:
            self._refusing = True
            for link in self._links:
                link.reset()

        self._call(cut)

    def mend(self) -> None:
        async def mend() -> None:
            self._refusing = False

        self._call(mend)

    def stop(self) -> None:
        if self._server is not None:
            self.cut()
            server = self._server
            self._server = None

            async def close() -> None:
                server.close()
                for link in self._links:
                    for pump in link.pumps:
                        pump.cancel()

            self._call(close)
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()

    def _call(self, make: Callable[[], Coroutine[Any, Any, T]]) -> T:
        """Run the coroutine ``make()`` on the proxy's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(make(), self._loop).result(10)

    async def _silence(self) -> None:
        for link in self._links:
            link.silent = True

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._refusing:
            writer.transport.abort()
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(HOST, self.target_port)
        except OSError:
            writer.transport.abort()
            return
        link = _Link(writer, up_writer, silent=self._partitioned)
        self._links.append(link)
        link.pumps = [
            asyncio.create_task(self._pump(reader, up_writer, link)),
            asyncio.create_task(self._pump(up_reader, writer, link)),
        ]

    @staticmethod
    async def _pump(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, link: _Link
    ) -> None:
        try:
            while data := await reader.read(CHUNK):
                if not link.silent:
                    writer.write(data)
                    await writer.drain()
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            if not link.silent:
                writer.transport.abort()

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
