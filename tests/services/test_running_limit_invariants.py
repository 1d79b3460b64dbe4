"""A Hypothesis state machine over the real service layer (SQLite and PostgreSQL) for a job
with running limits (``rules.running_limits``): at most 2 of its tasks claimed or running
at once per submitter, at most 3 in its room. Three users submit; two workers claim
batches, one by one or many at once (all of them at the same time on PostgreSQL), and
finish tasks, fail them with a retry, or cancel them. After every step:

- no submitter ever has more than 2 tasks running, the room never more than 3;
- a claim takes exactly what the model says: the queue in order (FIFO, retries at their
  old place), skipping each task whose submitter or room is full, and no more of a
  submitter's or the room's tasks than they have room for — never nothing while some task
  fits;
- no acknowledged task is lost: every task is pending, active or ended as the model has it.
"""

from __future__ import annotations

import asyncio
from typing import Any
from uuid import UUID

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule
from sqlalchemy import select

from taskhub.rules.records import Principal
from taskhub.rules.retries import RetryPolicy
from taskhub.rules.states import ACTIVE_STATUSES, TaskStatus
from taskhub.services import claim, submit, transitions
from taskhub.services.jobs import register_job
from taskhub.services.users import create_user
from taskhub.store.tables import task_table
from tests.support.machines import NoExecutors, ServiceMachine
from tests.support.properties import examples

S = TaskStatus
JOB = "room1:modifiers:Limited"
PER_SUBMITTER, PER_ROOM = 2, 3
IMMEDIATE_RETRY = RetryPolicy(base_seconds=0, jitter=0)


