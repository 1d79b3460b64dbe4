"""Wire models of the REST API (docs/protocol.md, "Objects"). The OpenAPI document is built
from these same models."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, ClassVar, Generic, TypeVar
from uuid import UUID

from pydantic import (
    AwareDatetime,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError
from starlette.responses import Response, StreamingResponse

from taskhub.clock import utcnow
from taskhub.rules.fair_share import ClaimOrder
from taskhub.rules.naming import JOB_NAME_PATTERN, MAX_JOB_NAME_LENGTH
from taskhub.rules.records import (
    JobRecord,
    JobSummary,
    Page,
    Principal,
    RoomWorker,
    TaskRecord,
    WorkerRecord,
)
from taskhub.rules.retries import MAX_ATTEMPTS_LIMIT
from taskhub.rules.running_limits import MAX_RUNNING_LIMIT
from taskhub.rules.states import TaskStatus
from taskhub.services.submit import SubmitOptions
from taskhub.services.task_listing import TaskListing
from taskhub.task_wire import TaskOut as TaskOut
from taskhub.task_wire import task_body as task_body
from taskhub.transport.http.api import JSON_MEDIA_TYPE, dump_body, json_response

T = TypeVar("T")


def _a_json_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise PydanticCustomError("dict_type", "Input should be a valid dictionary")
    return value


# A JSON object of a request body, taken as parsed: its keys are strings already, and
# pydantic's own ``dict[str, Any]`` would copy it key by key (7-9 ms for 60,000 keys here,
# on the event loop; this 0.25 ms). Documented and refused as ``dict[str, Any]`` is.
JsonObject = Annotated[
    dict[str, Any],
    PlainValidator(_a_json_object),
    WithJsonSchema({"type": "object", "additionalProperties": True}),
]
Attempts = Field(default=None, ge=1, le=MAX_ATTEMPTS_LIMIT)
# A running limit as registered: 1..MAX_RUNNING_LIMIT, or 0 to remove it.
RunningLimit = Field(default=None, ge=0, le=MAX_RUNNING_LIMIT)
MAX_DELAY_SECONDS = 366 * 24 * 3600
MAX_PRIORITY = 1_000_000
MAX_ERROR_CHARS = 65_536


class UserOut(BaseModel):
    """The caller, as its token identifies it."""

    id: UUID
    name: str
    is_superuser: bool

    @classmethod
    def of(cls, principal: Principal) -> UserOut:
        return cls(id=principal.id, name=principal.name, is_superuser=principal.is_superuser)


class WorkerOut(BaseModel):
    id: UUID
    last_heartbeat: datetime

    @classmethod
    def of(cls, record: WorkerRecord) -> WorkerOut:
        return cls(id=record.id, last_heartbeat=record.last_heartbeat)


class WorkerCreatedOut(WorkerOut):
    """Taskhub extension: the hub's heartbeat timeout (beat at most every third of it), and
    the worker's ``slots`` as last reported (null: never)."""

    worker_timeout_seconds: float
    slots: int | None = None

    @classmethod
    def of_timeout(cls, record: WorkerRecord, timeout: float) -> WorkerCreatedOut:
        return cls(
            id=record.id,
            last_heartbeat=record.last_heartbeat,
            worker_timeout_seconds=timeout,
            slots=record.slots,
        )


class HeartbeatOut(WorkerCreatedOut):
    """Taskhub extension: ids of this worker's tasks cancelled recently (stop those runs)."""

    cancelled_tasks: list[UUID]

    @classmethod
    def of_timeout(cls, record: WorkerRecord, timeout: float) -> HeartbeatOut:
        return cls(
            id=record.id,
            last_heartbeat=record.last_heartbeat,
            worker_timeout_seconds=timeout,
            slots=record.slots,
            cancelled_tasks=record.cancelled_tasks,
        )


MAX_WORKER_SLOTS = 1024


