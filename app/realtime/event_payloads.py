"""The JSON payload of each event as Socket.IO sends it (docs/protocol.md, "Socket.IO"):
ids and dates as strings, statuses as their values. A task's fields are those of
``task_wire.EVENT_FIELDS``, each encoded as its ``TaskOut`` type says."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from enum import Enum
from types import NoneType, UnionType
from typing import Any, Union, get_args, get_origin
from uuid import UUID

from taskhub.rules.events import (
    Event,
    JobsInvalidate,
    ProviderRequest,
    ProviderResultReady,
    ProvidersInvalidate,
    TaskAvailable,
    TaskCancelled,
    TaskLogged,
    TaskStatusChanged,
    WorkerRemoved,
)
from taskhub.rules.records import TaskRecord
from taskhub.task_wire import EVENT_FIELDS, TaskOut

Encode = Callable[[Any], Any]


def _encoder(annotation: Any) -> Encode | None:
    """How a value of a ``TaskOut`` field's type is written into an event (None: as it
    is, JSON already). A type it does not know is refused when this module loads, so a new
    field cannot reach an event unencoded."""
    if get_origin(annotation) in (Union, UnionType):
        kinds = [kind for kind in get_args(annotation) if kind is not NoneType]
        if len(kinds) != 1:
            raise TypeError(f"no event encoding for {annotation!r}")
        annotation = kinds[0]
    if annotation is datetime:
        return datetime.isoformat
    if annotation is UUID:
        return str
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return _enum_value
    if annotation in (str, int, float, bool, Any) or get_origin(annotation) in (dict, list):
        return None
    raise TypeError(f"no event encoding for {annotation!r}")


def _enum_value(member: Enum) -> Any:
    return member.value


_TASK_FIELDS: tuple[tuple[str, str, Encode | None], ...] = tuple(
    (key, name, _encoder(TaskOut.model_fields[name].annotation)) for key, name in EVENT_FIELDS
)


def task_payload(task: TaskRecord) -> dict[str, Any]:
    """A ``task_status_event``'s payload: the task's ``EVENT_FIELDS``, encoded."""
    payload: dict[str, Any] = {}
    for key, name, encode in _TASK_FIELDS:
        value = getattr(task, name)
        payload[key] = value if encode is None or value is None else encode(value)
    return payload


def event_payload(event: Event) -> dict[str, Any]:
    """What Socket.IO sends as ``event``'s data."""
    match event:
        case TaskStatusChanged():
            return task_payload(event.task)
        case TaskAvailable():
            return {"job_name": event.job_name, "room_id": event.room_id, "task_id": event.task_id}
        case TaskCancelled():
            return {
                "task_id": event.task_id,
                "job_name": event.job_name,
                "worker_id": event.worker_id,
            }
        case TaskLogged():
            lines = [{**line, "at": line["at"].isoformat()} for line in event.lines]
            return {"task_id": event.task_id, "room_id": event.room_id, "lines": lines}
        case ProviderRequest():
            return {
                "request_id": event.request_id,
                "provider_name": event.provider_name,
                "params": event.params,
            }
        case ProviderResultReady():
            return {"provider_name": event.provider_name, "request_hash": event.request_hash}
        case JobsInvalidate() | ProvidersInvalidate():
            return {}
        case WorkerRemoved():
            raise ValueError(f"{event.name} is not sent on Socket.IO")
