"""Plain snapshots of stored rows that services hand to transport and to events."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar
from uuid import UUID

from taskhub.rules.states import TaskStatus


@dataclass(frozen=True, slots=True)
class Principal:
    """The authenticated caller. ``groups``: the groups an identity provider or a host
    application names it a member of (none for Taskhub's own tokens)."""

    id: UUID
    name: str
    is_superuser: bool
    groups: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class UserSummary:
    """A user as operators list them (``taskhub users list``)."""

    name: str
    is_superuser: bool
    tokens: int
    created_at: datetime


@dataclass(slots=True)
class TaskRecord:
    id: UUID
    job_id: UUID
    job_name: str
    room_id: str
    status: TaskStatus
    # A dict, or the text it is stored as where the task was read for an answer (a claim, a
    # PATCH, GET, a page: ``StoredJSONText``). ``result`` too on GET and pages; a PATCH's
    # record carries the result it wrote, as sent.
    payload: dict[str, Any] | Any
    created_at: datetime
    started_at: datetime | None
    completed_at: datetime | None
    worker_id: UUID | None
    error: str | None
    submitted_by: UUID | None
    claim_token: UUID | None
    attempt: int
    queue_position: int | None = None
    result: Any = None
    progress: float | None = None
    progress_message: str | None = None
    priority: int = 0
    max_attempts: int = 1
    run_at: datetime | None = None
    version: int = 1
    # The task this one re-runs (``POST /tasks/{id}/rerun``), if it is a re-run.
    rerun_of: UUID | None = None
    # Its place in its job's queue (``rules.fair_share``); None: its ``created_at``.
    turn_at: datetime | None = None
    # A fair job's task: the share it counts in (None in a FIFO job), and whether that
    # share had tasks queued already when it was submitted.
    share_key: str | None = None
    share_backlogged: bool = False

    @property
    def turn(self) -> datetime:
        """The turn claims and queue positions order it by, after its priority."""
        return self.created_at if self.turn_at is None else self.turn_at


@dataclass(slots=True)
class WorkerRecord:
    id: UUID
    user_id: UUID
    last_heartbeat: datetime
    job_count: int = 0
    cancelled_tasks: list[UUID] = field(default_factory=list)
    # How many tasks it runs at once, as its SDK reported (None: never reported).
    slots: int | None = None


@dataclass(slots=True)
class RoomWorker:
    """A worker as a room's dashboard lists it."""

    id: UUID
    user_id: UUID
    owner: str
    last_heartbeat: datetime
    created_at: datetime
    slots: int | None
    job_count: int
    jobs: list[str]
    """Full names of the live jobs it serves that the room can see."""
    running: list[UUID]
    """Its claimed/running tasks (any room), at most ``RUNNING_LISTED``."""
    used: int
    """How many claimed/running tasks it holds (all of them)."""


@dataclass(slots=True)
class JobSummary:
    """A job as a listing shows it: no schema (up to 256 KiB, read only for one job)."""

    id: UUID
    room_id: str
    category: str
    name: str
    workers: list[UUID]

    @property
    def full_name(self) -> str:
        return f"{self.room_id}:{self.category}:{self.name}"


@dataclass(slots=True)
class JobRecord(JobSummary):
    schema: dict[str, Any]
    deleted: bool
    max_attempts: int = 1
    # ``rules.fair_share.ClaimOrder``'s value.
    claim_order: str = "fifo"
    # ``rules.running_limits`` (None: no limit).
    max_running_per_submitter: int | None = None
    max_running_per_room: int | None = None


T = TypeVar("T")


def beyond(total: int, limit: int, offset: int) -> bool:
    """Whether a page of ``limit`` from ``offset`` holds nothing of ``total`` items (then its
    rows need not be read: an offset far past the end would still cost a scan)."""
    return limit == 0 or offset >= total


@dataclass(slots=True)
class Page(Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int