class HeartbeatIn(BaseModel):
    """Optional heartbeat body (Taskhub extension): the tasks this worker is running; only
    their leases are extended. Without it, all of the worker's active tasks are."""

    tasks: list[UUID] | None = Field(default=None, max_length=1000)
    # Taskhub extension: how many tasks the worker runs at once (kept; absent: unchanged).
    slots: int | None = Field(default=None, ge=1, le=MAX_WORKER_SLOTS)


class WorkerCreateIn(BaseModel):
    """Optional body of ``POST /workers`` (Taskhub extension; no body is fine)."""

    slots: int | None = Field(default=None, ge=1, le=MAX_WORKER_SLOTS)


class WorkerSummaryOut(WorkerOut):
    job_count: int
    # Taskhub extension: the user who owns it (who may update, and cancel, the tasks it
    # claimed): with ``GET /users/me`` a client tells which workers are its user's.
    owned_by: UUID
    slots: int | None = None

    @classmethod
    def of(cls, record: WorkerRecord) -> WorkerSummaryOut:
        return cls(
            id=record.id,
            last_heartbeat=record.last_heartbeat,
            job_count=record.job_count,
            owned_by=record.user_id,
            slots=record.slots,
        )


class RoomWorkerOut(WorkerSummaryOut):
    """A worker as a room's listing shows it (Taskhub extension of ``WorkerSummaryOut``):
    its owner, the live jobs it serves that the room sees (full names), and its
    claimed/running tasks (any room; ``running`` lists at most 100, ``used`` counts all)."""

    user_id: UUID
    owner: str
    jobs: list[str]
    created_at: datetime
    running: list[UUID]
    used: int

    @classmethod
    def of_room(cls, record: RoomWorker) -> RoomWorkerOut:
        return cls(
            id=record.id,
            last_heartbeat=record.last_heartbeat,
            job_count=record.job_count,
            owned_by=record.user_id,
            slots=record.slots,
            user_id=record.user_id,
            owner=record.owner,
            jobs=record.jobs,
            created_at=record.created_at,
            running=record.running,
            used=record.used,
        )


class JobRegisterIn(BaseModel):
    # zndraw-joblib's SDK sends the field name ("schema_"), other clients the alias.
    model_config = ConfigDict(populate_by_name=True)

    category: str  # any length: one outside the allow-list is a 400 invalid-category
    # 1..128 characters without ":" (``naming.validate_job_name``: its 422 says so).
    name: str = Field(
        max_length=MAX_JOB_NAME_LENGTH,
        json_schema_extra={"minLength": 1, "pattern": JOB_NAME_PATTERN},
    )
    schema_: JsonObject = Field(default_factory=dict, alias="schema")
    worker_id: UUID | None = None
    # Taskhub: attempts a task of this job gets unless its submit says otherwise.
    max_attempts: int | None = Attempts
    # Taskhub: the order its tasks are handed out in (absent: as the job has it, a new
    # job FIFO).
    claim_order: ClaimOrder | None = None
    # Taskhub: at most this many of its tasks claimed or running at once per submitter /
    # per room (absent: as the job has it; 0: no limit).
    max_running_per_submitter: int | None = RunningLimit
    max_running_per_room: int | None = RunningLimit


class JobOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    id: UUID
    room_id: str
    category: str
    name: str
    full_name: str
    schema_: dict[str, Any] = Field(alias="schema")
    workers: list[UUID]
    worker_id: UUID | None = None
    max_attempts: int = 1
    claim_order: ClaimOrder = ClaimOrder.FIFO
    max_running_per_submitter: int | None = None
    max_running_per_room: int | None = None

    @classmethod
    def of(cls, record: JobRecord, worker_id: UUID | None = None) -> JobOut:
        return cls(
            id=record.id,
            room_id=record.room_id,
            category=record.category,
            name=record.name,
            full_name=record.full_name,
            schema_=record.schema,
            workers=record.workers,
            worker_id=worker_id,
            max_attempts=record.max_attempts,
            claim_order=ClaimOrder(record.claim_order),
            max_running_per_submitter=record.max_running_per_submitter,
            max_running_per_room=record.max_running_per_room,
        )


