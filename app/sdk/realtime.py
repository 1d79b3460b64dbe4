"""The worker's Socket.IO link: wake-ups (``task_available``, and ``resync``: the hub
dropped events this link read too slowly, a wake-up perhaps among them), cancel notices
(``task_cancelled``), and tasks the hub pushes into slots the worker granted it
(``worker_ready`` / ``task_pushed``, docs/protocol.md "Task push"). Only hints and a short
cut: the worker polls anyway, so a link that is down or blocked costs latency, never a
task (a push that does not arrive is recovered by its lease).

The link (re)connects on its own, and after every (re)connection joins the job rooms of
the current worker id again.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from typing import Any

import socketio

from taskhub.sdk.errors import problem_error
from taskhub.sdk.http import Backoff

log = logging.getLogger("taskhub.sdk")
Callback = Callable[[], None]
CancelNotice = Callable[[str, str | None], None]  # (task id, worker id if the notice says)
Pushed = Callable[[str, list[dict[str, Any]]], None]  # (worker id, tasks as claimed)
ProviderRequest = Callable[[str, str, str], None]  # (provider full name, request id, params)
ACK_TIMEOUT = 10.0
SHUTDOWN_TIMEOUT = 5.0
# The largest ``task_update`` the link sends, as JSON text: half the hub's default
# ``TASKHUB_MAX_SOCKET_MESSAGE_BYTES`` (512 KiB), past which the hub closes the connection
# (and with it the link of every task). A larger report goes by PATCH.
LINK_MESSAGE_BYTES = 256 * 1024
_ROOM_FOR_THE_REST = 4096  # the fields beside the result and the text ones, at most


def fits_link(body: dict[str, Any], result_bytes: int) -> bool:
    """Whether the report ``body`` (whose ``result`` is ``result_bytes`` of UTF-8 JSON)
    stays within ``LINK_MESSAGE_BYTES`` however the client's JSON spells it. Measured
    only when a bound does not settle it: ``\\u`` escapes make a result at most 3 times
    its UTF-8 bytes, and a text at most 12 characters a character."""
    texts = sum(len(value) for value in body.values() if isinstance(value, str))
    if 3 * result_bytes + 12 * texts + _ROOM_FOR_THE_REST <= LINK_MESSAGE_BYTES:
        return True
    return len(json.dumps(body)) + _ROOM_FOR_THE_REST <= LINK_MESSAGE_BYTES


class SocketLink:
    def __init__(
        self,
        url: str,
        token: str,
        *,
        path: str = "socket.io",
        on_task_available: Callback,
        on_task_cancelled: CancelNotice,
        on_joined: Callback,
        on_dropped: Callback,
        on_task_pushed: Pushed | None = None,
        on_provider_request: ProviderRequest | None = None,
    ) -> None:
        self._url = url.rstrip("/")
        self._token = token
        self._path = path
        self._on_task_available = on_task_available
        self._on_task_cancelled = on_task_cancelled
        self._on_joined = on_joined
        self._on_dropped = on_dropped
        self._on_task_pushed = on_task_pushed
        self._on_provider_request = on_provider_request
        self._worker_id = ""
        self._jobs: list[str] = []
        self._providers: list[str] = []
        self._listening = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._sio = socketio.AsyncClient(
            reconnection=True,
            reconnection_delay=0.5,
            reconnection_delay_max=5.0,
            # The worker's own SIGINT handler drains; the client's would cancel every task.
            handle_sigint=False,
        )
        self._sio.on("connect", self._connected)
        self._sio.on("disconnect", self._disconnected)
        self._sio.on("task_available", self._task_available)
        self._sio.on("resync", self._task_available)
        self._sio.on("task_cancelled", self._task_cancelled)
        self._sio.on("task_pushed", self._task_pushed)
        self._sio.on("provider_request", self._provider_request)

    @property
    def listening(self) -> bool:
        """Connected, and every job room joined."""
        return self._listening.is_set()

    def bind(self, worker_id: str, jobs: list[str], providers: list[str] | None = None) -> None:
        """Serve ``jobs`` (and the ``providers``, by full name) as ``worker_id`` (again,
        after the worker got a new id)."""
        self._worker_id = worker_id
        self._jobs = list(jobs)
        self._providers = list(providers or ())
        if self._sio.connected:
            self._spawn(self._join_all())

    def start(self) -> None:
        self._spawn(self._connect_until_up())

    async def leave_all(self, within: float = ACK_TIMEOUT) -> None:
        """Leave every job room, waiting (in parallel) up to ``within`` seconds for the
        acks."""
        self._listening.clear()
        if not self._sio.connected:
            return
        leaving = [self._leave(job, within) for job in self._jobs]
        leaving += [self._leave_provider(name, within) for name in self._providers]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*leaving), within)

    async def _leave(self, job: str, within: float) -> None:
        with contextlib.suppress(Exception):
            payload = {"job_name": job, "worker_id": self._worker_id}
            await self._sio.call("leave_job_room", payload, timeout=within)

    async def _leave_provider(self, name: str, within: float) -> None:
        with contextlib.suppress(Exception):
            payload = {"provider_name": name, "worker_id": self._worker_id}
            await self._sio.call("leave_provider_room", payload, timeout=within)

    async def close(self, within: float = SHUTDOWN_TIMEOUT) -> None:
        """Stop reconnecting and disconnect (waiting up to ``within`` seconds for that)."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._sio.shutdown(), within)

    def _spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect_until_up(self) -> None:
        """The first connection (the client's own reconnection covers later drops)."""
        delays = Backoff(initial=0.5, maximum=10.0).delays()
        while not self._closed and not self._sio.connected:
            try:
                await self._sio.connect(
                    self._url,
                    auth={"token": self._token},
                    socketio_path=self._path,
                    wait_timeout=5,
                )
                return
            except socketio.exceptions.ConnectionError as exc:
                delay = next(delays)
                log.info(
                    "Socket.IO connect failed (%s); polling meanwhile, retry in %.1fs", exc, delay
                )
                await asyncio.sleep(delay)

    async def _connected(self) -> None:
        self._spawn(self._join_all())

    async def _join_all(self) -> None:
        """Join every job room (also enters ``worker:{id}``, for cancel notices)."""
        self._listening.clear()
        worker_id, jobs = self._worker_id, list(self._jobs)
        for job in jobs:
            try:
                ack = await self._sio.call(
                    "join_job_room", {"job_name": job, "worker_id": worker_id}, timeout=ACK_TIMEOUT
                )
            except Exception as exc:  # timeouts, a connection that dropped meanwhile
                log.info("join_job_room %s failed: %s", job, exc)
                return
            if isinstance(ack, dict) and "status" in ack and "type" in ack:
                log.warning("join_job_room %s refused: %s", job, ack.get("detail"))
                return
        for name in list(self._providers):
            await self._join_provider(name, worker_id)
        if worker_id == self._worker_id and self._sio.connected:
            self._listening.set()
            log.info("Socket.IO: listening on %d job room(s)", len(jobs))
            self._on_joined()

    async def _join_provider(self, name: str, worker_id: str) -> None:
        """Join a provider's room: its reads come as ``provider_request`` (a refusal is
        logged; the provider's readers then time out)."""
        try:
            ack = await self._sio.call(
                "join_provider_room",
                {"provider_name": name, "worker_id": worker_id},
                timeout=ACK_TIMEOUT,
            )
        except Exception as exc:
            log.info("join_provider_room %s failed: %s", name, exc)
            return
        if isinstance(ack, dict) and "status" in ack and "type" in ack:
            log.warning("join_provider_room %s refused: %s", name, ack.get("detail"))

    async def _provider_request(self, data: Any = None) -> None:
        if self._on_provider_request is None or not isinstance(data, dict):
            return
        name, request_id, params = (data.get(k) for k in ("provider_name", "request_id", "params"))
        if isinstance(name, str) and isinstance(request_id, str) and isinstance(params, str):
            self._on_provider_request(name, request_id, params)

    async def _disconnected(self, *_reason: Any) -> None:
        self._listening.clear()
        if not self._closed:
            log.info("Socket.IO connection dropped; reconnecting, polling meanwhile")
            self._on_dropped()

    async def _task_available(self, _data: Any = None) -> None:
        self._on_task_available()

    async def grant(self, slots: int, within: float = ACK_TIMEOUT) -> int | None:
        """Grant the hub ``slots`` more for pushed tasks (0: ask it to look again for the
        slots it holds); the slots it holds now, or None when it refused (a hub without
        push answers an unknown event with a problem; one that answers nothing times out)
        or the link is down."""
        return await self._slots_call("worker_ready", {"slots": slots}, within)

    async def pause(self, within: float = ACK_TIMEOUT) -> int | None:
        """Take back the granted slots; how many were returned (None as for ``grant``)."""
        return await self._slots_call("worker_pause", {}, within)

    async def _slots_call(self, event: str, data: dict[str, Any], within: float) -> int | None:
        if not self.listening:
            return None
        try:
            ack = await self._sio.call(
                event, {"worker_id": self._worker_id, **data}, timeout=within
            )
        except Exception as exc:  # a timeout, a connection that dropped meanwhile
            log.info("%s failed: %s", event, exc)
            return None
        slots = ack.get("slots") if isinstance(ack, dict) else None
        if type(slots) is not int or "status" in ack:
            log.info("%s refused: %s", event, ack.get("detail") if isinstance(ack, dict) else ack)
            return None
        return slots

    async def update(
        self, task_id: str, body: dict[str, Any], within: float
    ) -> dict[str, Any] | None:
        """``PATCH /tasks/{task_id}`` with ``body`` over the link (``task_update``): the
        hub's answer; None when none came within ``within`` seconds or the link is down
        (then it may or may not have been applied). A refusal raises its ``ProblemError``
        (404 ``not-found``: a hub without the event)."""
        if not self.listening:
            return None
        try:
            ack = await self._sio.call("task_update", {**body, "task_id": task_id}, timeout=within)
        except Exception as exc:  # a timeout, a connection that dropped meanwhile
            log.info("task_update %s got no answer: %s", task_id, exc)
            return None
        if not isinstance(ack, dict):
            return None
        status = ack.get("status")
        if type(status) is int and "type" in ack:
            raise problem_error(status, ack)
        return ack

    async def _task_pushed(self, data: Any = None) -> None:
        if self._on_task_pushed is None or not isinstance(data, dict):
            return
        worker_id, tasks = data.get("worker_id"), data.get("tasks")
        if isinstance(worker_id, str) and isinstance(tasks, list):
            self._on_task_pushed(worker_id, [t for t in tasks if isinstance(t, dict)])

    async def _task_cancelled(self, data: Any = None) -> None:
        """Passes on the task id, and the worker id the notice is meant for: the socket
        stays in the notice room of an id the worker had before it registered again."""
        if not isinstance(data, dict) or not isinstance(data.get("task_id"), str):
            return
        worker_id = data.get("worker_id")
        self._on_task_cancelled(data["task_id"], worker_id if isinstance(worker_id, str) else None)
