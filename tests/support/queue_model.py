"""A model of the claim queue, for the state machine of
``tests/services/test_queue_invariants.py``: its jobs' tasks as the machine had them
acknowledged, and from the model's own state alone the turn each task must hold, the tasks
a claim must take and the places queue positions must give. The one rule it takes from the
hub is ``rules.fair_share.next_turn``; the turn's inputs (the head of the queue, a share's
last turn) come from the model, so the hub's queries of them are checked, not repeated.

The documented order (``rules/fair_share.py``, ``store/queue_positions.py``):

- a task's turn: its ``created_at`` in a FIFO job; in a fair job ``next_turn(created_at,
  head, last)``, where ``head`` is the lowest turn queued in the job at the task's priority
  and ``last`` the highest its share (its submitter) holds there. Queued means pending and
  not waiting: a delayed task waits until the announcer queues it; a retried one, due at
  once, is queued again; either keeps its turn unless the head of the tasks that came
  straight in (never scheduled) has moved past it, and then takes that head's;
- a claim takes the queued tasks of the worker's jobs first, higher priority first, then by
  turn, then by id; then, if that was short, the waiting tasks already due, in that order;
- a job's queue positions: the pending tasks due by now in claim order (a due task in its
  place whether or not it was queued yet), then the others by due time.

``Rotation`` holds a fair job to its round-robin without the model's turns at all, on the
claims alone.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from taskhub.rules.fair_share import next_turn
from taskhub.rules.states import TaskStatus

S = TaskStatus


@dataclass
class Task:
    id: UUID
    job_id: UUID
    share: str | None  # a fair job's task: its submitter's share; None in a FIFO job
    priority: int
    created_at: datetime
    turn: datetime
    run_at: datetime | None  # None: due at once
    waiting: bool  # submitted with a run_at ahead, and not queued by the announcer yet
    status: TaskStatus = S.PENDING
    # The hub holds a run_at for it: submitted with one ahead, or retried (due at once).
    scheduled: bool = False

    @property
    def queued(self) -> bool:
        return self.status == S.PENDING and not self.waiting

    def is_due(self, now: datetime) -> bool:
        return self.run_at is None or self.run_at <= now

    def claim_key(self) -> tuple[int, datetime, UUID]:
        return (-self.priority, self.turn, self.id)

    def place_key(self, now: datetime) -> tuple[object, ...]:
        """Its place in its job's queue at ``now``: the due tasks in claim order, then the
        others by due time."""
        if self.is_due(now):
            return (0, *self.claim_key())
        return (1, self.run_at, *self.claim_key())


class QueueModel:
    def __init__(self, fair_jobs: Iterable[UUID]) -> None:
        self.fair_jobs = set(fair_jobs)
        self.tasks: dict[UUID, Task] = {}
        self.rotation = Rotation()

    # -- what the hub must answer --------------------------------------------------------

    def turn_of_new(
        self, job_id: UUID, share: str | None, priority: int, created_at: datetime
    ) -> datetime:
        """The turn a task submitted now at ``created_at`` must get."""
        if job_id not in self.fair_jobs:
            return created_at
        queued = self.queued(job_id, priority)
        head = min((task.turn for task in queued), default=None)
        last = max((task.turn for task in queued if task.share == share), default=None)
        return next_turn(created_at, head, last)

    def next_claims(self, job_ids: set[UUID], batch: int, now: datetime) -> list[UUID]:
        """The ids a claim of ``batch`` by a worker of ``job_ids`` must take, in order."""
        claimable = [
            task
            for task in self.tasks.values()
            if task.job_id in job_ids and task.status == S.PENDING and task.is_due(now)
        ]
        in_order = sorted(claimable, key=lambda task: (task.waiting, *task.claim_key()))
        return [task.id for task in in_order[:batch]]

    def places(self, job_id: UUID, now: datetime) -> dict[UUID, int]:
        """The queue position each pending task of the job must have at ``now``."""
        pending = [t for t in self.tasks.values() if t.job_id == job_id and t.status == S.PENDING]
        in_order = sorted(pending, key=lambda task: task.place_key(now))
        return {task.id: place for place, task in enumerate(in_order, start=1)}

    # -- what happened to the tasks ------------------------------------------------------

    def submitted(
        self,
        task_id: UUID,
        job_id: UUID,
        share: str | None,
        priority: int,
        created_at: datetime,
        run_at: datetime | None,
    ) -> Task:
        """A task acknowledged as pending; ``run_at`` only if it was ahead (else None)."""
        turn = self.turn_of_new(job_id, share, priority, created_at)
        task = Task(task_id, job_id, share, priority, created_at, turn, run_at, run_at is not None)
        task.scheduled = run_at is not None
        self.tasks[task_id] = task
        self._queue_changed(task)
        return task

    def claimed(self, task_id: UUID, status: TaskStatus) -> None:
        """Claimed (``status`` claimed, or running for a claim-and-start)."""
        task = self.tasks[task_id]
        if task.queued and task.job_id in self.fair_jobs:
            self.rotation.served(task.job_id, task.priority, task.share)
        task.status = status
        self._queue_changed(task)

    def moved(self, task_id: UUID, status: TaskStatus) -> None:
        """An active task moves on: started, ended, or retried (pending again, due at once,
        queued with the turn it had)."""
        task = self.tasks[task_id]
        task.status = status
        if status == S.PENDING:
            task.run_at, task.waiting, task.scheduled = None, False, True
            self._back_in_the_queue(task)
        self._queue_changed(task)

    def cancelled(self, task_id: UUID) -> None:
        task = self.tasks[task_id]
        if task.queued and task.job_id in self.fair_jobs:
            own = [t.turn for t in self.queued(task.job_id, task.priority) if t.share == task.share]
            if task.turn != max(own):  # a gap in its share's run of turns
                self.rotation.broken(task.job_id, task.priority)
        task.status = S.CANCELLED
        self._queue_changed(task)

    def came_due(self, task_id: UUID, run_at: datetime) -> None:
        """Its ``run_at`` passed; it still waits, until ``queue_due``."""
        self.tasks[task_id].run_at = run_at

    def queue_due(self, until: datetime) -> None:
        """The announcer queues every waiting task due at ``until``."""
        for task in list(self.tasks.values()):
            if task.status == S.PENDING and task.waiting and task.is_due(until):
                task.waiting = False
                self._back_in_the_queue(task)
                self._queue_changed(task)

    # -- reading the model ---------------------------------------------------------------

    def queued(self, job_id: UUID, priority: int) -> list[Task]:
        return [
            task
            for task in self.tasks.values()
            if task.job_id == job_id and task.priority == priority and task.queued
        ]

    def with_status(self, *statuses: TaskStatus) -> list[UUID]:
        return sorted(task.id for task in self.tasks.values() if task.status in statuses)

    def waiting(self, job_id: UUID) -> set[UUID]:
        """The job's pending tasks that wait (due or not): out of the claim queue."""
        return {
            task.id
            for task in self.tasks.values()
            if task.job_id == job_id and task.status == S.PENDING and task.waiting
        }

    def _back_in_the_queue(self, task: Task) -> None:
        """A task enters the queue again (a retry, a delayed task come due): in a fair job
        at its old turn or, if that is earlier, at the head of the tasks of its priority
        that came straight in (never scheduled: so the tasks queued together do not see
        each other). Several that come back together take the same head turn and go one
        after another, so the round-robin check rests (``Rotation``)."""
        if task.job_id not in self.fair_jobs:
            return
        self.rotation.broken(task.job_id, task.priority)
        straight = [t.turn for t in self.queued(task.job_id, task.priority) if not t.scheduled]
        head = min(straight, default=None)
        if head is not None and head > task.turn:
            task.turn = head

    def _queue_changed(self, task: Task) -> None:
        if task.job_id in self.fair_jobs:
            queued = self.queued(task.job_id, task.priority)
            shares = {t.share for t in queued if t.share is not None}
            self.rotation.backlogged(task.job_id, task.priority, shares)


