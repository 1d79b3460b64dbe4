"""A Hypothesis state machine drives the real service layer — submits, claims, starts,
completions, failures with and without retry, cancels, stale writes and lease sweeps — on
SQLite and PostgreSQL, and checks after every step that the queue keeps its promises:

- a task is held by at most one live claim, and only an active task holds a claim token;
- terminal states are final; attempts never exceed the maximum;
- no acknowledged (submitted) task is lost;
- no claim comes back empty while a claimable task exists; claims take the queue in order,
  then the due tasks not yet queued (so do claims that also start their tasks, and the
  claims of a completion with ``claim_next``, whose stale write claims nothing);
- the queue positions of a job's pending tasks are a permutation of 1..n;
- the kept counts of pending and waiting tasks match the tasks.

Waiting tasks come due (their ``run_at`` moves into the past while they still wait) and
the announcer's step queues the due ones, at any point between the other steps: claims and
positions take a due task in its place whether or not it was queued yet.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)
from sqlalchemy import delete, func, select, update

from taskhub.clock import utcnow
from taskhub.rules.errors import DomainError
from taskhub.rules.records import Principal
from taskhub.rules.retries import RetryPolicy
from taskhub.rules.states import ACTIVE_STATUSES, TaskStatus, is_terminal
from taskhub.services import claim, due_tasks, submit, sweeps, task_reads, transitions
from taskhub.services.jobs import KnownJobs, register_job
from taskhub.services.users import create_user
from taskhub.settings import Settings
from taskhub.store.database import Database
from taskhub.store.page_positions import with_positions
from taskhub.store.queue_positions import SELECT_TASKS, load_task
from taskhub.store.tables import is_waiting, metadata, queue_bucket_table, task_table

S = TaskStatus
IMMEDIATE_RETRY = RetryPolicy(base_seconds=0, jitter=0)  # retried tasks are due at once
CATEGORIES = ["modifiers"]


class NoExecutors:
    def has_executor(self, full_name: str) -> bool:
        return False


class QueueMachine(RuleBasedStateMachine):
    url: str  # set by the test

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.db = Database(Settings(database_url=self.url))
        self.status: dict[UUID, TaskStatus] = {}
        self.max_attempts: dict[UUID, int] = {}
        self.held: dict[UUID, tuple[UUID, UUID]] = {}  # task -> (worker, claim token)
        self.old_tokens: list[tuple[UUID, UUID]] = []
        self.waiting: set[UUID] = set()  # submitted with a run_at an hour ahead
        self.known_jobs = KnownJobs()
        self.run(self._set_up())

    def run(self, coroutine: Any) -> Any:
        return self.loop.run_until_complete(coroutine)

    async def _set_up(self) -> None:
        async with self.db.write() as conn:
            for table in reversed(metadata.sorted_tables):
                await conn.execute(delete(table))
        user_id, _ = await create_user(self.db, "owner")
        self.owner = Principal(id=user_id, name="owner", is_superuser=False)
        self.workers = []
        for _ in range(2):
            registration, _ = await register_job(
                self.db,
                self.owner,
                "room1",
                category="modifiers",
                name="Job",
                schema={},
                worker_id=None,
                allowed_categories=CATEGORIES,
            )
            self.workers.append(registration.worker_id)
            self.job_id = registration.job.id

    def teardown(self) -> None:
        self.run(self.db.dispose())
        self.loop.close()

    submitted = Bundle("submitted")

    # -- rules ---------------------------------------------------------------------------

    @rule(
        target=submitted,
        priority=st.integers(-1, 1),
        max_attempts=st.integers(1, 3),
        delay=st.sampled_from([None, None, -5, 3600]),  # due at once, overdue, or waiting
    )
    def submit(self, priority: int, max_attempts: int, delay: int | None) -> UUID:
        run_at = None if delay is None else utcnow() + timedelta(seconds=delay)
        record, _, created = self.run(
            submit.submit_task(
                self.db,
                self.owner,
                "room1",
                "room1:modifiers:Job",
                {},
                NoExecutors(),
                options=submit.SubmitOptions(
                    priority=priority, max_attempts=max_attempts, run_at=run_at
                ),
                known_jobs=self.known_jobs,
            )
        )
        assert created and record.status == S.PENDING
        # The acknowledged place (PostgreSQL reads it in the inserting statement) is the
        # one a read sees right after.
        assert record.queue_position == self.run(self._read(record.id)).queue_position
        self.status[record.id] = S.PENDING
        if delay is not None and delay > 0:
            self.waiting.add(record.id)
        self.max_attempts[record.id] = max_attempts
        return record.id

    @rule(worker=st.integers(0, 1), batch=st.integers(1, 3), start=st.booleans())
    def claim(self, worker: int, batch: int, start: bool) -> None:
        """A claim; with ``start`` a claim-and-start (the tasks come back running)."""
        worker_id = self.workers[worker]
        first, expected = self._next_in_queue(batch)
        records, _ = self.run(
            claim.claim_tasks(self.db, self.owner, worker_id, batch, lease_seconds=60, start=start)
        )
        self._took(records, worker_id, first, expected, start)

    def _next_in_queue(self, batch: int) -> tuple[set[UUID], int]:
        """The ids the next claim of ``batch`` must take, and how many."""
        queue, _ = self.run(self._all_tasks(utcnow()))
        not_queued = self.run(self._waiting_ids())
        ready = [r for r in queue if r.status == S.PENDING and r.id not in self.waiting]
        # The queued tasks first; the due ones the announcer has not queued yet after them.
        in_order = sorted(ready, key=lambda r: (r.id in not_queued, claim_order(r, utcnow())))
        return {r.id for r in in_order[:batch]}, min(batch, len(ready))

    def _took(
        self, records: list[Any], worker_id: UUID, first: set[UUID], expected: int, start: bool
    ) -> None:
        assert len(records) == expected, "empty-handed while tasks were claimable"
        assert {record.id for record in records} == first, "not claimed in queue order"
        for record in records:
            assert self.status[record.id] == S.PENDING and record.id not in self.held
            assert record.attempt <= self.max_attempts[record.id]
            status = S.RUNNING if start else S.CLAIMED
            assert record.status == status and (record.started_at is not None) == start
            self.status[record.id] = status
            self.held[record.id] = (worker_id, record.claim_token)

    def _held_with(self, *statuses: TaskStatus) -> list[UUID]:
        return sorted(t for t in self.held if self.status[t] in statuses)

    def _update(self, task_id: UUID, status: TaskStatus, **extra: Any) -> Any:
        _, token = self.held[task_id]
        record, _ = self.run(
            transitions.update_task(
                self.db,
                self.owner,
                task_id,
                status=status,
                claim_token=token,
                retry_policy=IMMEDIATE_RETRY,
                **extra,
            )
        )
        return record

    @precondition(lambda self: self._held_with(S.CLAIMED))
    @rule(data=st.data())
    def start(self, data: st.DataObject) -> None:
        task_id = data.draw(st.sampled_from(self._held_with(S.CLAIMED)))
        assert self._update(task_id, S.RUNNING).status == S.RUNNING
        self.status[task_id] = S.RUNNING

    @precondition(lambda self: self._held_with(S.RUNNING))
    @rule(data=st.data())
    def complete(self, data: st.DataObject) -> None:
        task_id = data.draw(st.sampled_from(self._held_with(S.RUNNING)))
        assert self._update(task_id, S.COMPLETED, result={"ok": True}).status == S.COMPLETED
        self._release(task_id, S.COMPLETED)

    @precondition(lambda self: self._held_with(S.RUNNING))
    @rule(data=st.data(), batch=st.integers(1, 2), start=st.booleans(), stale=st.booleans())
    def complete_and_claim_next(
        self, data: st.DataObject, batch: int, start: bool, stale: bool
    ) -> None:
        """A terminal PATCH with ``claim_next``: the write, then the claim (what the
        endpoint runs); with ``stale``, an earlier attempt's token: refused, claims nothing."""
        task_id = data.draw(st.sampled_from(self._held_with(S.RUNNING)))
        worker_id, _ = self.held[task_id]
        if stale:
            before = self.run(self._all_tasks(utcnow()))[0]
            with pytest.raises(DomainError):
                self.run(
                    transitions.update_task(
                        self.db, self.owner, task_id, status=S.COMPLETED, claim_token=uuid4()
                    )
                )
            after = self.run(self._all_tasks(utcnow()))[0]
            assert [(r.id, r.status, r.version) for r in after] == [
                (r.id, r.status, r.version) for r in before
            ], "a refused write changed something (or claimed)"
            return
        assert self._update(task_id, S.COMPLETED).status == S.COMPLETED
        self._release(task_id, S.COMPLETED)
        first, expected = self._next_in_queue(batch)
        records, _, refused = self.run(
            claim.claim_next(self.db, self.owner, worker_id, batch, lease_seconds=60, start=start)
        )
        assert refused is None
        self._took(records, worker_id, first, expected, start)

    @precondition(lambda self: self._held_with(S.CLAIMED, S.RUNNING))
    @rule(data=st.data(), retry=st.booleans())
    def fail(self, data: st.DataObject, retry: bool) -> None:
        task_id = data.draw(st.sampled_from(self._held_with(S.CLAIMED, S.RUNNING)))
        record = self._update(task_id, S.FAILED, error="boom", retry=retry)
        expected = S.PENDING if retry and record.attempt < self.max_attempts[task_id] else S.FAILED
        assert record.status == expected
        self._release(task_id, expected)

    @rule(task_id=consumes(submitted))
    def cancel(self, task_id: UUID) -> None:
        try:
            record, _ = self.run(
                transitions.update_task(self.db, self.owner, task_id, status=S.CANCELLED)
            )
        except DomainError:
            assert is_terminal(self.status[task_id])
            return
        assert not is_terminal(self.status[task_id]) and record.status == S.CANCELLED
        self._release(task_id, S.CANCELLED)

    @precondition(lambda self: self.old_tokens)
    @rule(data=st.data())
    def stale_write(self, data: st.DataObject) -> None:
        task_id, token = data.draw(st.sampled_from(self.old_tokens))
        if self.held.get(task_id, (None, None))[1] == token:
            return
        before = self.run(task_reads.get_task(self.db, task_id))
        with pytest.raises(DomainError):
            self.run(
                transitions.update_task(
                    self.db, self.owner, task_id, status=S.COMPLETED, claim_token=token
                )
            )
        after = self.run(task_reads.get_task(self.db, task_id))
        assert (after.status, after.attempt, after.claim_token) == (
            before.status,
            before.attempt,
            before.claim_token,
        )

    @precondition(lambda self: self.waiting)
    @rule(data=st.data())
    def come_due(self, data: st.DataObject) -> None:
        """A waiting task's ``run_at`` passes (it still waits: the announcer has not
        looked yet)."""
        task_id = data.draw(st.sampled_from(sorted(self.waiting)))
        self.run(self._move_run_at(task_id, utcnow() - timedelta(seconds=1)))
        self.waiting.discard(task_id)

    async def _move_run_at(self, task_id: UUID, run_at: datetime) -> None:
        async with self.db.write() as conn:
            await conn.execute(
                update(task_table).where(task_table.c.id == task_id).values(run_at=run_at)
            )

    @rule()
    def queue_due(self) -> None:
        """The announcer's step: the waiting tasks that are due join the claim queue."""
        self.run(due_tasks.queue_due(self.db, utcnow(), 1000))

    @rule()
    def sweep_expired_leases(self) -> None:
        """Every lease runs out: each active attempt is retried or fails."""
        self.run(self._expire_every_lease())
        count, _ = self.run(sweeps.end_expired_leases(self.db, utcnow(), IMMEDIATE_RETRY))
        active = [t for t in self.held if self.status[t] in ACTIVE_STATUSES]
        assert count == len(active)
        for task_id in active:
            record = self.run(task_reads.get_task(self.db, task_id))
            assert record.status in (S.PENDING, S.FAILED)
            assert (record.status == S.PENDING) == (record.attempt < self.max_attempts[task_id])
            self._release(task_id, record.status)

    async def _expire_every_lease(self) -> None:
        async with self.db.write() as conn:
            await conn.execute(
                update(task_table)
                .where(task_table.c.lease_expires_at.is_not(None))
                .values(lease_expires_at=utcnow() - timedelta(seconds=1))
            )

    def _release(self, task_id: UUID, status: TaskStatus) -> None:
        self.status[task_id] = status
        worker_and_token = self.held.pop(task_id, None)
        if worker_and_token is not None:
            self.old_tokens.append((task_id, worker_and_token[1]))

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def the_database_agrees_with_what_was_acknowledged(self) -> None:
        now = utcnow()
        rows, counted = self.run(self._all_tasks(now))
        waiting = len(self.run(self._waiting_ids()))
        assert {record.id for record in rows} == set(self.status), "a task was lost"
        pending_positions = []
        for record in rows:
            assert record.status == self.status[record.id]
            assert record.attempt <= record.max_attempts == self.max_attempts[record.id]
            holds_token = record.claim_token is not None
            if record.status in ACTIVE_STATUSES:
                assert holds_token and self.held[record.id][1] == record.claim_token
            elif record.status == S.PENDING:
                assert not holds_token and record.worker_id is None
                pending_positions.append(record.queue_position)
        assert sorted(pending_positions) == list(range(1, len(pending_positions) + 1))
        pending = [record for record in rows if record.status == S.PENDING]
        assert counted == (len(pending), waiting), "the trigger-kept counts drifted"
        in_claim_order = sorted(pending, key=lambda record: claim_order(record, now))
        positions = [record.queue_position for record in in_claim_order]
        assert positions == list(range(1, len(pending) + 1)), "positions not in claim order"

    async def _read(self, task_id: UUID) -> Any:
        async with self.db.read() as conn:
            return await load_task(conn, task_id)

    async def _all_tasks(self, now: datetime) -> tuple[list[Any], tuple[int, int]]:
        """The job's tasks with their positions, and the kept (pending, waiting) counts."""
        bucket = queue_bucket_table
        async with self.db.read() as conn:
            rows = await conn.execute(SELECT_TASKS.where(task_table.c.job_id == self.job_id))
            records = await with_positions(conn, rows.all(), now)
            kept = await conn.execute(
                select(
                    func.coalesce(func.sum(bucket.c.pending), 0),
                    func.coalesce(func.sum(bucket.c.waiting), 0),
                ).where(bucket.c.job_id == self.job_id)
            )
            pending, waiting = kept.one()
            return records, (int(pending), int(waiting))

    async def _waiting_ids(self) -> set[UUID]:
        """The job's pending tasks that still wait (due or not), read off the task rows."""
        async with self.db.read() as conn:
            job = task_table.c.job_id == self.job_id
            waiting = select(task_table.c.id).where(job, is_waiting())
            return set((await conn.execute(waiting)).scalars())


def claim_order(record: Any, now: datetime) -> tuple[Any, ...]:
    """The documented queue order, computed independently of the hub: ready tasks by
    priority (higher first) then FIFO; then the delayed ones by due time."""
    fifo = (-record.priority, record.created_at, record.id)
    if record.run_at is None or record.run_at <= now:
        return (0, *fifo)
    return (1, record.run_at, *fifo)


def test_the_queue_keeps_its_invariants(database_url: str) -> None:
    QueueMachine.url = database_url
    run = settings(
        max_examples=12,
        stateful_step_count=25,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    QueueMachine.TestCase.settings = run
    QueueMachine.TestCase().runTest()
