"""Socket.IO clients for system tests: a probe that records every event a real server sends.

Events reach one socket in the order the server emitted them, so "nothing else arrived"
is checked with a sentinel: cause a later event on the same socket, wait for it, and look
at what came before it (``SocketProbe.between``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from types import TracebackType
from typing import Any

import socketio

EVENT_TIMEOUT = 10.0
TASK_STATUS_KEYS = frozenset(
    {
        "id",
        "name",
        "room_id",
        "status",
        "created_at",
        "started_at",
        "completed_at",
        "queue_position",
        "worker_id",
        "error",
    }
)
# Taskhub's optional additions (docs/protocol.md, "Extensions over zndraw-joblib 0.1.7");
# ``result`` among them, so that results reach the room live.
TASK_STATUS_EXTRAS = frozenset(
    {
        "progress",
        "progress_message",
        "attempt",
        "result",
        "priority",
        "max_attempts",
        "run_at",
        "submitted_by",
        "version",
        "rerun_of",
    }
)
PROBLEM_KEYS = frozenset({"type", "title", "status", "detail"})


@dataclass(frozen=True)
class Received:
    """One server-to-client event: its position on the socket, name and payload."""

    index: int
    event: str
    data: Any


class SocketProbe:
    """A ``socketio.AsyncClient`` (websocket only, no reconnection) recording every event.

    Use as ``async with SocketProbe("browser") as probe: await probe.connect(url, token)``;
    leaving the block disconnects.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.client = socketio.AsyncClient(reconnection=False)
        self.received: list[Received] = []
        self._arrived = asyncio.Event()
        self.client.on("*", self._record)

    async def _record(self, event: str, *args: Any) -> None:
        data = args[0] if len(args) == 1 else list(args)
        self.received.append(Received(len(self.received), event, data))
        self._arrived.set()

    async def connect(
        self,
        base_url: str,
        token: str | None,
        within: float = 10.0,
        headers: dict[str, str] | None = None,
    ) -> None:
        """Connect with ``auth={"token": token}`` (no auth at all when ``token`` is None);
        ``headers`` go with the handshake (``Balancer.pin``: a cookie naming a replica)."""
        auth = None if token is None else {"token": token}
        await asyncio.wait_for(
            self.client.connect(
                base_url,
                auth=auth,
                headers=headers or {},
                transports=["websocket"],
                wait_timeout=within,
            ),
            within + 5,
        )

    async def disconnect(self) -> None:
        if self.client.connected:
            await asyncio.wait_for(self.client.disconnect(), 10)

    async def __aenter__(self) -> SocketProbe:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.disconnect()

    async def call(self, event: str, data: Any, within: float = 5.0) -> Any:
        """Emit ``event`` and return the server's acknowledgement (``within`` seconds)."""
        try:
            return await asyncio.wait_for(self.client.call(event, data, timeout=within), within + 1)
        except (socketio.exceptions.TimeoutError, TimeoutError):
            raise AssertionError(
                f"{self.name}: no acknowledgement of {event!r} {data!r} within {within}s"
            ) from None

    async def room_join(self, room_id: str) -> None:
        ack = await self.call("room_join", {"room_id": room_id})
        assert ack == {"room_id": room_id}, ack

    async def join_job_room(self, job_name: str, worker_id: str) -> None:
        ack = await self.call("join_job_room", {"job_name": job_name, "worker_id": worker_id})
        assert ack == {"job_name": job_name, "worker_id": worker_id}, ack

    def mark(self) -> int:
        """The index the next event will get."""
        return len(self.received)

    def between(self, start: int, end: int | None = None) -> list[tuple[str, Any]]:
        """``(event, data)`` of the events with ``start <= index < end``."""
        return [(r.event, r.data) for r in self.received[start:end]]

    def named(self, event: str) -> list[Any]:
        """Payloads of every ``event`` received so far."""
        return [r.data for r in self.received if r.event == event]

    async def wait_for(
        self,
        event: str,
        where: Callable[[Any], bool] = lambda _data: True,
        *,
        after: int = 0,
        within: float = EVENT_TIMEOUT,
    ) -> Received:
        """The first ``event`` at index ``>= after`` whose payload satisfies ``where``."""

        async def first_match() -> Received:
            while True:
                for item in self.received[after:]:
                    if item.event == event and where(item.data):
                        return item
                self._arrived.clear()
                await self._arrived.wait()

        try:
            return await asyncio.wait_for(first_match(), within)
        except TimeoutError:
            raise AssertionError(
                f"{self.name}: no matching {event!r} within {within}s; "
                f"received {self.between(after)}"
            ) from None

    async def wait_status(
        self, task_id: str, status: str, *, after: int = 0, within: float = EVENT_TIMEOUT
    ) -> Received:
        """The first ``task_status_event`` of ``task_id`` with ``status``."""
        return await self.wait_for(
            "task_status_event",
            lambda data: data.get("id") == task_id and data.get("status") == status,
            after=after,
            within=within,
        )


def assert_task_status_payload(data: dict[str, Any]) -> None:
    """Every key of zndraw-joblib's ``task_status_event`` is present, nothing but Taskhub's
    extras is added (docs/protocol.md, "Socket.IO"), and every timestamp carries a UTC
    offset."""
    keys = set(data)
    assert keys >= TASK_STATUS_KEYS, f"missing {TASK_STATUS_KEYS - keys}"
    unexpected = keys - TASK_STATUS_KEYS - TASK_STATUS_EXTRAS
    assert not unexpected, f"unexpected {unexpected}"
    for key in ("created_at", "started_at", "completed_at"):
        if data[key] is not None:
            assert datetime.fromisoformat(data[key]).utcoffset() is not None, (key, data[key])


def assert_problem_ack(ack: Any, status: int, slug: str) -> None:
    """The acknowledgement is an RFC 9457 problem object of the given type."""
    assert isinstance(ack, dict), ack
    assert set(ack) >= PROBLEM_KEYS, ack
    assert ack["status"] == status, ack
    assert ack["type"] == f"/v1/problems/{slug}", ack
    assert isinstance(ack["title"], str) and ack["title"], ack
    assert isinstance(ack["detail"], str), ack
