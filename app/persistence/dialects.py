"""The statements that differ between SQLite and PostgreSQL, side by side."""

from __future__ import annotations

import contextlib
import enum
import functools
import hashlib
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    BigInteger,
    ColumnElement,
    Integer,
    LargeBinary,
    Table,
    TextClause,
    and_,
    bindparam,
    cast,
    exists,
    extract,
    func,
    literal,
    literal_column,
    or_,
    select,
    text,
    true,
    union_all,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine.interfaces import BindTyping
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool
from sqlalchemy.sql import Executable

from taskhub.domain.naming import INTERNAL_ROOM
from taskhub.domain.states import TaskStatus
from taskhub.persistence.models import (
    answered_task_columns,
    is_pending,
    is_queued,
    is_waiting,
    job_table,
    link_table,
    next_version,
    task_table,
    worker_table,
)
from taskhub.persistence.prepared import hot

if TYPE_CHECKING:
    from taskhub.persistence.database import Database


def _served_jobs() -> Any:
    """Job ids linked to ``:worker_id`` (never ``@internal`` ones: those belong to the
    taskiq executor, not to remote workers)."""
    return (
        select(link_table.c.job_id)
        .join(job_table, job_table.c.id == link_table.c.job_id)
        .where(
            link_table.c.worker_id == bindparam("worker_id"),
            job_table.c.room_id != INTERNAL_ROOM,
        )
    )


@functools.cache
def insert_task_of_live_job(dialect: str, position: Any = None) -> Executable:
    """``INSERT INTO task … SELECT … FROM job WHERE id = :b_job_id AND updated_at =
    :b_job_version AND NOT deleted ON CONFLICT DO NOTHING RETURNING max_attempts``: no row
    when the job was soft-deleted or changed since the caller read it, or when an equal
    ``(submitter, job, idempotency key)`` already exists (the unique index decides between
    racing duplicates). ``:b_max_attempts`` NULL takes the job's. On PostgreSQL the job row
    is locked (``FOR KEY SHARE``, as the foreign key's check locks it anyway).

    With ``position`` (PostgreSQL): the insert becomes a data-modifying CTE and the row
    also carries ``position`` as ``queue_position`` — one round trip instead of two. It is
    evaluated on the statement's snapshot, which does not hold the new task yet."""
    task = task_table
    columns = ["id", "job_id", "room_id", "status", "payload", "created_at", "submitted_by"]
    columns += ["attempt", "idempotency_key", "priority", "max_attempts", "run_at", "waiting"]
    columns += ["version"]
    rows = select(
        bindparam("b_id", type_=task.c.id.type),
        job_table.c.id,
        bindparam("b_room_id", type_=task.c.room_id.type),
        literal(TaskStatus.PENDING.value, type_=task.c.status.type),
        bindparam("b_payload", type_=task.c.payload.type),
        bindparam("b_created_at", type_=task.c.created_at.type),
        bindparam("b_submitted_by", type_=task.c.submitted_by.type),
        bindparam("b_attempt", type_=task.c.attempt.type),
        bindparam("b_key", type_=task.c.idempotency_key.type),
        bindparam("b_priority", type_=task.c.priority.type),
        func.coalesce(
            bindparam("b_max_attempts", type_=task.c.max_attempts.type), job_table.c.max_attempts
        ),
        bindparam("b_run_at", type_=task.c.run_at.type),
        bindparam("b_waiting", type_=task.c.waiting.type),
        literal(1, type_=task.c.version.type),
    ).where(
        job_table.c.id == bindparam("b_job_id"),
        job_table.c.updated_at == bindparam("b_job_version", type_=job_table.c.updated_at.type),
        job_table.c.deleted.is_(False),
    )
    if dialect == "postgresql":
        # Waits for a soft-delete under way (it locks the job row first) and then checks
        # the job as that left it, instead of the snapshot the statement began with.
        rows = rows.with_for_update(read=True, key_share=True, of=job_table)
    inserted = (
        _insert(dialect, task)
        .from_select(columns, rows)
        .on_conflict_do_nothing()
        .returning(task.c.max_attempts)
    )
    if position is None:
        return hot(_compiled_once(dialect, inserted))
    if dialect != "postgresql":
        raise ValueError("only PostgreSQL reads a position in the statement that inserts")
    new_row = inserted.cte("inserted")
    both = select(new_row.c.max_attempts, position.label("queue_position"))
    return hot(_compiled_once(dialect, both.select_from(new_row)))


