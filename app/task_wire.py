"""A task as it is written on the wire. ``TaskOut`` is the one list of its fields: the REST
answer (``task_body``), the dashboard's summary (``TaskSummaryOut``, ``summary_body``) and
the ``task_status_event`` payload (``EVENT_FIELDS``, encoded by ``realtime.event_payloads``)
are all made from it. Each field is read from the ``TaskRecord`` attribute of its name, so
a new field is added here and to the record (and its table).

Shared by the HTTP transport and the real-time events: it imports only the rules."""

from __future__ import annotations

from datetime import datetime
from operator import attrgetter
from typing import Any
from uuid import UUID

from pydantic import BaseModel, create_model

from taskhub.rules.records import TaskRecord
from taskhub.rules.states import TaskStatus


class TaskOut(BaseModel):
    """A task (docs/protocol.md, "Objects"); its fields in the order they are written."""

    id: UUID
    job_name: str
    room_id: str
    status: TaskStatus
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    worker_id: UUID | None
    error: str | None
    payload: dict[str, Any]
    queue_position: int | None
    attempt: int
    max_attempts: int
    priority: int
    run_at: datetime | None
    result: Any
    progress: float | None
    progress_message: str | None
    # The user who submitted it (null only if that user's row was deleted): with
    # ``GET /users/me`` a client can tell which tasks the viewer may cancel.
    submitted_by: UUID | None
    # Counts the task's writes: of two states of one task, the higher version is the later.
    version: int
    # Taskhub extension: the task this one re-runs (``POST /tasks/{id}/rerun``).
    rerun_of: UUID | None = None


TASK_FIELDS: tuple[str, ...] = tuple(TaskOut.model_fields)
"""The answer's keys, in order: each is also the ``TaskRecord`` attribute it is read from."""

DOCUMENTS = frozenset({"payload", "result"})
"""The fields a summary leaves out (they are not read for one)."""

SUMMARY_FIELDS = tuple(name for name in TASK_FIELDS if name not in DOCUMENTS)

# zndraw-joblib reads a ``task_status_event``'s job full name as ``name``; the event
# carries no payload.
_EVENT_KEYS = {"job_name": "name"}
_NOT_IN_EVENTS = frozenset({"payload"})

EVENT_FIELDS: tuple[tuple[str, str], ...] = tuple(
    (_EVENT_KEYS.get(name, name), name) for name in TASK_FIELDS if name not in _NOT_IN_EVENTS
)
"""The ``task_status_event`` payload: (key, ``TaskRecord`` attribute), in order."""

_read_task = attrgetter(*TASK_FIELDS)
_read_summary = attrgetter(*SUMMARY_FIELDS)


def task_body(record: TaskRecord) -> dict[str, Any]:
    """A task as ``TaskOut`` writes it, as a dict for ``json_response``: the hot answers
    skip building a model (a record is typed already: nothing to validate), which cost
    about a tenth of a request's CPU. ``tests/test_task_wire.py`` keeps the two in step."""
    return dict(zip(TASK_FIELDS, _read_task(record), strict=True))


_summary_fields: dict[str, Any] = {
    name: (field.annotation, field)
    for name, field in TaskOut.model_fields.items()
    if name not in DOCUMENTS
}
TaskSummaryOut = create_model(
    "TaskSummaryOut",
    __doc__="A task of a ``view=summary`` page: ``TaskOut`` without ``payload`` and "
    "``result`` (they are not read), with its submitter's user name (null if that user "
    "is gone).",
    **_summary_fields,
    submitter=(str | None, ...),
)


def summary_body(record: TaskRecord, submitter: str | None) -> dict[str, Any]:
    """A task as ``TaskSummaryOut`` writes it (``task_body`` less the documents)."""
    body = dict(zip(SUMMARY_FIELDS, _read_summary(record), strict=True))
    body["submitter"] = submitter
    return body
