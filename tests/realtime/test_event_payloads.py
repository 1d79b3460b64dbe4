"""What Socket.IO sends for each event (docs/protocol.md, "Socket.IO"): the documented keys,
ids and dates as strings (dates as Python writes them, ``+00:00``), statuses as values."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from uuid import UUID

import pytest

from taskhub.realtime.event_payloads import event_payload, task_payload
from taskhub.rules.events import (
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
from taskhub.rules.states import TaskStatus
from tests.support.records import a_task_record

TASK = UUID("01a21fbf-7902-7071-9a92-8a0beb611122")
WORKER = UUID("01a21fbf-78de-7413-861e-cab0e9051dae")
USER = UUID("01a21fbf-789e-727a-84e3-d199d934b443")
ORIGINAL = UUID("01a21fbf-7902-7071-9a92-8a0beb611100")


def test_a_task_status_event_is_written_as_the_protocol_has_it() -> None:
    record = a_task_record(
        id=TASK,
        worker_id=WORKER,
        submitted_by=USER,
        status=TaskStatus.FAILED,
        completed_at=datetime(2026, 11, 22, 10, 0, 3, 5, tzinfo=UTC),
        run_at=datetime(2026, 11, 22, 11, 0, tzinfo=UTC),
        error="boom",
        result={"big": 2**70},
        queue_position=None,
        max_attempts=3,
        priority=-5,
        version=4,
        rerun_of=ORIGINAL,
    )
    assert event_payload(TaskStatusChanged(record, TaskStatus.RUNNING)) == {
        "id": str(TASK),
        "name": "room:modifiers:Job",
        "room_id": "room",
        "status": "failed",
        "created_at": "2026-11-22T10:00:01.123456+00:00",
        "started_at": "2026-11-22T10:00:02+00:00",
        "completed_at": "2026-11-22T10:00:03.000005+00:00",
        "worker_id": str(WORKER),
        "error": "boom",
        "queue_position": None,
        "attempt": 1,
        "max_attempts": 3,
        "priority": -5,
        "run_at": "2026-11-22T11:00:00+00:00",
        "result": {"big": 2**70},
        "progress": 0.25,
        "progress_message": "a quarter",
        "submitted_by": str(USER),
        "version": 4,
        "rerun_of": str(ORIGINAL),
    }


def test_a_task_s_unset_fields_are_null_and_the_payload_is_plain_json() -> None:
    record = a_task_record(
        status=TaskStatus.PENDING,
        started_at=None,
        worker_id=None,
        submitted_by=None,
        claim_token=None,
        progress=None,
        progress_message=None,
        queue_position=2,
    )
    payload = task_payload(record)
    assert json.loads(json.dumps(payload)) == payload  # nothing but JSON's own types
    unset = ("started_at", "completed_at", "worker_id", "submitted_by", "run_at", "rerun_of")
    assert all(payload[key] is None for key in unset)
    assert payload["queue_position"] == 2 and "payload" not in payload


def test_the_other_events_carry_their_documented_keys() -> None:
    at = datetime(2026, 11, 22, 10, 0, tzinfo=UTC)
    line = {"id": 7, "attempt": 1, "at": at, "level": "info", "logger": None, "message": "hi"}
    expected = [
        (TaskAvailable("r:c:J", "r", "t1"), {"job_name": "r:c:J", "room_id": "r", "task_id": "t1"}),
        (
            TaskCancelled("t1", "r:c:J", "w1"),
            {"task_id": "t1", "job_name": "r:c:J", "worker_id": "w1"},
        ),
        (
            TaskLogged("t1", "r", (line,)),
            {
                "task_id": "t1",
                "room_id": "r",
                "lines": [line | {"at": "2026-11-22T10:00:00+00:00"}],
            },
        ),
        (
            ProviderRequest("q1", "r:c:P", '{"a":1}', "p1"),
            {"request_id": "q1", "provider_name": "r:c:P", "params": '{"a":1}'},
        ),
        (ProviderResultReady("r:c:P", "h1", "r"), {"provider_name": "r:c:P", "request_hash": "h1"}),
        (JobsInvalidate("r"), {}),
        (ProvidersInvalidate("r"), {}),
    ]
    for event, payload in expected:
        assert event_payload(event) == payload, event.name
    assert line["at"] is at  # the event's own lines are left as they were


def test_an_event_for_the_process_s_own_listeners_has_no_socket_payload() -> None:
    gone = WorkerRemoved(WORKER, jobs=("room:modifiers:Job",), providers=())
    with pytest.raises(ValueError, match=r"worker_removed is not sent on Socket\.IO"):
        event_payload(gone)
