"""Table models. Alembic owns the schema; ``tests/store/test_migrations.py`` proves
these models and the migrations never drift."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ColumnElement,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    and_,
    event,
    false,
    literal_column,
    text,
)
from sqlalchemy.orm import registry
from sqlmodel import Field, SQLModel

from taskhub.clock import new_id, utcnow
from taskhub.store import queue_counts, usage_counts
from taskhub.store.columns import JSONAsSent, UTCDateTime, stored_text

# Taskhub's own MetaData, not SQLModel's global one: other SQLModel applications (such as
# zndraw-joblib, with tables of the same names) can be imported in the same process.
metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_N_name)s",
        "uq": "uq_%(table_name)s_%(column_0_N_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
        "ck": "ck_%(table_name)s_%(constraint_name)s",
    }
)


PENDING_ONLY = "status = 'pending'"
# Pending with a ``run_at`` (delayed or retried): waiting for it, or queued since it came.
SCHEDULED_ONLY = f"{PENDING_ONLY} AND run_at IS NOT NULL"
# A pending task either waits for its ``run_at`` (``waiting``: set when it enters pending
# with a ``run_at`` ahead, cleared when the due-task announcer finds it due) or is queued:
# the claim queue holds only the queued ones, so a claim never walks tasks that wait.
QUEUED_ONLY = f"{PENDING_ONLY} AND NOT waiting"
WAITING_ONLY = f"{PENDING_ONLY} AND waiting"
# Claimed or running (the domain's ``ACTIVE_STATUSES``): the tasks whose lease the sweeper
# watches.
ACTIVE_VALUES = ("claimed", "running")
ACTIVE_ONLY = f"status IN ({', '.join(repr(value) for value in ACTIVE_VALUES)})"


def _partial(where: str) -> dict[str, Any]:
    """A partial index's predicate, the same on both engines."""
    return {"sqlite_where": text(where), "postgresql_where": text(where)}


class TaskhubModel(SQLModel, registry=registry(metadata=metadata)):
    """Base of every Taskhub table."""


class User(TaskhubModel, table=True):
    __tablename__ = "app_user"

    id: UUID = Field(default_factory=new_id, primary_key=True)
    name: str = Field(sa_type=String(128), unique=True)
    is_superuser: bool = Field(default=False)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class ApiToken(TaskhubModel, table=True):
    """A bearer token, stored as the SHA-256 of the secret (tokens are 256-bit random)."""

    __tablename__ = "api_token"

    id: UUID = Field(default_factory=new_id, primary_key=True)
    user_id: UUID = Field(
        sa_column=Column(ForeignKey("app_user.id", ondelete="CASCADE"), nullable=False, index=True)
    )
    token_hash: str = Field(sa_type=String(64), unique=True)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class RevokedToken(TaskhubModel, table=True):
    """The hash of a token that was revoked: kept so that ``TASKHUB_ADMIN_TOKEN`` is not
    granted again at the next start after ``taskhub tokens revoke`` ended it."""

    __tablename__ = "revoked_token"

    token_hash: str = Field(sa_type=String(64), primary_key=True)
    revoked_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class Worker(TaskhubModel, table=True):
    __tablename__ = "worker"

    id: UUID = Field(default_factory=new_id, primary_key=True)
    user_id: UUID = Field(
        sa_column=Column(ForeignKey("app_user.id", ondelete="CASCADE"), nullable=False, index=True)
    )
    last_heartbeat: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime, index=True)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    # How many tasks it runs at once, as its SDK reported (NULL: not reported).
    slots: int | None = Field(default=None)