def _compiled_once(dialect: str, statement: Executable) -> TextClause:
    """``statement`` as fixed SQL text with its typed parameters. SQLAlchemy (2.0.x) does
    not cache its dialects' ``ON CONFLICT`` clauses, so such a statement would be compiled
    again on every execution; as text with typed parameters it is compiled once."""
    module = postgresql if dialect == "postgresql" else sqlite
    plain = module.dialect(paramstyle="named")
    plain.bind_typing = BindTyping.NONE  # no inline casts: the executing dialect adds its own
    compiled = statement.compile(dialect=plain)
    params = [
        bindparam(name, value=bind.value, type_=bind.type)
        if bind.value is not None
        else bindparam(name, type_=bind.type)
        for bind, name in compiled.bind_names.items()
    ]
    return text(compiled.string).bindparams(*params)


_ROW_ADDRESS = literal_column(f"{task_table.name}.ctid").label("row_address")
_ROW_ADDRESS_OF_TASK = literal_column(f"{task_table.name}.ctid")


def _due() -> Any:
    return task_table.c.run_at <= bindparam("now", type_=task_table.c.run_at.type)


class ClaimFrom(enum.Enum):
    """Where a claim takes tasks from: the claim queue (pending, not waiting; ``run_at``
    checked all the same, for a delayed task an older replica queued), the waiting tasks
    already due that the announcer has not queued yet (few, on ``ix_task_delayed``), or
    both at once."""

    QUEUE = "queue"
    DUE_WAITING = "due-waiting"
    BOTH = "both"

    def conditions(self) -> list[list[Any]]:
        queued = [is_queued(), or_(task_table.c.run_at.is_(None), _due())]
        due_waiting = [is_waiting(), _due()]
        return {
            ClaimFrom.QUEUE: [queued],
            ClaimFrom.DUE_WAITING: [due_waiting],
            ClaimFrom.BOTH: [queued, due_waiting],
        }[self]