class JobSummaryOut(BaseModel):
    full_name: str
    category: str
    name: str
    workers: list[UUID]

    @classmethod
    def of(cls, record: JobSummary) -> JobSummaryOut:
        return cls(
            full_name=record.full_name,
            category=record.category,
            name=record.name,
            workers=record.workers,
        )


class TaskSubmitIn(BaseModel):
    """The payload, and Taskhub's optional queue fields: ``priority`` (higher first),
    ``run_at`` or ``delay_seconds`` (not claimable before), ``max_attempts`` (else the
    job's)."""

    payload: JsonObject = Field(default_factory=dict)
    priority: int = Field(default=0, ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    run_at: AwareDatetime | None = None
    delay_seconds: float | None = Field(default=None, ge=0, le=MAX_DELAY_SECONDS)
    max_attempts: int | None = Attempts

    @field_validator("run_at")
    @classmethod
    def _within_a_delay(cls, run_at: datetime | None) -> datetime | None:
        """As far ahead as ``delay_seconds`` may be (and within the calendar once in UTC)."""
        if run_at is None:
            return None
        latest = utcnow() + timedelta(seconds=MAX_DELAY_SECONDS)
        try:
            if run_at.astimezone(UTC) > latest:
                raise ValueError(f"run_at may be at most {MAX_DELAY_SECONDS} seconds ahead")
        except OverflowError:
            raise ValueError("run_at is out of range") from None
        return run_at

    @model_validator(mode="after")
    def _one_schedule(self) -> TaskSubmitIn:
        if self.run_at is not None and self.delay_seconds is not None:
            raise ValueError("send run_at or delay_seconds, not both")
        return self

    def options(self, now: datetime) -> SubmitOptions:
        run_at = self.run_at
        if self.delay_seconds is not None:
            run_at = now + timedelta(seconds=self.delay_seconds)
        return SubmitOptions(
            priority=self.priority,
            run_at=run_at,
            max_attempts=self.max_attempts,
            delay_seconds=self.delay_seconds,
        )


class ClaimedTaskOut(TaskOut):
    claim_token: UUID | None


def claimed_task_body(record: TaskRecord) -> dict[str, Any]:
    """A claimed task as ``ClaimedTaskOut`` writes it (see ``task_body``)."""
    return task_body(record) | {"claim_token": record.claim_token}


class TaskClaimIn(BaseModel):
    worker_id: UUID
    max_tasks: int | None = Field(default=None, ge=1, le=100)
    # Optional extension: also start the claimed tasks (they come back running).
    start: bool = False


class TaskClaimOut(BaseModel):
    task: ClaimedTaskOut | None
    tasks: list[ClaimedTaskOut] | None = None
    started: bool | None = None  # echoed (true) when the claim asked to ``start``


class ClaimNextIn(BaseModel):
    """A terminal PATCH's optional request to claim the worker's next task(s) right after
    its write (docs/protocol.md, "Worker shortcuts")."""

    worker_id: UUID
    max_tasks: int = Field(default=1, ge=1, le=100)
    start: bool = False


class TaskUpdateOut(TaskOut):
    """A PATCH's answer; ``next`` (and, if the claim was refused, ``next_problem``) only
    when the PATCH asked to ``claim_next``."""

    next: list[ClaimedTaskOut] | None = None
    next_started: bool | None = None
    next_problem: dict[str, Any] | None = None


class TaskUpdateIn(BaseModel):
    """A transition (``status``), or — without ``status``, while running — a progress
    report. ``result`` goes with ``completed``.

    A worker's failure report is never refused for its text: zndraw-joblib's worker does
    not send a refused one again, so its task would stay running while the worker lives.
    NUL characters in ``error`` become U+FFFD (``NUL_REPLACED``), a text longer than
    ``MAX_ERROR_CHARS`` is cut (saying so), and an empty one is no error (as the reference
    keeps it)."""

    NUL_REPLACED: ClassVar[tuple[str, ...]] = ("error",)

    status: TaskStatus | None = None
    error: str | None = None
    claim_token: UUID | None = None
    result: Any = None
    progress: float | None = Field(default=None, ge=0, le=1)
    progress_message: str | None = Field(default=None, max_length=1_000)
    # With "failed": try again later while attempts remain (the task goes back to pending).
    retry: bool = False
    # Optional extension, with a terminal status: then claim the worker's next task(s).
    claim_next: ClaimNextIn | None = None

    @field_validator("error")
    @classmethod
    def _storable_error(cls, error: str | None) -> str | None:
        if not error:
            return None
        if len(error) <= MAX_ERROR_CHARS:
            return error
        kept = MAX_ERROR_CHARS - 64  # room for the note
        return f"{error[:kept]}\n… ({len(error) - kept} more characters cut)"

    @model_validator(mode="after")
    def _consistent(self) -> TaskUpdateIn:
        if self.retry and self.status != TaskStatus.FAILED:
            raise ValueError("retry goes with status 'failed'")
        if self.status is None and self.progress is None and self.progress_message is None:
            raise ValueError("send a status, or progress / progress_message while running")
        if self.result is not None and self.status != TaskStatus.COMPLETED:
            raise ValueError("a result goes with status 'completed'")
        reports_progress = self.progress is not None or self.progress_message is not None
        if reports_progress and self.status == TaskStatus.CANCELLED:
            # (a cancel may come from the submitter: progress is the worker's to report)
            raise ValueError("progress is reported while running, not with a cancel")
        if self.claim_next is not None and self.status not in _ENDS_AN_ATTEMPT:
            raise ValueError("claim_next goes with status 'completed', 'failed' or 'cancelled'")
        return self


_ENDS_AN_ATTEMPT = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})


