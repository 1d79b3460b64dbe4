"""A job's claim order, and a task's turn in its job's queue.

A FIFO job hands out its tasks oldest first (within a priority). A fair job hands them out
round-robin over shares, oldest first within each share: the submitters of a room's job
(``fair-by-submitter``), or the rooms of a job many rooms share, such as an ``@global`` one
(``fair-by-room``). This is start-time fair queueing: every task gets a turn when it enters
the queue, and claims take the lowest turn first (within a priority, ties by id, which is
time-ordered). In a FIFO job a task's turn is its ``created_at``. In a fair job
(``next_turn``):

- a share with tasks queued at that priority continues ``TURN_STEP`` after its last one;
- a share with none queued (a newcomer, or one whose tasks were all handed out) takes the
  turn at the head of the queue: it is served right after the tasks holding that turn,
  one per share, never behind another share's backlog;
- with nothing queued at that priority, the turn is ``created_at``.

A task that comes back into the queue (a retry, a delayed task come due) takes the head's
turn if its own is earlier (``store.turns.requeued_turn``): it is served next (several of
one share that come back together, one after another), and the tasks its share submits
after it do not follow on from an old turn, ahead of every other share's. Otherwise, while
shares are all backlogged, none gets more than two tasks more than another (one for the
round a share joins in, at the head's turn another share may already have been served
at; one as equal turns go by age); a task cancelled in the middle of its share's run of
turns leaves a gap there, and the other shares go ahead by as many. Submits of one
share that run at the same moment may read the same last turn and so take the same one: a
newcomer then waits behind as many of that share's tasks as it had submits in flight
(measured: up to 4 with 4 connections), not one.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from uuid import UUID

# How far apart a share's consecutive turns are. Turns order tasks only among their own
# job's, except where a worker serves several jobs: there a fair job's backlog counts as
# submitted at this pace, one task per millisecond.
TURN_STEP = timedelta(milliseconds=1)


class ClaimOrder(enum.StrEnum):
    """The order a job's pending tasks are handed out in, within a priority."""

    FIFO = "fifo"
    FAIR_BY_SUBMITTER = "fair-by-submitter"
    FAIR_BY_ROOM = "fair-by-room"

    @property
    def is_fair(self) -> bool:
        return self is not ClaimOrder.FIFO


def share_key(order: ClaimOrder, submitted_by: UUID | None, room_id: str) -> str | None:
    """Whose share a task of a job with ``order`` counts in (None in a FIFO job)."""
    if order is ClaimOrder.FAIR_BY_SUBMITTER:
        return str(submitted_by) if submitted_by is not None else ""
    if order is ClaimOrder.FAIR_BY_ROOM:
        return room_id
    return None


class SubmitterClass(enum.StrEnum):
    """How a fair job's task's submitter (its share) stood when the task was submitted:
    ``backlogged`` if it had tasks of the job queued at that priority already (the task
    followed on from its last), else ``occasional`` (it joined at the head). A FIFO job's
    tasks are not classed: ``unclassed``."""

    OCCASIONAL = "occasional"
    BACKLOGGED = "backlogged"
    UNCLASSED = "unclassed"

    @classmethod
    def of(cls, share_key: str | None, backlogged: bool) -> SubmitterClass:
        if share_key is None:
            return cls.UNCLASSED
        return cls.BACKLOGGED if backlogged else cls.OCCASIONAL


def next_turn(created_at: datetime, head: datetime | None, last: datetime | None) -> datetime:
    """The turn of a fair job's task entering the queue at ``created_at``, given the turn at
    the head of its priority's queue (``head``, None if none is queued) and the last turn
    its share holds there (``last``, None if it holds none)."""
    turns = [turn for turn in (head, None if last is None else last + TURN_STEP) if turn]
    return max(turns) if turns else created_at