@functools.cache
def claim_statement(
    dialect: str,
    *,
    check_owner: bool,
    limit: int,
    wait_for_locked: bool = False,
    source: ClaimFrom = ClaimFrom.QUEUE,
) -> Executable:
    """Claim up to ``limit`` of the first claimable tasks of ``source`` (due at ``:now``;
    highest priority, then oldest) of ``:worker_id``'s jobs, atomically, as a new attempt
    with ``:claim_token`` (and ``:claim_key``, the claim's Idempotency-Key or NULL); with
    ``check_owner`` only if the worker belongs to ``:owner_id``.
    Built once per shape (``limit`` is part of the shape: a bound LIMIT would be
    re-rendered on every execution).

    A claim reads the claim queue; the due waiting tasks only when the queue had fewer
    than it asked for (``DUE_WAITING``, a second statement): reading them in every claim
    cost PostgreSQL 8 % more instructions per task. Until the announcer queues a
    due task (at its ``run_at``, give or take its timer), claims take the queued ones
    first, whatever their priorities.

    PostgreSQL: ``WITH picked AS (SELECT … FROM served jobs, LATERAL (SELECT … ORDER BY …
    LIMIT n FOR UPDATE SKIP LOCKED) … LIMIT n) UPDATE task … FROM picked RETURNING``, the
    update finding each picked row by its id and address (``ctid``, stable while locked).
    Concurrent claimers skip each other's rows instead of waiting or retrying. The locking
    select must sit in a CTE: as ``WHERE id IN (subquery)`` the planner may re-scan it and
    lock (and claim) more than ``n`` rows.

    PostgreSQL answers with at least one row: the claimed ones, or one row of NULLs, each
    with ``worker_owner`` (the worker's user, NULL if there is no such worker).

    The head scan locks the first ``n`` rows of each served job, and claims ``n`` in all:
    while it runs, a claimer of one of those jobs skips a task this claim will not take.
    A claim that got nothing asks ``claimable_left_statement`` whether a claimable task
    was there all the same (skipped as locked), and if so claims once more
    ``wait_for_locked``: the same statement with ``FOR UPDATE`` (no ``SKIP LOCKED``), which
    waits for the other claim to commit and then takes the first row still claimable.
    (The question is a column of the ``DUE_WAITING`` claim alone, which runs only after
    a short claim of the queue: as a column of every claim, even unasked, its plan cost 6 %
    more of PostgreSQL's instructions.) ``BOTH`` serves these waiting claims.

    SQLite: the same single ``UPDATE … RETURNING`` with ``id IN (subquery)``; it runs on the
    one writer connection (alone or in a commit group, see ``Database.autocommit``), which
    serialises writers, so ``SKIP LOCKED`` is neither needed nor available.
    """
    task = task_table
    served_jobs = _served_jobs()
    if check_owner:  # only the worker's owner (or a superuser) may claim for it
        served_jobs = served_jobs.where(
            exists().where(
                worker_table.c.id == bindparam("worker_id"),
                worker_table.c.user_id == bindparam("owner_id"),
            )
        )
    queue_order = (task.c.priority.desc(), task.c.created_at, task.c.id)
    if dialect == "postgresql":
        # Per served job and kind of claimable task, the head of its queue straight off its
        # index (a LATERAL scan in index order that stops after ``limit`` rows, however
        # deep the queue), then the best heads over all jobs.
        served = served_jobs.subquery("served")

        def heads_of(claimable: list[Any], name: str) -> Any:
            head = (
                select(task.c.id, task.c.priority, task.c.created_at, _ROW_ADDRESS)
                .where(*claimable, task.c.job_id == served.c.job_id)
                .order_by(*queue_order)
                .limit(limit)
                .with_for_update(skip_locked=not wait_for_locked)
                .lateral(name)
            )
            return select(*head.c).select_from(served).join(head, true())

        kinds = [heads_of(kind, f"head{n}") for n, kind in enumerate(source.conditions())]
        heads = _best_of(kinds).subquery()
        picked = select(heads.c.id, heads.c.row_address).order_by(*_in_order(heads))
        picked = picked.limit(limit).cte("picked")
        # The picked rows stay locked until the update, so their addresses (ctid) hold: the
        # update reaches them directly, whatever the planner believes about the table (with
        # the statistics of a young table it would rather scan every pending task).
        chosen = and_(task.c.id == picked.c.id, picked.c.row_address == _ROW_ADDRESS_OF_TASK)
    else:
        kinds = [
            select(task.c.id, task.c.priority, task.c.created_at)
            .where(*claimable, task.c.job_id.in_(served_jobs))
            .order_by(*queue_order)
            .limit(limit)
            for claimable in source.conditions()
        ]
        if len(kinds) == 1:
            candidates = kinds[0].with_only_columns(task.c.id)
        else:
            heads = _best_of([select(*kind.subquery().c) for kind in kinds]).subquery()
            candidates = select(heads.c.id).order_by(*_in_order(heads)).limit(limit)
        chosen = task.c.id.in_(candidates.scalar_subquery())
    claimed = (
        update(task)
        .where(chosen, is_pending())
        .values(
            status=TaskStatus.CLAIMED.value,
            worker_id=bindparam("worker_id"),
            claim_token=bindparam("claim_token"),
            claim_key=bindparam("claim_key", type_=task.c.claim_key.type),
            attempt=task.c.attempt + 1,
            lease_expires_at=bindparam("lease_until"),
            # A fresh attempt: nothing of the previous one (a retry) carries over.
            started_at=None,
            error=None,
            result=None,
            progress=None,
            progress_message=None,
            **next_version(),
        )
        .returning(*answered_task_columns())
    )
    if dialect != "postgresql":
        return hot(claimed)
    # One round trip also for an empty claim: the claimed rows (or one row of NULLs) with
    # the worker's owner, which says why nothing was claimed.
    rows = claimed.cte("claimed")
    one = select(literal(1).label("one")).subquery("one")
    owner = select(worker_table.c.user_id).where(worker_table.c.id == bindparam("worker_id"))
    columns = [rows, owner.scalar_subquery().label("worker_owner")]
    if source == ClaimFrom.DUE_WAITING:
        columns.append(_claimable_left().label("claimable_left"))
    return hot(select(*columns).select_from(one.outerjoin(rows, true())))