class Job(TaskhubModel, table=True):
    """A runnable job. Never hard-deleted: ``deleted`` marks an orphan; history stays."""

    __tablename__ = "job"
    __table_args__ = (UniqueConstraint("room_id", "category", "name"),)

    id: UUID = Field(default_factory=new_id, primary_key=True)
    room_id: str = Field(sa_type=String(128))
    category: str = Field(sa_type=String(64))
    name: str = Field(sa_type=String(128))
    schema_: dict[str, Any] = Field(
        default_factory=dict, sa_column=Column("schema", JSONAsSent, nullable=False)
    )
    deleted: bool = Field(default=False)
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    # Attempts a task of this job gets unless its submit says otherwise (1 = no retries).
    max_attempts: int = Field(default=1, sa_column_kwargs={"server_default": text("1")})
    # ``rules.fair_share.ClaimOrder``: FIFO, or round-robin over submitters or rooms.
    claim_order: str = Field(
        default="fifo",
        sa_column=Column(String(32), nullable=False, server_default=text("'fifo'")),
    )
    # At most this many of its tasks claimed or running at once per submitter / per room
    # (``rules.running_limits``; NULL: no limit).
    max_running_per_submitter: int | None = Field(default=None)
    max_running_per_room: int | None = Field(default=None)
    # An ``@internal`` job whose run validates a payload (``ValidatePayload``): each of its
    # unfinished tasks counts against its submitter's bound of costly validations
    # (``user_usage.unfinished_costly_tasks``). Set at the hub's start.
    costly: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=false())
    )


class WorkerJobLink(TaskhubModel, table=True):
    __tablename__ = "worker_job_link"

    worker_id: UUID = Field(
        sa_column=Column(ForeignKey("worker.id", ondelete="CASCADE"), primary_key=True)
    )
    job_id: UUID = Field(
        sa_column=Column(ForeignKey("job.id", ondelete="CASCADE"), primary_key=True, index=True)
    )


class Provider(TaskhubModel, table=True):
    """A provider: answers reads of data on demand (docs/protocol.md, "Providers"). Goes
    with its worker (ON DELETE CASCADE); an ``@internal`` one is the hub's own, with no
    worker and no user."""

    __tablename__ = "provider"
    __table_args__ = (UniqueConstraint("room_id", "category", "name"),)

    id: UUID = Field(default_factory=new_id, primary_key=True)
    room_id: str = Field(sa_type=String(128))
    category: str = Field(sa_type=String(64))
    name: str = Field(sa_type=String(128))
    schema_: dict[str, Any] = Field(
        default_factory=dict, sa_column=Column("schema", JSONAsSent, nullable=False)
    )
    content_type: str = Field(sa_type=String(255))
    user_id: UUID | None = Field(
        default=None,
        sa_column=Column(ForeignKey("app_user.id", ondelete="CASCADE"), nullable=True),
    )
    worker_id: UUID | None = Field(
        default=None,
        sa_column=Column(ForeignKey("worker.id", ondelete="CASCADE"), nullable=True, index=True),
    )
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class RoomSetting(TaskhubModel, table=True):
    """A room's visibility (docs/protocol.md, "Private rooms"): ``private`` keeps the room
    to its members; no row, or ``open``, is every room's default."""

    __tablename__ = "room_setting"

    room_id: str = Field(sa_type=String(128), primary_key=True)
    visibility: str = Field(sa_type=String(16))
    updated_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class RoomMember(TaskhubModel, table=True):
    """A member of a room: a user (by id) or a group (a name from identity claims), with a
    role (``rules.authorisation.RoomRole``). Kept when a room is opened again."""

    __tablename__ = "room_member"

    room_id: str = Field(sa_type=String(128), primary_key=True)
    kind: str = Field(sa_type=String(8), primary_key=True)  # "user" or "group"
    subject: str = Field(sa_type=String(255), primary_key=True)  # a user id, or a group
    role: str = Field(sa_type=String(16))
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)


