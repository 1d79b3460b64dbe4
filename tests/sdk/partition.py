"""A TCP proxy on 127.0.0.1 between a worker and its hub that fails the way a dead network
link does: while partitioned, whatever is sent on any connection (open, or opened
meanwhile) is swallowed, and nothing is answered, closed or refused. Connections that saw
the partition stay dead after ``heal()``; new ones go through again.

It runs its own event loop in a thread, so blocking tests and async ones can drive it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

HOST = "127.0.0.1"
CHUNK = 65536
T = TypeVar("T")


@dataclass
class _Connection:
    dead: bool


class PartitionProxy:
    """Use as ``with PartitionProxy(server.port) as proxy: ... proxy.url ...``."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.port = 0
        self._partitioned = False
        self._connections: list[_Connection] = []
        self._handlers: set[asyncio.Task[Any]] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> PartitionProxy:
        self._thread.start()
        self._server = self._run(asyncio.start_server(self._accept, HOST, 0))
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def partition(self) -> None:
        """Every connection goes dead, and so does every one opened until ``heal()``."""
        self._run(self._set(partitioned=True))

    def heal(self) -> None:
        self._run(self._set(partitioned=False))

    def stop(self) -> None:
        if self._server is not None:
            self._run(self._shut(self._server))
            self._server = None
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            self._loop.close()

    def _run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(10)

    async def _set(self, *, partitioned: bool) -> None:
        self._partitioned = partitioned
        if partitioned:
            for connection in self._connections:
                connection.dead = True

    async def _shut(self, server: asyncio.Server) -> None:
        server.close()
        for handler in list(self._handlers):
            handler.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        connection = _Connection(dead=self._partitioned)
        self._connections.append(connection)
        upstream: asyncio.StreamWriter | None = None
        try:
            up_reader, upstream = await asyncio.open_connection(HOST, self.target_port)
            await asyncio.gather(
                self._pump(reader, upstream, connection), self._pump(up_reader, writer, connection)
            )
        except OSError:
            pass
        finally:
            for side in (writer, upstream):
                if side is not None:
                    side.transport.abort()
            self._handlers.discard(handler)

    @staticmethod
    async def _pump(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: _Connection
    ) -> None:
        """Forward until the sender closes (passing the close on unless the link is dead)."""
        with contextlib.suppress(OSError):
            while data := await reader.read(CHUNK):
                if not connection.dead:
                    writer.write(data)
                    await writer.drain()
            if not connection.dead:
                writer.close()

    def __enter__(self) -> PartitionProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
