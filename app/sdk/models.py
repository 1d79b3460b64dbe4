"""Wire objects the SDK reads (docs/protocol.md, "Objects"); unknown keys are ignored."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

TERMINAL_STATUSES = frozenset({"completed", "failed", "cancelled"})
# The hub's limits on what a worker reports (README, "Protocol"): the SDK cuts longer text.
MAX_ERROR_CHARS = 65_536
MAX_PROGRESS_MESSAGE_CHARS = 1_000


class Task(BaseModel):
    """A task as the hub reports it."""

    model_config = ConfigDict(extra="ignore")

    id: str
    job_name: str
    room_id: str
    status: str
    payload: dict[str, Any] = {}
    created_at: datetime | None = None
    started_at: datetime | None = None
    completed_at: datetime | None = None
    worker_id: str | None = None
    error: str | None = None
    queue_position: int | None = None
    result: Any = None
    progress: float | None = None
    progress_message: str | None = None
    attempt: int = 0
    max_attempts: int = 1
    priority: int = 0
    run_at: datetime | None = None
    submitted_by: str | None = None  # the submitter's user id (``GET /users/me`` gives yours)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class ClaimedTask(Task):
    """A task handed to this worker; every update must carry its ``claim_token``."""

    claim_token: str | None = None


class Heartbeat(BaseModel):
    model_config = ConfigDict(extra="ignore")

    id: str
    cancelled_tasks: list[str] = []
