"""Domain records built in memory, for tests of what is made of them (answers, events)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

from taskhub.rules.records import TaskRecord
from taskhub.rules.states import TaskStatus


def a_task_record(**changes: Any) -> TaskRecord:
    """A running task with every field set; ``changes`` override any of them."""
    fields: dict[str, Any] = {
        "id": uuid4(),
        "job_id": uuid4(),
        "job_name": "room:modifiers:Job",
        "room_id": "room",
        "status": TaskStatus.RUNNING,
        "payload": {"x": [1, 2.5, None, "é"]},
        "created_at": datetime(2026, 11, 22, 10, 0, 1, 123456, tzinfo=UTC),
        "started_at": datetime(2026, 11, 22, 10, 0, 2, tzinfo=UTC),
        "completed_at": None,
        "worker_id": uuid4(),
        "error": None,
        "submitted_by": uuid4(),
        "claim_token": uuid4(),
        "attempt": 1,
        "progress": 0.25,
        "progress_message": "a quarter",
    }
    return TaskRecord(**(fields | changes))
