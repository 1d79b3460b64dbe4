"""Events of one unit of work are de-duplicated per (event, room, subject)."""

from datetime import UTC, datetime
from uuid import uuid4

from taskhub.rules.events import EventBatch, JobsInvalidate, TaskAvailable, TaskStatusChanged
from taskhub.rules.records import TaskRecord
from taskhub.rules.states import TaskStatus


def _task(status: TaskStatus, room: str = "r1") -> TaskRecord:
    return TaskRecord(
        id=uuid4(), job_id=uuid4(), job_name="r1:modifiers:X", room_id=room, status=status,
        payload={}, created_at=datetime.now(UTC), started_at=None, completed_at=None,
        worker_id=None, error=None, submitted_by=None, claim_token=None, attempt=0,
    )  # fmt: skip


def test_same_room_invalidation_is_sent_once():
    batch = EventBatch()
    batch.add(JobsInvalidate("r1"))
    batch.add(JobsInvalidate("r1"))
    batch.add(JobsInvalidate("r2"))
    assert [(e.name, e.room) for e in batch] == [
        ("jobs_invalidate", "room:r1"),
        ("jobs_invalidate", "room:r2"),
    ]


def test_latest_status_of_a_task_wins():
    task = _task(TaskStatus.PENDING)
    batch = EventBatch()
    batch.add(TaskStatusChanged(task))
    later = _task(TaskStatus.CLAIMED)
    later.id = task.id
    batch.add(TaskStatusChanged(later))
    (only,) = list(batch)
    assert isinstance(only, TaskStatusChanged) and only.task.status == TaskStatus.CLAIMED


def test_a_task_available_goes_to_its_jobs_room():
    available = TaskAvailable(job_name="r1:modifiers:X", room_id="r1", task_id=str(uuid4()))
    assert available.room == "jobs:r1:modifiers:X"
