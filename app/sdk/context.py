"""``TaskContext``: what a running Extension sees of its task."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from typing import Any

from taskhub.sdk.errors import TaskCancelled
from taskhub.sdk.logs import level_of

ProgressSink = Callable[[float, "str | None"], None]
LogSink = Callable[[str, str, "str | None"], None]  # (level, message, logger)


class TaskContext:
    """Handed to ``Extension.run``. Progress reports are non-blocking and thread-safe;
    cancellation is cooperative: check ``ctx.cancelled`` (or wait on it) and return early.

    The worker drops the outcome of a cancelled run, whatever it returns or raises.
    """

    def __init__(
        self,
        *,
        task_id: str,
        job_name: str,
        room_id: str,
        attempt: int,
        payload: dict[str, Any],
        progress_sink: ProgressSink,
        loop: asyncio.AbstractEventLoop,
        log_sink: LogSink | None = None,
    ) -> None:
        self.task_id = task_id
        self.job_name = job_name
        self.room_id = room_id
        self.attempt = attempt
        self.payload = payload
        self._sink = progress_sink
        self._loop = loop
        self._log_sink = log_sink
        self._cancel_event = threading.Event()
        self._async_cancel = asyncio.Event()

    def progress(self, fraction: float, message: str | None = None) -> None:
        """Report progress (0..1, and an optional message). Cheap: reports are coalesced."""
        if not 0.0 <= fraction <= 1.0:
            raise ValueError(f"progress must be within 0..1, got {fraction!r}")
        with contextlib.suppress(RuntimeError):  # the worker's loop is gone: nobody listens
            self._loop.call_soon_threadsafe(self._sink, float(fraction), message)

    def log(self, message: object, level: str | int = "info") -> None:
        """Send a line to the task's log, shown live on the room page (``debug``,
        ``info``, ``warning``, ``error``, ``critical``; an unknown level is ``info``).
        Sync, cheap and safe from any thread: lines are buffered and shipped in the
        background, the oldest dropped (counted) beyond the worker's bounds. Never raises,
        never fails the run. The run's ``logging`` records at INFO and above are captured
        too (``taskhub.sdk.logs``)."""
        if self._log_sink is None:
            return
        try:
            self._log_sink(level_of(level), str(message), None)
        except Exception:  # a line is never worth failing the run for
            return

    @property
    def cancelled(self) -> bool:
        """True once the task was cancelled (by a user, or the worker shutting down)."""
        return self._cancel_event.is_set()

    @property
    def cancel_event(self) -> threading.Event:
        """A ``threading.Event`` set on cancellation (for sync runs and their helpers)."""
        return self._cancel_event

    def raise_if_cancelled(self) -> None:
        """Raise ``TaskCancelled`` when the task was cancelled."""
        if self.cancelled:
            raise TaskCancelled(self.task_id)

    def wait_cancelled(self, timeout: float | None = None) -> bool:
        """Sync runs: block up to ``timeout`` seconds; True if the task was cancelled."""
        return self._cancel_event.wait(timeout)

    async def wait_cancelled_async(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Async runs: wait up to ``timeout`` seconds; True if the task was cancelled."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._async_cancel.wait(), timeout)
        return self.cancelled

    def _cancel(self) -> None:
        """Signal cancellation (called on the worker's loop)."""
        self._cancel_event.set()
        self._async_cancel.set()
