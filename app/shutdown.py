"""Start a graceful shutdown the moment the server is told to stop.

uvicorn answers SIGTERM or SIGINT by closing its listeners and waiting for open connections
to finish; it runs the application's lifespan shutdown only after them. A long-poll or a
Socket.IO connection would hold it up to the graceful timeout, so the application answers
them as soon as the signal arrives: ``StopSignals`` chains a callback onto the handlers the
server installed (uvicorn installs them with ``signal.signal`` in every worker process and
restores its predecessors when it is done).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import signal
import threading
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """While installed, SIGINT and SIGTERM also run ``on_stop`` (once) on the event loop,
    after the server's own handler."""

    def __init__(self, on_stop: Callable[[], Awaitable[None]]) -> None:
        self._on_stop = on_stop
        self._installed: dict[int, Any] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None

    def install(self) -> None:
        """Chain onto the current handlers; a no-op outside the main thread and for signals
        nobody handles in Python (their default action stays as it is)."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._loop = asyncio.get_running_loop()
        for sig in STOP_SIGNALS:
            previous = signal.getsignal(sig)
            if not callable(previous):
                continue
            self._installed[sig] = previous
            signal.signal(sig, self._handler)

    def uninstall(self) -> None:
        for sig, previous in self._installed.items():
            if signal.getsignal(sig) == self._handler:
                signal.signal(sig, previous)
        self._installed.clear()

    def _handler(self, sig: int, frame: FrameType | None) -> None:
        previous = self._installed.get(sig)
        if callable(previous):
            previous(sig, frame)
        if self._loop is not None and self._task is None:
            # A fresh context: the signal may interrupt any request (and its request id).
            self._loop.call_soon_threadsafe(self._start, context=contextvars.Context())

    def _start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        try:
            await self._on_stop()
        except Exception:
            log.exception("graceful shutdown: draining failed")
