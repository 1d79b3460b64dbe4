"""A Hypothesis state machine drives the real service layer — submits, claims, starts,
completions, failures with and without retry, cancels, stale writes and lease sweeps — on
SQLite and PostgreSQL, and checks after every step that the queue keeps its promises:

- a task is held by at most one live claim, and only an active task holds a claim token;
- terminal states are final; attempts never exceed the maximum;
- no acknowledged (submitted) task is lost, nor read twice;
- every task holds the turn the model gives it (below), from its submit on;
- no claim comes back empty while a claimable task exists; claims take the queue in the
  model's order, then the due tasks not yet queued (so do claims that also start their
  tasks, and the claims of a completion with ``claim_next``, whose stale write claims
  nothing);
- the queue positions of a job's pending tasks are the model's places (1..n, in claim
  order, the tasks not yet due last);
- the kept counts of pending and waiting tasks match the tasks;
- a push (``realtime.task_push``: a worker grants slots, or a task's wake-up reaches a
  grant; the hub claims and starts tasks for it) takes what a claim-and-start of the
  slots held would take, keeps the slots it found nothing for, and a push whose socket
  went leaves its tasks to their lease;
- a fair job's claims go round-robin over its submitters (``Rotation``, which counts the
  claims alone, not the model's turns).

Two jobs share the queue: a FIFO one, to which its owner submits, and a fair one
(``claim_order`` fair-by-submitter), to which three users submit. Worker 0 serves both,
worker 1 the FIFO job, worker 2 the fair one. A model of the queue
(``tests/support/queue_model.py``) works out from its own state the turn each task must
get (with ``rules.fair_share.next_turn``, from the model's own head of the queue and last
turn of the share), which tasks each claim must take (a batch: the set of its first tasks)
and every pending task's queue position.

Waiting tasks come due (their ``run_at`` moves into the past while they still wait) and
the announcer's step queues the due ones, at any point between the other steps: claims and
positions take a due task in its place whether or not it was queued yet.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    consumes,
    invariant,
    multiple,
    precondition,
    rule,
)
from sqlalchemy import func, select, update

from taskhub.clock import utcnow
from taskhub.realtime.publisher import Publisher
from taskhub.realtime.task_push import MAX_GRANTED_SLOTS, Grant, TaskPusher
from taskhub.realtime.waiters import TaskWaiters
from taskhub.rules.errors import DomainError
from taskhub.rules.fair_share import ClaimOrder
from taskhub.rules.records import Principal, TaskRecord
from taskhub.rules.retries import RetryPolicy
from taskhub.rules.states import ACTIVE_STATUSES, TaskStatus, is_terminal
from taskhub.services import claim, due_tasks, submit, sweeps, task_reads, transitions
from taskhub.services.jobs import KnownJobs, register_job
from taskhub.services.users import create_user
from taskhub.store.page_positions import with_positions
from taskhub.store.tables import is_waiting, queue_bucket_table, task_table
from taskhub.store.task_rows import SELECT_TASKS, load_task
from tests.support.machines import NoExecutors, ServiceMachine
from tests.support.properties import examples
from tests.support.queue_model import QueueModel


async def _open_everywhere(_principal: Principal) -> frozenset[str]:
    return frozenset()


S = TaskStatus
IMMEDIATE_RETRY = RetryPolicy(base_seconds=0, jitter=0)  # retried tasks are due at once
CATEGORIES = ["modifiers"]
FIFO_JOB = "room1:modifiers:Job"
FAIR_JOB = "room1:modifiers:Fair"


class QueueMachine(ServiceMachine):
    def __init__(self) -> None:
        super().__init__()
        self.max_attempts: dict[UUID, int] = {}
        self.submitter: dict[UUID, Principal] = {}
        self.held: dict[UUID, tuple[UUID, UUID]] = {}  # task -> (worker, claim token)
        self.old_tokens: list[tuple[UUID, UUID]] = []
        self.known_jobs = KnownJobs()
        self.seconds_passed = 0
        self.run(self._set_up())
        self.model = QueueModel(fair_jobs=[self.fair_job_id])
        self.pushed: list[TaskRecord] = []
        self.socket_up = True  # whether a push finds the worker's socket
        self.pusher = TaskPusher(
            self.db,
            Publisher(TaskWaiters()),
            lease_seconds=60,
            deliver=self._deliver,
            closed=_open_everywhere,
        )

    async def _deliver(self, _grant: Grant, records: list[TaskRecord]) -> bool:
        self.pushed.extend(records)
        return self.socket_up

    async def _set_up(self) -> None:
        self.users = []
        for name in ("owner", "alice", "bob"):
            user_id, _ = await create_user(self.db, name)
            self.users.append(Principal(id=user_id, name=name, is_superuser=False))
        self.owner = self.users[0]
        # Worker 0 serves both jobs, worker 1 the FIFO job, worker 2 the fair one.
        self.workers: list[UUID] = []
        self.serves: dict[UUID, set[UUID]] = {}
        for worker in (None, None):
            self.job_id = await self._register("Job", worker, ClaimOrder.FIFO)
        for worker in (self.workers[0], None):
            self.fair_job_id = await self._register("Fair", worker, ClaimOrder.FAIR_BY_SUBMITTER)
        self.job_ids = [self.job_id, self.fair_job_id]

    async def _register(self, name: str, worker_id: UUID | None, order: ClaimOrder) -> UUID:
        registration, _ = await register_job(
            self.db,
            self.owner,
            "room1",
            category="modifiers",
            name=name,
            schema={},
            worker_id=worker_id,
            allowed_categories=CATEGORIES,
            claim_order=order,
        )
        if worker_id is None:
            self.workers.append(registration.worker_id)
        self.serves.setdefault(registration.worker_id, set()).add(registration.job.id)
        return registration.job.id

    submitted = Bundle("submitted")

    # -- rules ---------------------------------------------------------------------------

    @rule(
        target=submitted,
        priority=st.integers(-1, 1),
        max_attempts=st.integers(1, 3),
        delay=st.sampled_from([None, None, -5, 3600]),  # due at once, overdue, or waiting
    )
    def submit(self, priority: int, max_attempts: int, delay: int | None) -> UUID:
        return self._submit(self.owner, FIFO_JOB, priority, max_attempts, delay)

    @rule(
        target=submitted,
        users=st.lists(st.integers(0, 2), min_size=1, max_size=5),
        priority=st.sampled_from([0, 0, 1]),
        max_attempts=st.sampled_from([1, 1, 2, 3]),
        delay=st.sampled_from([None, None, None, None, None, -5, 3600]),
    )
    def submit_fair(
        self, users: list[int], priority: int, max_attempts: int, delay: int | None
    ) -> Any:
        """Tasks for the fair job, one after another, each from the submitter ``users``
        names for it (three users: their tasks interleave as they please)."""
        return multiple(
            *(
                self._submit(self.users[user], FAIR_JOB, priority, max_attempts, delay)
                for user in users
            )
        )

    def _submit(
        self, submitter: Principal, job: str, priority: int, max_attempts: int, delay: int | None
    ) -> UUID:
        run_at = None if delay is None else utcnow() + timedelta(seconds=delay)
        record, _, created = self.run(
            submit.submit_task(
                self.db,
                submitter,
                "room1",
                job,
                {},
                NoExecutors(),
                options=submit.SubmitOptions(
                    priority=priority, max_attempts=max_attempts, run_at=run_at
                ),
                known_jobs=self.known_jobs,
            )
        )
        assert created and record.status == S.PENDING
        share = str(submitter.id) if record.job_id == self.fair_job_id else None
        ahead = run_at if delay is not None and delay > 0 else None  # only that one is kept
        task = self.model.submitted(
            record.id, record.job_id, share, priority, record.created_at, ahead
        )
        self.submitter[record.id] = submitter
        self.max_attempts[record.id] = max_attempts
        stored = self.run(self._read(record.id))
        assert record.turn == stored.turn_at == task.turn, "not the turn the model gives"
        # The acknowledged place (PostgreSQL reads it in the inserting statement) is the
        # one a read sees right after, and the model's.
        place = self.model.places(record.job_id, utcnow())[record.id]
        assert record.queue_position == stored.queue_position == place
        return record.id

    @rule(worker=st.integers(0, 2), batch=st.integers(1, 3), start=st.booleans())
    def claim(self, worker: int, batch: int, start: bool) -> None:
        """A claim; with ``start`` a claim-and-start (the tasks come back running)."""
        worker_id = self.workers[worker]
        expected = self._next_claims(worker_id, batch)
        records, _ = self.run(
            claim.claim_tasks(
                self.db,
                self.owner,
                worker_id,
                batch,
                closed=frozenset(),
                lease_seconds=60,
                start=start,
            )
        )
        self._took(records, worker_id, expected, start)

    @rule(worker=st.sampled_from([0, 2]), claims=st.integers(2, 6))
    def claim_one_by_one(self, worker: int, claims: int) -> None:
        """A busy worker of the fair job claims one task at a time, again and again (so
        the fair job's backlogs are worked through)."""
        for _ in range(claims):
            self.claim(worker, batch=1, start=False)

    def _next_claims(self, worker_id: UUID, batch: int) -> list[UUID]:
        """The ids the next claim of ``batch`` by the worker must take, in order."""
        return self.model.next_claims(self.serves[worker_id], batch, utcnow())

    def _took(self, records: list[Any], worker_id: UUID, expected: list[UUID], start: bool) -> None:
        assert len(records) == len(expected), "empty-handed while tasks were claimable"
        by_id = {record.id: record for record in records}
        assert set(by_id) == set(expected), "not claimed in queue order"
        for task_id in expected:  # as the claim took them, one after another
            record = by_id[task_id]
            assert self.model.tasks[task_id].status == S.PENDING and task_id not in self.held
            assert record.attempt <= self.max_attempts[task_id]
            status = S.RUNNING if start else S.CLAIMED
            assert record.status == status and (record.started_at is not None) == start
            self.model.claimed(task_id, status)
            self.held[task_id] = (worker_id, record.claim_token)

    def _held_with(self, *statuses: TaskStatus) -> list[UUID]:
        return sorted(t for t in self.held if self.model.tasks[t].status in statuses)

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

    @rule(worker=st.integers(0, 2), slots=st.integers(0, 3), socket_up=st.booleans())
    def push(self, worker: int, slots: int, socket_up: bool) -> None:
        """The worker grants ``slots`` more (0: look again). A nudge, or a grant that held
        no slots, pushes what a claim-and-start of every slot held would take; a grant that
        held some already adds to them (every task since was a wake-up: ``wake``). The
        rest stays held. If the socket went meanwhile, its grants lapse, and the pushed
        tasks stay the worker's until their lease runs out (``sweep_expired_leases``)."""
        worker_id = self.workers[worker]
        held = self.pusher.held(worker_id)
        holds = min(held + slots, MAX_GRANTED_SLOTS)
        looks = slots == 0 or held == 0
        expected = self._next_claims(worker_id, holds) if holds and looks else []
        self._pushed_by(worker, socket_up, self._grant(worker, slots), holds, expected)

    @rule(job=st.sampled_from([FIFO_JOB, FAIR_JOB]), socket_up=st.booleans())
    def wake(self, job: str, socket_up: bool) -> None:
        """A task of ``job`` became available: the one worker whose grant serves it (when
        only one does) gets what a claim-and-start of the slots it holds would take."""
        serving = [
            w for w, worker_id in enumerate(self.workers)
            if self.pusher.held(worker_id) and job in self._job_names(worker_id)
        ]  # fmt: skip
        if len(serving) != 1:
            return
        (worker,) = serving
        worker_id = self.workers[worker]
        holds = self.pusher.held(worker_id)
        expected = self._next_claims(worker_id, holds)
        self._pushed_by(worker, socket_up, self._woken(job), holds, expected)

    def _pushed_by(
        self, worker: int, socket_up: bool, pushes: Any, holds: int, expected: list[UUID]
    ) -> None:
        """Run ``pushes`` (a coroutine) and check what it pushed to ``worker``."""
        worker_id = self.workers[worker]
        self.pushed, self.socket_up = [], socket_up
        assert self.run(pushes) == holds
        self._took(self.pushed, worker_id, expected, start=True)
        if socket_up:
            assert self.pusher.held(worker_id) == holds - len(self.pushed)
        else:
            self.pusher.forget_socket(f"socket-{worker}")
            assert self.pusher.held(worker_id) == 0

    def _job_names(self, worker_id: UUID) -> list[str]:
        names = {self.job_id: FIFO_JOB, self.fair_job_id: FAIR_JOB}
        return [names[job_id] for job_id in self.serves[worker_id]]

    async def _grant(self, worker: int, slots: int) -> int:
        """The grant (as the socket event makes it), once its pushes are done."""
        worker_id = self.workers[worker]
        jobs = self._job_names(worker_id)
        held = self.pusher.grant(f"socket-{worker}", worker_id, self.owner, jobs, slots)
        await self.pusher.settled()
        return held

    async def _woken(self, job: str) -> int:
        """The wake-up of a task of ``job``, once its pushes are done; what the woken
        grant held."""
        serving = [w for w in self.workers if self.pusher.held(w)]
        held = {w: self.pusher.held(w) for w in serving}
        self.pusher.wake([job])
        await self.pusher.settled()
        (worker_id,) = [w for w in serving if job in self._job_names(w)]
        return held[worker_id]

    @rule(worker=st.integers(0, 2))
    def pause_pushes(self, worker: int) -> None:
        """The worker takes its grant back: every slot not taken comes back to it."""
        worker_id = self.workers[worker]
        held = self.pusher.held(worker_id)
        assert self.run(self.pusher.pause(worker_id, f"socket-{worker}")) == held
        assert self.pusher.held(worker_id) == 0

    @precondition(lambda self: self._held_with(S.CLAIMED))
    @rule(data=st.data())
    def start(self, data: st.DataObject) -> None:
        task_id = data.draw(st.sampled_from(self._held_with(S.CLAIMED)))
        assert self._update(task_id, S.RUNNING).status == S.RUNNING
        self.model.moved(task_id, S.RUNNING)

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
            before = self.run(self._read_queue(utcnow()))[0]
            with pytest.raises(DomainError):
                self.run(
                    transitions.update_task(
                        self.db, self.owner, task_id, status=S.COMPLETED, claim_token=uuid4()
                    )
                )
            after = self.run(self._read_queue(utcnow()))[0]
            assert [(r.id, r.status, r.version) for r in after] == [
                (r.id, r.status, r.version) for r in before
            ], "a refused write changed something (or claimed)"
            return
        assert self._update(task_id, S.COMPLETED).status == S.COMPLETED
        self._release(task_id, S.COMPLETED)
        expected = self._next_claims(worker_id, batch)
        records, _, refused = self.run(
            claim.claim_next(
                self.db,
                self.owner,
                worker_id,
                batch,
                closed=frozenset(),
                lease_seconds=60,
                start=start,
            )
        )
        assert refused is None
        self._took(records, worker_id, expected, start)

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
        """Its submitter cancels it (the worker's owner could not, while it is pending)."""
        status = self.model.tasks[task_id].status
        try:
            record, _ = self.run(
                transitions.update_task(
                    self.db, self.submitter[task_id], task_id, status=S.CANCELLED
                )
            )
        except DomainError:
            assert is_terminal(status)
            return
        assert not is_terminal(status) and record.status == S.CANCELLED
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

    def _not_due_yet(self) -> list[UUID]:
        """Pending tasks submitted with a ``run_at`` an hour ahead that has not come."""
        now = utcnow()
        pending = (self.model.tasks[t] for t in self.model.with_status(S.PENDING))
        return [task.id for task in pending if not task.is_due(now)]

    @precondition(lambda self: self._not_due_yet())
    @rule(data=st.data())
    def come_due(self, data: st.DataObject) -> None:
        """A waiting task's ``run_at`` passes (it still waits: the announcer has not
        looked yet)."""
        task_id = data.draw(st.sampled_from(self._not_due_yet()))
        run_at = utcnow() - timedelta(seconds=1)
        self.run(self._move_run_at(task_id, run_at))
        self.model.came_due(task_id, run_at)

    async def _move_run_at(self, task_id: UUID, run_at: datetime) -> None:
        async with self.db.write() as conn:
            await conn.execute(
                update(task_table).where(task_table.c.id == task_id).values(run_at=run_at)
            )

    @precondition(
        lambda self: (
            self.seconds_passed < 1
            and any(self.model.queued(self.fair_job_id, priority) for priority in (0, 1))
        )
    )
    @rule()
    def a_second_passes(self) -> None:
        """The clock moves on into the next second (once a run: it takes up to a second):
        the fair job's queued turns now lie in earlier seconds than the next submits, whose
        turns a head or a share's run carries back there, into another second's count."""
        time.sleep(1.001 - utcnow().microsecond / 1_000_000)
        self.seconds_passed += 1

    @rule()
    def queue_due(self) -> None:
        """The announcer's step: the waiting tasks that are due join the claim queue."""
        now = utcnow()
        self.run(due_tasks.queue_due(self.db, now, 1000))
        self.model.queue_due(now)

    @rule()
    def sweep_expired_leases(self) -> None:
        """Every lease runs out: each active attempt is retried or fails."""
        self.run(self._expire_every_lease())
        count, _ = self.run(sweeps.end_expired_leases(self.db, utcnow(), IMMEDIATE_RETRY))
        active = self._held_with(*ACTIVE_STATUSES)
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
        if status == S.CANCELLED:
            self.model.cancelled(task_id)
        else:
            self.model.moved(task_id, status)
        worker_and_token = self.held.pop(task_id, None)
        if worker_and_token is not None:
            self.old_tokens.append((task_id, worker_and_token[1]))

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def the_database_agrees_with_the_model(self) -> None:
        now = utcnow()
        rows, counted, waiting = self.run(self._read_queue(now))
        ids = [record.id for record in rows]
        assert len(ids) == len(set(ids)) and set(ids) == set(self.model.tasks), "a task was lost"
        for record in rows:
            task = self.model.tasks[record.id]
            assert record.status == task.status
            assert record.turn_at == task.turn, "a task's turn moved"
            assert record.attempt <= record.max_attempts == self.max_attempts[record.id]
            holds_token = record.claim_token is not None
            if record.status in ACTIVE_STATUSES:
                assert holds_token and self.held[record.id][1] == record.claim_token
            elif record.status == S.PENDING:
                assert not holds_token and record.worker_id is None
        for job_id in self.job_ids:
            pending = self.model.places(job_id, now)
            of_job = [r for r in rows if r.job_id == job_id and r.status == S.PENDING]
            assert {r.id: r.queue_position for r in of_job} == pending, "positions not the model's"
            assert waiting[job_id] == self.model.waiting(job_id)
            kept = (len(pending), len(waiting[job_id]))
            assert counted[job_id] == kept, "the trigger-kept counts drifted"

    async def _read(self, task_id: UUID) -> Any:
        async with self.db.read() as conn:
            return await load_task(conn, task_id)

    async def _read_queue(
        self, now: datetime
    ) -> tuple[list[Any], dict[UUID, tuple[int, int]], dict[UUID, set[UUID]]]:
        """The jobs' tasks with their positions, the kept (pending, waiting) counts per job,
        and per job its pending tasks that still wait (due or not), read off the task rows."""
        bucket = queue_bucket_table
        of_jobs = task_table.c.job_id.in_(self.job_ids)
        async with self.db.read() as conn:
            rows = await conn.execute(SELECT_TASKS.where(of_jobs).order_by(task_table.c.id))
            records = await with_positions(conn, rows.all(), now)
            kept = await conn.execute(
                select(
                    bucket.c.job_id,
                    func.coalesce(func.sum(bucket.c.pending), 0),
                    func.coalesce(func.sum(bucket.c.waiting), 0),
                ).group_by(bucket.c.job_id)
            )
            counted = dict.fromkeys(self.job_ids, (0, 0))
            counted.update({job: (int(p), int(w)) for job, p, w in kept.all()})
            waiting_rows = select(task_table.c.job_id, task_table.c.id).where(of_jobs, is_waiting())
            waiting: dict[UUID, set[UUID]] = {job_id: set() for job_id in self.job_ids}
            for job_id, task_id in (await conn.execute(waiting_rows)).all():
                waiting[job_id].add(task_id)
            return records, counted, waiting


def test_the_queue_keeps_its_invariants(database_url: str) -> None:
    QueueMachine.url = database_url
    run = settings(
        max_examples=examples(20),
        stateful_step_count=40,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    QueueMachine.TestCase.settings = run
    QueueMachine.TestCase().runTest()
