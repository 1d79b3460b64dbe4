"""One list of a task's fields (``TaskOut``) makes the REST answer, the dashboard's summary
and the ``task_status_event`` payload: the three agree on every field they share, and a
field of the list is in each of them (the event names the job ``name``; the summary has no
documents, the event no payload)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, get_args
from uuid import uuid4

import orjson
import pytest
from pydantic import BaseModel

from taskhub.realtime.event_payloads import task_payload
from taskhub.rules.records import TaskRecord
from taskhub.rules.states import TaskStatus
from taskhub.task_wire import (
    EVENT_FIELDS,
    SUMMARY_FIELDS,
    TASK_FIELDS,
    TaskOut,
    TaskSummaryOut,
    summary_body,
    task_body,
)
from taskhub.transport.http.api import dump_body
from tests.support.records import a_task_record

RECORDS = {
    "running": a_task_record(),
    "pending, a re-run": a_task_record(
        status=TaskStatus.PENDING,
        started_at=None,
        worker_id=None,
        claim_token=None,
        queue_position=3,
        rerun_of=uuid4(),
    ),
    "completed": a_task_record(
        status=TaskStatus.COMPLETED,
        completed_at=datetime(2026, 11, 22, 10, 0, 3, 5, tzinfo=UTC),
        result={"ok": [1, 2]},
        run_at=datetime(2026, 11, 22, 9, 0, tzinfo=UTC),
        submitted_by=None,
        version=3,
    ),
}


def as_json(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as a client reads it (ids and dates as strings)."""
    read: dict[str, Any] = orjson.loads(dump_body(body))
    return read


def read_as_date(field: str) -> bool:
    """Whether ``field`` holds a date (answers write ``Z``, events ``+00:00``)."""
    annotation = TaskOut.model_fields[field].annotation
    return annotation is datetime or datetime in get_args(annotation)


def same_value(field: str, event: Any, answer: Any) -> bool:
    if read_as_date(field) and event is not None and answer is not None:
        return datetime.fromisoformat(event) == datetime.fromisoformat(answer)
    return bool(event == answer)


@pytest.mark.parametrize("record", RECORDS.values(), ids=RECORDS.keys())
def test_the_answer_the_summary_and_the_event_agree_on_their_common_fields(
    record: TaskRecord,
) -> None:
    answer = as_json(task_body(record))
    summary = as_json(summary_body(record, "bob"))
    event = task_payload(record)
    for field in TASK_FIELDS:
        if field in SUMMARY_FIELDS:
            assert summary[field] == answer[field], field
    for key, field in EVENT_FIELDS:
        assert same_value(field, event[key], answer[field]), field


def test_each_is_made_of_the_one_list_in_its_order() -> None:
    record = RECORDS["running"]
    assert list(task_body(record)) == list(TaskOut.model_fields) == list(TASK_FIELDS)
    assert list(summary_body(record, None)) == [*SUMMARY_FIELDS, "submitter"]
    assert [name for name in TASK_FIELDS if name not in ("payload", "result")] == list(
        SUMMARY_FIELDS
    )
    assert list(task_payload(record)) == [key for key, _ in EVENT_FIELDS]
    assert [field for _, field in EVENT_FIELDS] == [f for f in TASK_FIELDS if f != "payload"]
    assert dict(EVENT_FIELDS)["name"] == "job_name"  # zndraw-joblib reads it as ``name``
    assert list(TaskSummaryOut.model_fields) == [*SUMMARY_FIELDS, "submitter"]
    assert set(TASK_FIELDS) <= set(TaskRecord.__dataclass_fields__)  # each read from a record


@pytest.mark.parametrize("record", RECORDS.values(), ids=RECORDS.keys())
def test_the_bodies_are_written_as_their_models_write_them(record: TaskRecord) -> None:
    models: list[tuple[type[BaseModel], dict[str, Any]]] = [
        (TaskOut, task_body(record)),
        (TaskSummaryOut, summary_body(record, "bob")),
    ]
    for model, body in models:
        assert dump_body(body) == model.model_validate(body).model_dump_json().encode()
