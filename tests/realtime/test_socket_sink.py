"""The Socket.IO sink: with rooms on other replicas (a Redis manager, which publishes in the
background itself), every event is emitted, whatever its payload holds."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

from taskhub.realtime.socket_sink import SocketSink
from taskhub.rules.events import TaskStatusChanged, WorkerRemoved
from taskhub.rules.states import TaskStatus
from tests.support.records import a_task_record


class SharedRooms:
    """An emitter without the in-process manager (rooms shared through Redis, or the taskiq
    worker's write-only one): it records what it was asked to send."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any], str]] = []

    async def emit(self, event: str, data: Any, *, room: str | None = None) -> None:
        assert room is not None
        self.sent.append((event, data, room))


async def test_an_event_whose_result_holds_an_integer_beyond_64_bits_goes_out() -> None:
    emitter = SharedRooms()
    sink = SocketSink(emitter)
    record = a_task_record(status=TaskStatus.COMPLETED, result={"big": 2**70})
    await sink([TaskStatusChanged(record, TaskStatus.RUNNING)])
    await sink.drain(within=5)
    [(name, payload, room)] = emitter.sent
    assert (name, room) == ("task_status_event", "room:room")
    assert payload["result"] == {"big": 2**70}


async def test_an_event_for_the_process_s_own_listeners_is_not_emitted() -> None:
    emitter = SharedRooms()
    sink = SocketSink(emitter)
    gone = WorkerRemoved(uuid4(), jobs=("room:modifiers:Job",), providers=())
    await sink([gone, TaskStatusChanged(a_task_record())])
    assert [name for name, _, _ in emitter.sent] == ["task_status_event"]