class Task(TaskhubModel, table=True):
    """One invocation of a job. ``worker_id`` has no foreign key on purpose: the task keeps
    the id of the worker that ran it after that worker is gone."""

    __tablename__ = "task"
    __table_args__ = (
        # Delayed and retried tasks by ``run_at`` (the due-task announcer).
        Index(
            "ix_task_due",
            "run_at",
            **_partial(SCHEDULED_ONLY),
        ),
        # Retention: terminal tasks by age.
        Index(
            "ix_task_completed_at",
            "completed_at",
            **_partial("completed_at IS NOT NULL"),
        ),
        Index("ix_task_room_created", "room_id", "created_at"),
        Index("ix_task_job_room_created", "job_id", "room_id", "created_at"),
        # A worker's tasks (pending ones have none: they stay out of the index).
        Index(
            "ix_task_assigned_worker",
            "worker_id",
            "status",
            **_partial("worker_id IS NOT NULL"),
        ),
        # Idempotent submits: one task per (submitter, job, Idempotency-Key); only the few
        # submits that carry a key are indexed.
        Index(
            "ix_task_idempotency_keyed",
            "submitted_by",
            "job_id",
            "idempotency_key",
            unique=True,
            **_partial("idempotency_key IS NOT NULL"),
        ),
        # Leases the sweeper watches; a finished task keeps its last lease, unindexed.
        Index("ix_task_active_lease", "lease_expires_at", **_partial(ACTIVE_ONLY)),
        # A room's finished tasks by time (the room's aggregates over a window).
        Index(
            "ix_task_room_completed",
            "room_id",
            "completed_at",
            **_partial("completed_at IS NOT NULL"),
        ),
    )

    id: UUID = Field(default_factory=new_id, primary_key=True)
    job_id: UUID = Field(sa_column=Column(ForeignKey("job.id"), nullable=False))
    room_id: str = Field(sa_type=String(128))
    status: str = Field(sa_type=String(16))
    payload: dict[str, Any] = Field(
        default_factory=dict, sa_column=Column(JSONAsSent, nullable=False)
    )
    created_at: datetime = Field(default_factory=utcnow, sa_type=UTCDateTime)
    started_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    completed_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    worker_id: UUID | None = Field(default=None)
    error: str | None = Field(default=None, sa_type=Text)
    submitted_by: UUID | None = Field(
        default=None,
        sa_column=Column(ForeignKey("app_user.id", ondelete="SET NULL"), nullable=True),
    )
    claim_token: UUID | None = Field(default=None)
    attempt: int = Field(default=0)
    result: Any = Field(default=None, sa_column=Column(JSONAsSent, nullable=True))
    progress: float | None = Field(default=None)
    progress_message: str | None = Field(default=None, sa_type=Text)
    # Claimed/running tasks only: extended by the worker's heartbeat and progress; the
    # sweeper fails a task whose lease ran out (a lost claim reply, a wedged worker).
    lease_expires_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    idempotency_key: str | None = Field(default=None, sa_type=String(255))
    # Queue semantics: higher priority is claimed first; a task is claimable from
    # ``run_at`` on (NULL: at once); ``attempt`` counts claims up to ``max_attempts``.
    priority: int = Field(default=0, sa_column_kwargs={"server_default": text("0")})
    max_attempts: int = Field(default=1, sa_column_kwargs={"server_default": text("1")})
    run_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    # 1 at submit, one more on every write (``next_version``): events carry it, so a client
    # can tell an event that arrives late from the state it already has.
    # (the column's default is the database's alone, so inserts written for an older schema
    # still run: the migrations test writes rows at every revision)
    version: int = Field(
        default=1, sa_column=Column(Integer, nullable=False, server_default=text("1"))
    )
    # The Idempotency-Key of the claim that took the task (if it sent one): repeated while
    # the task is still claimed, that claim is answered with the same tasks.
    claim_key: str | None = Field(default=None, sa_type=String(255))
    # Pending and not yet due when it entered pending, and not found due since (see
    # ``QUEUED_ONLY``); meaningless for other statuses. Server default for the same reason
    # as ``version``'s.
    waiting: bool = Field(
        default=False,
        sa_column=Column(Boolean, nullable=False, server_default=false()),
    )
    # With ``idempotency_key``: a digest of the submit as sent, which a repeat of the key
    # must match (NULL before migration 0012: any repeat matches). Last, as 0012 adds it.
    request_digest: str | None = Field(default=None, sa_type=String(64))
    # The task this one re-runs (no foreign key: the original may be purged first).
    rerun_of: UUID | None = Field(default=None)
    # Its place in its job's queue, which claims and queue positions order by after
    # ``priority`` (``rules/fair_share.py``): ``created_at`` in a FIFO job. Every writer
    # sets it (NULL only in a database migrated while an older replica was submitting).
    turn_at: datetime | None = Field(default=None, sa_type=UTCDateTime)
    # A fair job's task: the share it counts in (its submitter, or its room); NULL in FIFO.
    share_key: str | None = Field(default=None, sa_type=String(128))
    # A fair job's task whose share had tasks queued already when it was submitted (it
    # followed on from them): ``rules.fair_share.SubmitterClass``, for the wait metrics.
    share_backlogged: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=false())
    )
    # Its job limits how many tasks run at once (``rules.running_limits``): counted in
    # ``ix_task_limited_active``, checked by the claim.
    limited: bool = Field(
        default=False, sa_column=Column(Boolean, nullable=False, server_default=false())
    )