class LimitMachine(ServiceMachine):
    def __init__(self) -> None:
        super().__init__()
        self.queue: list[UUID] = []  # pending, in claim order
        self.created_at: dict[UUID, Any] = {}  # a FIFO job's turn
        self.active: dict[UUID, UUID] = {}  # task -> claim token
        self.ended: set[UUID] = set()
        self.submitter: dict[UUID, Principal] = {}
        self.attempts_left: dict[UUID, int] = {}
        self.run(self._set_up())

    async def _set_up(self) -> None:
        self.users = []
        for name in ("owner", "alice", "bob"):
            user_id, _ = await create_user(self.db, name)
            self.users.append(Principal(id=user_id, name=name, is_superuser=False))
        self.workers = []
        for _ in range(2):  # two workers (each registration without one makes one)
            registration, _ = await register_job(
                self.db,
                self.users[0],
                "room1",
                category="modifiers",
                name="Limited",
                schema={},
                worker_id=None,
                allowed_categories=["modifiers"],
                max_running_per_submitter=PER_SUBMITTER,
                max_running_per_room=PER_ROOM,
            )
            self.workers.append(registration.worker_id)

    # -- the model -----------------------------------------------------------------------

    def _room(self, busy: list[UUID], task_id: UUID) -> tuple[int, int]:
        """How many more tasks the task's submitter and the room may run, ``busy`` running."""
        mine = sum(1 for t in busy if self.submitter[t] == self.submitter[task_id])
        return PER_SUBMITTER - mine, PER_ROOM - len(busy)

    def _next_claims(self, batch: int) -> list[UUID]:
        """What a claim of ``batch`` takes: the first ``batch`` queued tasks that fit one by
        one, then of those only as many of a submitter's (and of the room's) as they have
        room for, in order."""
        busy = list(self.active)
        candidates = [t for t in self.queue if min(self._room(busy, t)) > 0][:batch]
        taken: list[UUID] = []
        for task_id in candidates:
            if min(self._room(busy + taken, task_id)) > 0:
                taken.append(task_id)
        return taken

    # -- rules ---------------------------------------------------------------------------

    @rule(user=st.integers(0, 2), count=st.integers(1, 4), attempts=st.sampled_from([1, 2]))
    def submit(self, user: int, count: int, attempts: int) -> None:
        for _ in range(count):
            record, _, created = self.run(
                submit.submit_task(
                    self.db,
                    self.users[user],
                    "room1",
                    JOB,
                    {},
                    NoExecutors(),
                    options=submit.SubmitOptions(max_attempts=attempts),
                )
            )
            assert created
            self.queue.append(record.id)
            self.created_at[record.id] = record.created_at
            self.submitter[record.id] = self.users[user]
            self.attempts_left[record.id] = attempts

    @rule(worker=st.integers(0, 1), batch=st.integers(1, 5))
    def claim(self, worker: int, batch: int) -> None:
        expected = self._next_claims(batch)
        records, _ = self.run(
            claim.claim_tasks(
                self.db,
                self.users[0],
                self.workers[worker],
                batch,
                closed=frozenset(),
                lease_seconds=60,
                start=True,
            )
        )
        assert sorted(r.id for r in records) == sorted(expected), "not the model's claim"
        for record in records:
            self.queue.remove(record.id)
            self.active[record.id] = record.claim_token

    @precondition(lambda self: self.queue)
    @rule(claimers=st.integers(2, 8))
    def claim_at_once(self, claimers: int) -> None:
        """Several claims of one task each, concurrently (racing on PostgreSQL): together at
        most what as many claims one after another would take."""
        expected: list[UUID] = []
        for _ in range(claimers):
            busy = list(self.active) + expected
            fitting = [t for t in self.queue if t not in expected]
            fitting = [t for t in fitting if min(self._room(busy, t)) > 0]
            expected += fitting[:1]

        async def claims() -> list[Any]:
            return await asyncio.gather(
                *(
                    claim.claim_tasks(
                        self.db,
                        self.users[0],
                        self.workers[n % 2],
                        1,
                        closed=frozenset(),
                        lease_seconds=60,
                        start=True,
                    )
                    for n in range(claimers)
                )
            )

        got = [record for records, _ in self.run(claims()) for record in records]
        assert len(got) == len({r.id for r in got}), "a task handed out twice"
        # Racing claims may leave some behind (one that raced every time answers nothing),
        # but never take more, nor nothing while a task fits; the limits hold (invariant).
        assert len(got) <= len(expected) and bool(got) == bool(expected)
        for record in got:
            assert record.id in self.queue
            self.queue.remove(record.id)
            self.active[record.id] = record.claim_token

    @precondition(lambda self: self.active)
    @rule(which=st.integers(0, 100), outcome=st.sampled_from(["completed", "retry", "cancel"]))
    def finish(self, which: int, outcome: str) -> None:
        task_id = sorted(self.active)[which % len(self.active)]
        token = self.active.pop(task_id)
        if outcome == "cancel":
            self.run(
                transitions.update_task(
                    self.db, self.submitter[task_id], task_id, status=S.CANCELLED
                )
            )
            self.ended.add(task_id)
            return
        retry = outcome == "retry" and self.attempts_left[task_id] > 1
        status = S.FAILED if outcome == "retry" else S.COMPLETED
        record, _ = self.run(
            transitions.update_task(
                self.db,
                self.users[0],
                task_id,
                status=status,
                claim_token=token,
                retry=retry,
                retry_policy=IMMEDIATE_RETRY,
            )
        )
        self.attempts_left[task_id] -= 1
        if retry:
            assert record.status == S.PENDING
            # Back in the queue at its old place: before every task submitted after it.
            self.queue.append(task_id)
            self.queue.sort(key=lambda t: (self.created_at[t], t))
        else:
            self.ended.add(task_id)

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def limits_hold_and_nothing_is_lost(self) -> None:
        async def read() -> list[Any]:
            async with self.db.read() as conn:
                rows = await conn.execute(select(task_table.c.id, task_table.c.status))
                return list(rows.all())

        rows = self.run(read())
        active = [row.id for row in rows if S(row.status) in ACTIVE_STATUSES]
        assert set(active) == set(self.active)
        assert {row.id for row in rows if row.status == S.PENDING.value} == set(self.queue)
        assert len(rows) == len(self.queue) + len(self.active) + len(self.ended)
        per_submitter: dict[UUID, int] = {}
        for task_id in active:
            user = self.submitter[task_id].id
            per_submitter[user] = per_submitter.get(user, 0) + 1
        assert max(per_submitter.values(), default=0) <= PER_SUBMITTER
        assert len(active) <= PER_ROOM


def test_running_limits_hold(database_url: str) -> None:
    LimitMachine.url = database_url
    LimitMachine.TestCase.settings = settings(
        max_examples=examples(15),
        stateful_step_count=30,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
    LimitMachine.TestCase().runTest()
