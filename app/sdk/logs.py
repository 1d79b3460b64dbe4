"""A run's log, shipped to the hub (``POST /tasks/{task_id}/logs``): ``ctx.log(...)`` and
the standard ``logging`` records the run's code emits while it runs.

Attribution: a context variable holds the run's ``TaskLog`` while ``Extension.run``
executes (an async run's task and the tasks it starts; a sync run's thread). A handler on
the root logger, attached while any run executes, hands a record to the log of the run
in whose context it was emitted, so concurrent runs never see each other's lines. Not
captured: records of the SDK's and its libraries' own loggers (``taskhub``, ``httpx``,
``httpcore``, ``socketio``, ``engineio``, ``aiohttp``, ``asyncio``), records below the
capture level (``INFO`` unless ``set_capture_level`` or ``TASKHUB_LOG_CAPTURE_LEVEL`` says
otherwise) or below their logger's own level (configure ``logging``, e.g.
``logging.basicConfig(level=logging.INFO)``; ``taskhub worker`` does), records of loggers
that do not propagate to the root, and records from threads the run starts without
copying its context (``contextvars.copy_context().run(...)`` carries it over; a
``ThreadPoolExecutor`` does not, ``asyncio.to_thread`` does).

Bounds: a run's lines wait in memory, at most ``max_lines`` (the oldest go first, and are
counted); a batch leaves every ``interval`` seconds or as soon as ``batch_lines`` wait,
one request at a time, at most ``lines_per_second`` on average (a flood stays in the
buffer, whose oldest lines then go). The count of dropped lines goes with the next batch
(``dropped``). Before the run's end is reported, what is left is sent (``close``). A line
never blocks or fails the run: ``add`` is O(1) and never raises; a batch the hub does not
take (down, 5xx, 409 once the task moved on) is dropped, never retried; a refusal that
will not change (403/404/409/422) stops the shipping of that run.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from taskhub.sdk.errors import HubUnavailable, ProblemError

if TYPE_CHECKING:
    from taskhub.sdk.http import AsyncHub

log = logging.getLogger("taskhub.sdk.logs")

LEVELS = ("debug", "info", "warning", "error", "critical")
MAX_LINES_PER_POST = 500  # the hub's bound
# The SDK's own loggers and its libraries': never a run's lines.
EXCLUDED_LOGGERS = ("taskhub", "httpx", "httpcore", "socketio", "engineio", "aiohttp", "asyncio")
CAPTURE_LEVEL_ENV = "TASKHUB_LOG_CAPTURE_LEVEL"
MAX_MESSAGE_CHARS = 65_536  # longer messages are cut here (the hub cuts at 64 KiB of UTF-8)
BATCH_CHARS = 200_000  # of messages per request (the hub takes bodies up to 1 MiB)
FLUSH_SECONDS = 10.0  # the final flush gives up after this long (the run's end waits)

Send = Callable[[list[dict[str, Any]], int], Awaitable[None]]
Line = tuple[datetime, str, "str | None", str]

_CURRENT: contextvars.ContextVar[TaskLog | None] = contextvars.ContextVar(
    "taskhub_task_log", default=None
)


class TaskLog:
    """One run's buffered log and its shipping (on the worker's loop)."""

    def __init__(
        self,
        send: Send | None,
        loop: asyncio.AbstractEventLoop,
        *,
        max_lines: int = 1000,
        lines_per_second: float = 200.0,
        batch_lines: int = 100,
        interval: float = 0.2,
    ) -> None:
        self._send = send
        self._loop = loop
        self._max_lines = max_lines
        self._rate = lines_per_second
        self._batch_lines = batch_lines
        self._interval = interval
        self._lines: collections.deque[Line] = collections.deque()
        self._dropped = 0  # dropped since the last batch left
        self._lock = threading.Lock()
        self._open = send is not None  # lines are taken (None: a hub without task logs)
        self._closing = False  # the run ended: send what is left and stop
        self._full = asyncio.Event()
        self._pump_task: asyncio.Task[None] | None = None
        self._starting = False
        self.sent = 0  # lines the hub took (for tests and benchmarks)

    # -- any thread --------------------------------------------------------------

    def add(self, level: str, message: str, logger: str | None = None) -> None:
        """Buffer one line (the oldest goes, counted, when the buffer is full); O(1),
        never raises, never blocks but for a lock held for as long."""
        if not self._open:
            return
        line = (datetime.now(UTC), level, logger, message)
        with self._lock:
            lines = self._lines
            if len(lines) >= self._max_lines:
                lines.popleft()
                self._dropped += 1
            lines.append(line)
            wake = len(lines) == self._batch_lines
            start = self._pump_task is None and not self._starting
            self._starting = self._starting or start
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody ships
            if start:  # shipping starts with the first line (a run without any costs none)
                self._loop.call_soon_threadsafe(self.start)
            if wake:
                self._loop.call_soon_threadsafe(self._full.set)

    # -- the loop ------------------------------------------------------------------

    def start(self) -> None:
        """Start shipping (outside any run's context: the shipping is no run's code)."""
        if self._pump_task is None and self._open and not self._closing:
            self._pump_task = asyncio.create_task(
                self._pump(), name="taskhub-task-log", context=contextvars.Context()
            )

    async def close(self) -> None:
        """Send what is left, whatever the rate (given up after ``FLUSH_SECONDS``), then
        take no more lines."""
        self._closing = True
        self._full.set()
        try:
            if self._pump_task is None:
                await asyncio.wait_for(self._flush(), FLUSH_SECONDS)
            else:
                await asyncio.wait_for(asyncio.shield(self._pump_task), FLUSH_SECONDS)
        except TimeoutError:
            log.debug("Task log: the final flush timed out; what is left is dropped")
        finally:
            self.abort()

    def abort(self) -> None:
        """Stop at once; what waits is dropped."""
        self._open = False
        if self._pump_task is not None:
            self._pump_task.cancel()

    async def _pump(self) -> None:
        tokens = self._rate  # a token bucket: lines that may leave now
        last = time.monotonic()
        wait = self._interval
        while self._open:
            if not self._closing:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._full.wait(), wait)
            self._full.clear()
            if self._closing:
                await self._flush()
                return
            now = time.monotonic()
            tokens = min(self._rate, tokens + (now - last) * self._rate)
            last = now
            allowed = min(int(tokens), MAX_LINES_PER_POST)
            wait = self._interval
            if allowed and self._lines:
                tokens -= await self._ship(allowed)
            elif self._lines:  # over the rate: wait for a line's worth (or the close)
                wait = max(1.0 / self._rate, self._interval)

    async def _flush(self) -> None:
        while self._open and self._lines:
            if not await self._ship(MAX_LINES_PER_POST):
                return

    def _take(self, most: int) -> tuple[list[Line], int]:
        """Up to ``most`` of the oldest lines, within ``BATCH_CHARS`` of messages (one at
        least), and the count dropped before them."""
        batch: list[Line] = []
        chars = 0
        with self._lock:
            lines = self._lines
            while lines and len(batch) < most and (not batch or chars < BATCH_CHARS):
                line = lines.popleft()
                chars += len(line[3])
                batch.append(line)
            dropped, self._dropped = self._dropped, 0
        return batch, dropped

    async def _ship(self, most: int) -> int:
        """Send up to ``most`` of the oldest lines in one request; how many were taken
        off the buffer (0: shipping stopped)."""
        batch, dropped = self._take(most)
        if not batch:
            return 0
        body = [
            {"at": at.isoformat(), "level": level, "logger": logger, "message": _sendable(text)}
            for at, level, logger, text in batch
        ]
        assert self._send is not None
        try:
            await self._send(body, dropped)
            self.sent += len(batch)
        except ProblemError as exc:
            log.debug("Task log: the hub refused %d line(s): %s", len(batch), exc)
            if exc.status in (401, 403, 404, 405, 409, 422):  # will not change for this run
                self._open = False
                return 0
        except HubUnavailable as exc:
            log.debug("Task log: %d line(s) lost: %s", len(batch), exc)
        except Exception:
            log.debug("Task log: %d line(s) lost", len(batch), exc_info=True)
        return len(batch)

    # -- attribution -----------------------------------------------------------------

    @contextlib.contextmanager
    def capturing(self) -> Iterator[None]:
        """Within: the current context's ``logging`` records are this run's lines."""
        token = _CURRENT.set(self)
        _HANDLER.attach()
        try:
            yield
        finally:
            _HANDLER.detach()
            _CURRENT.reset(token)


def _sendable(text: str) -> str:
    """``text`` as the hub takes it: cut to ``MAX_MESSAGE_CHARS`` (marked), without U+0000
    (shown as ``\\x00``) and lone surrogates (replaced)."""
    if len(text) > MAX_MESSAGE_CHARS:
        text = text[: MAX_MESSAGE_CHARS - 14] + " … [truncated]"
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "replace").decode("utf-8")


def hub_sender(hub: AsyncHub, task_id: str, claim_token: str, timeout: float) -> Send:
    """Sends a batch of a run's lines in one attempt (a lost batch is not sent again:
    its lines may have been stored)."""

    async def send(lines: list[dict[str, Any]], dropped: int) -> None:
        body: dict[str, Any] = {"claim_token": claim_token, "lines": lines}
        if dropped:
            body["dropped"] = dropped
        await hub.request(
            "POST",
            f"/tasks/{task_id}/logs",
            json=body,
            retry_for=0,
            idempotent=False,
            http_timeout=timeout,
        )

    return send


def _excluded(name: str) -> bool:
    root = name.partition(".")[0]
    return root in EXCLUDED_LOGGERS


def _level_name(levelno: int) -> str:
    if levelno >= logging.CRITICAL:
        return "critical"
    if levelno >= logging.ERROR:
        return "error"
    if levelno >= logging.WARNING:
        return "warning"
    if levelno >= logging.INFO:
        return "info"
    return "debug"


class RunLogHandler(logging.Handler):
    """On the root logger while runs execute: a record goes to the run in whose context
    it was emitted (none outside runs)."""

    def __init__(self) -> None:
        super().__init__(_initial_capture_level())
        self.setFormatter(logging.Formatter("%(message)s"))  # tracebacks follow the message
        self._users = 0
        self._users_lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        run = _CURRENT.get()
        if run is None or _excluded(record.name):
            return
        try:
            message = self.format(record)
        except Exception:
            message = str(record.msg)
        run.add(_level_name(record.levelno), message, record.name)

    def handleError(self, record: logging.LogRecord) -> None:
        """A line never fails the run, nor prints logging's own traceback."""

    def attach(self) -> None:
        with self._users_lock:
            self._users += 1
            if self._users == 1:
                logging.getLogger().addHandler(self)

    def detach(self) -> None:
        with self._users_lock:
            self._users -= 1
            if self._users == 0:
                logging.getLogger().removeHandler(self)


def _initial_capture_level() -> int:
    name = os.environ.get(CAPTURE_LEVEL_ENV, "info").strip().lower()
    return logging.getLevelNamesMapping().get(name.upper(), logging.INFO)


_HANDLER = RunLogHandler()


def set_capture_level(level: int | str) -> None:
    """The least level of the ``logging`` records a run's log captures (default INFO)."""
    if isinstance(level, str):
        found = logging.getLevelNamesMapping().get(level.upper())
        if found is None:
            raise ValueError(f"unknown log level {level!r}: one of {', '.join(LEVELS)}")
        level = found
    _HANDLER.setLevel(level)


def level_of(level: Any) -> str:
    """A ``ctx.log`` level as the hub takes it: one of ``LEVELS`` (a ``logging`` number
    or an unknown name: the nearest / ``info``)."""
    if isinstance(level, int) and not isinstance(level, bool):
        return _level_name(level)
    name = str(level).lower()
    if name == "warn":
        return "warning"
    return name if name in LEVELS else "info"