def _best_of(kinds: list[Any]) -> Any:
    """The heads of each kind of claimable task together (one kind: as it is)."""
    return union_all(*kinds) if len(kinds) > 1 else kinds[0]


def _in_order(heads: Any) -> list[Any]:
    return [heads.c.priority.desc(), heads.c.created_at, heads.c.id]


@functools.cache
def claimable_left_statement() -> Executable:
    """Whether ``:worker_id``'s jobs have a task claimable at ``:now``, queued or due and
    waiting (PostgreSQL: asked after a claim that waited for a locked task and got nothing;
    see ``claim_statement``)."""
    return hot(select(_claimable_left().label("claimable_left")))


def _claimable_left() -> Any:
    served = task_table.c.job_id.in_(_served_jobs())
    return or_(*(exists().where(*kind, served) for kind in ClaimFrom.BOTH.conditions()))


def insert_ignoring_duplicates(dialect: str, table: Table, values: dict[str, Any]) -> Executable:
    """``INSERT … ON CONFLICT DO NOTHING`` (both engines spell it alike, via their dialects)."""
    return _insert(dialect, table).values(**values).on_conflict_do_nothing()


def _insert(dialect: str, table: Table) -> Any:
    """The dialect's own ``INSERT`` construct (it has ``on_conflict_do_nothing``)."""
    return (postgresql if dialect == "postgresql" else sqlite).insert(table)


def duration_microseconds(
    dialect: str, start: ColumnElement[Any], end: ColumnElement[Any]
) -> ColumnElement[int]:
    """``end - start`` (two ``UTCDateTime`` columns) in whole microseconds, exactly: the
    integer ``(end - start) // timedelta(microseconds=1)`` of the Python datetimes, NULL if
    either is NULL. For aggregates computed in the database (``sum``, ``max``) that equal
    Python's over the same rows.

    PostgreSQL: ``extract(epoch from timestamptz)`` is numeric (exact microseconds).
    SQLite stores naive UTC as SQLAlchemy's text ``YYYY-MM-DD HH:MM:SS.ffffff``: whole
    seconds from its first 19 characters (``julianday``'s difference is a double some 50 µs
    coarse at today's dates: rounded to the second it is exact), microseconds from its last
    6 (padded, should a fraction be shorter or missing). Not ``julianday``, ``unixepoch`` or
    ``strftime('%s')`` of the full text: they round it to milliseconds first, so
    ``…:00.999999`` would count as the next second. (``strftime`` of the 19 characters is
    exact too, but a quarter slower over a room's tasks; ``unixepoch`` needs SQLite 3.38.)"""
    if dialect == "postgresql":
        seconds = extract("epoch", end) - extract("epoch", start)
        return cast(seconds * literal_column("1000000"), BigInteger)

    def day_number(moment: ColumnElement[Any]) -> ColumnElement[float]:  # to the second
        return func.julianday(func.substr(moment, 1, 19))

    def microseconds(moment: ColumnElement[Any]) -> ColumnElement[int]:
        padded = moment.op("||")(literal_column("'000000'"))
        return cast(func.substr(padded, 21, 6), Integer)

    days = day_number(end) - day_number(start)
    seconds = cast(func.round(days * literal_column("86400")), Integer)
    return seconds * literal_column("1000000") + (microseconds(end) - microseconds(start))