class TaskQueueBucket(TaskhubModel, table=True):
    """How many tasks of a job wait (pending) at one priority, submitted within one second,
    and how many of those are ``waiting`` for their ``run_at``. Written only by the
    database's triggers on ``task`` (``app/store/queue_counts.py``); a row goes when
    its pending count reaches zero."""

    __tablename__ = "task_queue_bucket"

    job_id: UUID = Field(primary_key=True)
    priority: int = Field(primary_key=True)
    bucket: int = Field(sa_type=BigInteger, primary_key=True)
    pending: int
    waiting: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default=text("0"))
    )


class TaskLog(TaskhubModel, table=True):
    """A log line a run of a task sent; deleted with its task. ``dropped``: how many lines
    of the task were dropped just before this one (over the hub's bounds)."""

    __tablename__ = "task_log"
    __table_args__ = (Index("ix_task_log_task_id_id", "task_id", "id"),)

    id: int | None = Field(
        default=None,
        sa_column=Column(
            BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
        ),
    )
    task_id: UUID = Field(
        sa_column=Column(ForeignKey("task.id", ondelete="CASCADE"), nullable=False)
    )
    attempt: int
    logged_at: datetime = Field(sa_type=UTCDateTime)
    level: str = Field(sa_type=String(16))
    logger: str | None = Field(default=None, sa_type=String(128))
    message: str = Field(sa_type=Text)
    dropped: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default=text("0"))
    )


class UserUsage(TaskhubModel, table=True):
    """What one user's tasks hold across the hub: their unfinished tasks, those of them of
    a costly job, and the bytes of their payloads, results and log lines. Written only by
    the database's triggers on ``task`` and ``task_log`` (``app/store/usage_counts.py``);
    the per-user limits of a submit read it (``app/store/user_usage.py``)."""

    __tablename__ = "user_usage"

    user_id: UUID = Field(
        sa_column=Column(ForeignKey("app_user.id", ondelete="CASCADE"), primary_key=True)
    )
    unfinished_tasks: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default=text("0"))
    )
    unfinished_costly_tasks: int = Field(
        default=0, sa_column=Column(Integer, nullable=False, server_default=text("0"))
    )
    stored_bytes: int = Field(
        default=0, sa_column=Column(BigInteger, nullable=False, server_default=text("0"))
    )


class ClusterLeaseRow(TaskhubModel, table=True):
    """A cluster-wide lease held as a row (``app/store/cluster_lease.py``): ``holder`` has
    it until ``expires_at``, by the database's clock. Used only behind a transaction-mode
    pooler, where a session advisory lock cannot be kept."""

    __tablename__ = "cluster_lease"

    name: str = Field(sa_type=String(128), primary_key=True)
    holder: str = Field(sa_type=String(64))
    expires_at: datetime = Field(sa_type=UTCDateTime)


# Each model's ``__table__`` (SQLModel's classes do not declare it to type checkers): the
# ``Table`` its class registered in ``metadata`` under its ``__tablename__``.
user_table = metadata.tables[User.__tablename__]
token_table = metadata.tables[ApiToken.__tablename__]
worker_table = metadata.tables[Worker.__tablename__]
job_table = metadata.tables[Job.__tablename__]
link_table = metadata.tables[WorkerJobLink.__tablename__]
task_table = metadata.tables[Task.__tablename__]
queue_bucket_table = metadata.tables[TaskQueueBucket.__tablename__]
task_log_table = metadata.tables[TaskLog.__tablename__]
cluster_lease_table = metadata.tables[ClusterLeaseRow.__tablename__]
user_usage_table = metadata.tables[UserUsage.__tablename__]
revoked_token_table = metadata.tables[RevokedToken.__tablename__]
provider_table = metadata.tables[Provider.__tablename__]
room_setting_table = metadata.tables[RoomSetting.__tablename__]
room_member_table = metadata.tables[RoomMember.__tablename__]