MAX_OFFSET = 1_000_000_000  # far past any real list; keeps offsets inside 64-bit SQL ints


class PageQuery(BaseModel):
    limit: int = Field(default=50, ge=0, le=500)
    offset: int = Field(default=0, ge=0, le=MAX_OFFSET)


class TaskPageQuery(PageQuery):
    status: TaskStatus | None = None


class PageOut(BaseModel, Generic[T]):
    items: list[T]
    total: int
    limit: int
    offset: int


class ProblemOut(BaseModel):
    type: str
    title: str
    status: int
    detail: str
    errors: list[dict[str, Any]] | None = None


def task_page_body(page: Page[TaskRecord]) -> dict[str, Any]:
    """A page of tasks as ``PageOut[TaskOut]`` writes it (see ``task_body``)."""
    items = [task_body(record) for record in page.items]
    return {"items": items, "total": page.total, "limit": page.limit, "offset": page.offset}


def task_listing_response(listing: TaskListing, *, head: bool = False) -> Response:
    """A page of tasks: written at once when its documents came with it, otherwise written
    as its groups of big documents are read (``TaskListing.groups``), with no
    ``Content-Length``. Should reading a group fail, the answer stops short of its end,
    which a client sees as an incomplete body, never as a shorter page. The answer to a
    ``HEAD`` has the same headers and reads no group (the server would drop the body)."""
    if listing.complete:
        return json_response(task_page_body(listing.page))
    parts = _no_parts() if head else _task_page_parts(listing)
    return StreamingResponse(parts, media_type=JSON_MEDIA_TYPE)


async def _no_parts() -> AsyncIterator[bytes]:
    return
    yield  # an async generator that yields nothing


async def _task_page_parts(listing: TaskListing) -> AsyncIterator[bytes]:
    """``task_page_body`` written a task at a time, as its group is read (no copy of a
    group's tasks written together: each task is sent on its own)."""
    page = listing.page
    yield b'{"items":['
    first = True
    async for group in listing.groups():
        for record in group:
            if not first:
                yield b","
            first = False
            yield dump_body(task_body(record))
    rest = {"total": page.total, "limit": page.limit, "offset": page.offset}
    yield b"]," + dump_body(rest)[1:]


def page_of(model: Any, page: Page[Any]) -> PageOut[Any]:
    """Serialise a service ``Page`` of records with ``model.of``."""
    return PageOut[model](
        items=[model.of(item) for item in page.items],
        total=page.total,
        limit=page.limit,
        offset=page.offset,
    )