def document_is_small(dialect: str, column: ColumnElement[Any], limit: int) -> ColumnElement[bool]:
    """Whether a stored JSON document (a ``JSONAsSent`` column; NULL counts as small) holds
    at most ``limit`` bytes, told without reading the document.

    PostgreSQL: ``json`` has no cast to text that leaves it unread (``payload::text`` goes
    through its output function: detoasted and copied, about 4 ms a MB here), so the size
    comes off the stored value (``pg_column_size``), which is the document's own only when
    it is not compressed (``pg_column_compression``, PostgreSQL 14: a compressed one counts
    as big, however small it is stored; PostgreSQL compresses only rows past about 2 kB).
    SQLite: the length of its text as bytes (it reads the text, from the page cache)."""
    if dialect == "postgresql":
        stored = func.pg_column_size(column)
        return or_(
            column.is_(None),
            and_(stored <= limit, func.pg_column_compression(column).is_(None)),
        )
    return func.coalesce(func.length(cast(column, LargeBinary)), literal_column("0")) <= limit


_local_leases: set[tuple[str, str]] = set()  # (database, name) held by a ClusterLease


def _lock_key(name: str) -> int:
    """The advisory lock key of ``name`` (64 bits of its SHA-256)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


class ClusterLease:
    """A cluster-wide lock, kept from ``hold`` to ``release``: across many cycles by a
    process that should do some work alone for as long as it runs (a leader), or for one
    cycle of it.

    PostgreSQL: a session advisory lock on a connection of its own, outside the pool and
    kept open; PostgreSQL frees the lock when that connection or its process dies, and
    another process takes it at its next ``hold``. SQLite: one process per database file,
    so an in-process lock is the whole cluster."""

    def __init__(self, db: Database, name: str) -> None:
        self._db = db
        self._name = name
        self._conn: AsyncConnection | None = None
        self._engine: AsyncEngine | None = None
        self._held_locally = False  # on SQLite

    async def hold(self) -> bool:
        """Whether this process holds the lease now: it keeps it, or tries to take it."""
        if self._db.dialect != "postgresql":
            return self._hold_locally()
        if self._conn is not None:
            try:  # still connected, so still holding it
                await self._conn.scalar(text("SELECT 1"))
                await self._conn.commit()
                return True
            except Exception:
                await self._drop()
        if self._engine is None:
            self._engine = create_async_engine(self._db.url, poolclass=NullPool)
        conn = await self._engine.connect()
        try:
            key = _lock_key(self._name)
            taken = bool(await conn.scalar(text("SELECT pg_try_advisory_lock(:k)"), {"k": key}))
            await conn.commit()
        except BaseException:
            await conn.close()
            raise
        if not taken:
            await conn.close()
            return False
        self._conn = conn
        return True

    def _hold_locally(self) -> bool:
        key = (self._db.url, self._name)
        if not self._held_locally:
            if key in _local_leases:
                return False
            _local_leases.add(key)
            self._held_locally = True
        return True

    async def release(self) -> None:
        """Give the lease up (another process may take it at its next try)."""
        if self._held_locally:
            _local_leases.discard((self._db.url, self._name))
            self._held_locally = False
        await self._drop()
        if self._engine is not None:
            await self._engine.dispose()
            self._engine = None

    async def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()  # closing the session frees its advisory locks