# How many tasks more than another a share of a fair job may get over the claims made while
# both had tasks queued: two, not one. One for the round under way when the later of them
# joined (it joins at the head turn, which the other may already have been served at); one
# more as equal turns go by id, that is by age, not by share in a fixed order, so within a
# round either may come first. Three submitters show it (B joins at C's head turn, after C
# was served at it; A joins at that same turn and submits more at once; C submits later):
# claims go b1 a1 c2 a2 a3 c3 ..., A three to C's one after a3.
ROUND_ROBIN_SLACK = 2


class Rotation:
    """A fair job's round-robin, checked on the claims alone: over the claims made while a
    set of shares all had tasks queued at a priority, no share of the set got more than
    ``ROUND_ROBIN_SLACK`` tasks more than another.

    Every time a share joins the backlog of a priority a window opens there: the claims
    since, counted per share backlogged then and throughout (a share that runs out leaves
    every window). Each claim of a queued task counts in the windows of its share.

    The promise rests on the turns being in step: each share's queued turns run one step
    apart from its first, and the shares' first turns lie within a step of each other.
    Three things break that, and then the check rests until that priority's queue has run empty (the
    first moment it can be sure the turns are in step again without reading them):

    - retried tasks come back at the head (or at their old turns, before it): several of
      one share, retried together, go one after another;
    - delayed tasks come due likewise;
    - a cancel inside a share's run of turns leaves a gap: the others go ahead by as many
      as were cancelled.
    """

    def __init__(self) -> None:
        self.shares: dict[tuple[UUID, int], set[str]] = {}
        self.windows: dict[tuple[UUID, int], list[Counter[str]]] = {}
        self.resting: set[tuple[UUID, int]] = set()

    def backlogged(self, job_id: UUID, priority: int, shares: set[str]) -> None:
        key = (job_id, priority)
        before = self.shares.get(key, set())
        self.shares[key] = shares
        windows = self.windows.setdefault(key, [])
        for window in windows:
            for share in before - shares:
                del window[share]
        if not shares:
            self.resting.discard(key)
        if shares - before and key not in self.resting:
            windows.append(Counter(dict.fromkeys(shares, 0)))
        windows[:] = [window for window in windows if len(window) > 1]

    def served(self, job_id: UUID, priority: int, share: str | None) -> None:
        assert share is not None
        for window in self.windows.get((job_id, priority), []):
            if share not in window:
                continue
            window[share] += 1
            most, fewest = max(window.values()), min(window.values())
            assert most - fewest <= ROUND_ROBIN_SLACK, (
                f"not round-robin at priority {priority}: {dict(window)} served while all "
                "had tasks queued"
            )

    def broken(self, job_id: UUID, priority: int) -> None:
        self.resting.add((job_id, priority))
        self.windows[(job_id, priority)] = []