def answered_task_columns() -> list[Any]:
    """``task``'s columns for a statement whose rows go into answers: the payload as its
    stored text, not decoded (a MB of points takes about 15 ms to decode here)."""
    return [
        stored_text(column).label(column.name) if column.name == "payload" else column
        for column in task_table.c
    ]


def next_version() -> dict[str, ColumnElement[int]]:
    """The ``version`` of a task write: every ``UPDATE task`` sets it."""
    return {"version": task_table.c.version + 1}


def is_pending() -> ColumnElement[bool]:
    """``task.status = 'pending'`` with the constant written into the SQL, as in the partial
    indexes' predicates: against a bound parameter neither planner can prove a partial
    index applies (SQLite never; PostgreSQL not in a generic plan of a prepared statement)."""
    return task_table.c.status == literal_column("'pending'")


def is_queued() -> ColumnElement[bool]:
    """Pending and not waiting: ``QUEUED_ONLY`` as the query must spell it for SQLite to
    use the claim queue (``NOT waiting``, not SQLAlchemy's ``waiting = 0``)."""
    # Untyped: typed Boolean, SQLAlchemy would write SQLite's ``waiting = 1`` instead.
    return and_(is_pending(), literal_column(f"NOT {task_table.name}.waiting"))


def is_waiting() -> ColumnElement[bool]:
    """Pending and waiting (``WAITING_ONLY``, spelled as the index's predicate)."""
    return and_(is_pending(), literal_column(f"{task_table.name}.waiting"))


def is_active() -> ColumnElement[bool]:
    """``task.status IN ('claimed', 'running')``, spelled as ``ACTIVE_ONLY`` (see
    ``is_pending``): SQLite uses a partial index only for a query term equal to its own."""
    return task_table.c.status.in_([literal_column(repr(value)) for value in ACTIVE_VALUES])


# The claim queue: only queued rows (pending, not waiting), per job, higher priority first,
# then by turn (FIFO in a FIFO job); ``run_at``, ``status`` and ``waiting`` ride along so the index
# covers what claims and queue positions read (SQLite re-checks the predicate's columns),
# and they never visit the table rows they skip or count.
Index(
    "ix_task_claim_queue",
    task_table.c.job_id,
    task_table.c.priority.desc(),
    task_table.c.turn_at,
    task_table.c.id,
    task_table.c.run_at,
    task_table.c.status,
    task_table.c.waiting,
    task_table.c.limited,
    **_partial(QUEUED_ONLY),
)

# Waiting tasks per job by due time: the ones a claim takes once they are due and before
# the announcer queues them (few), and the ones queue positions count (by due time);
# ``limited`` too, for the claim's test of running limits.
Index(
    "ix_task_delayed",
    task_table.c.job_id,
    task_table.c.run_at,
    task_table.c.priority,
    task_table.c.turn_at,
    task_table.c.id,
    task_table.c.status,
    task_table.c.waiting,
    task_table.c.limited,
    **_partial(WAITING_ONLY),
)

# A limited job's claimed and running tasks, by submitter and by room
# (``rules.running_limits``): few rows, only those of limited jobs. ``status`` last, so that
# SQLite prefers them to ``ix_task_job_room_created`` (all of a room's tasks of a job).
Index(
    "ix_task_limited_active",
    task_table.c.job_id,
    task_table.c.submitted_by,
    task_table.c.status,
    **_partial(f"{ACTIVE_ONLY} AND limited"),
)
Index(
    "ix_task_limited_active_room",
    task_table.c.job_id,
    task_table.c.room_id,
    task_table.c.status,
    **_partial(f"{ACTIVE_ONLY} AND limited"),
)

# A fair job's queued tasks per share: the last turn a share holds (``rules/fair_share.py``).
Index(
    "ix_task_share_queue",
    task_table.c.job_id,
    task_table.c.share_key,
    task_table.c.priority,
    task_table.c.turn_at,
    **_partial(f"{QUEUED_ONLY} AND share_key IS NOT NULL"),
)


@event.listens_for(metadata, "after_create")
def _install_queue_count_triggers(target: MetaData, connection: Any, **_: Any) -> None:
    """``metadata.create_all`` installs the pending-count and usage triggers as the
    migrations leave them."""
    queue_counts.install_current(connection)
    usage_counts.install_current(connection)
