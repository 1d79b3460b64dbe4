"""The task state machine: statuses, the transition matrix, and who may cause what."""

from __future__ import annotations

from enum import StrEnum

from taskhub.rules.errors import InvalidTaskTransition


class TaskStatus(StrEnum):
    PENDING = "pending"
    CLAIMED = "claimed"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_STATUSES = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})
ACTIVE_STATUSES = frozenset({TaskStatus.CLAIMED, TaskStatus.RUNNING})

TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.PENDING: frozenset({TaskStatus.CLAIMED, TaskStatus.CANCELLED}),
    TaskStatus.CLAIMED: frozenset({TaskStatus.RUNNING, TaskStatus.FAILED, TaskStatus.CANCELLED}),
    TaskStatus.RUNNING: frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}),
    TaskStatus.COMPLETED: frozenset(),
    TaskStatus.FAILED: frozenset(),
    TaskStatus.CANCELLED: frozenset(),
}


# Not reachable by PATCH ``status``: an attempt that ends with attempts left (a failure
# with ``retry``, a vanished worker, an expired lease) sends the task back to the queue.
RETRY_TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.CLAIMED: frozenset({TaskStatus.PENDING}),
    TaskStatus.RUNNING: frozenset({TaskStatus.PENDING}),
}


def is_terminal(status: TaskStatus) -> bool:
    return status in TERMINAL_STATUSES


def check_transition(current: TaskStatus, target: TaskStatus) -> None:
    """Raise ``InvalidTaskTransition`` unless ``current -> target`` is in the matrix."""
    if target not in TRANSITIONS[current]:
        raise InvalidTaskTransition(
            f"Cannot move a task from {current.value!r} to {target.value!r}."
        )


def predecessors(target: TaskStatus) -> frozenset[TaskStatus]:
    """The statuses from which ``target`` may be reached."""
    return _PREDECESSORS[target]


def patch_predecessors(target: TaskStatus) -> frozenset[TaskStatus]:
    """The statuses from which a PATCH may move a task to ``target``: the matrix's, except
    that only a claim enters ``claimed`` (it gives the task a worker, a claim token and an
    attempt)."""
    return frozenset() if target == TaskStatus.CLAIMED else _PREDECESSORS[target]


def check_patch_transition(current: TaskStatus, target: TaskStatus) -> None:
    """``check_transition`` for a PATCH, which may not move a task to ``claimed``."""
    if target == TaskStatus.CLAIMED:
        raise InvalidTaskTransition(
            "Only a claim (POST /tasks/claim) moves a task to 'claimed', not a PATCH."
        )
    check_transition(current, target)


_PREDECESSORS = {
    target: frozenset(s for s, targets in TRANSITIONS.items() if target in targets)
    for target in TaskStatus
}


def previous_status(
    status: TaskStatus, *, started: bool, claimed: bool, retried: bool = False
) -> TaskStatus:
    """The status a task had just before it entered ``status``, read off the row it left.

    Exact because a claim clears ``started_at`` (so a started attempt is one that ran) and
    only a claim sets ``worker_id`` (a retry clears it again): ``claimed`` means a worker
    holds (or held, until this change) the task, ``retried`` marks an attempt that ended
    by going back to pending.
    """
    if status == TaskStatus.CLAIMED:
        return TaskStatus.PENDING
    if status == TaskStatus.RUNNING:
        return TaskStatus.CLAIMED
    if status == TaskStatus.COMPLETED:
        return TaskStatus.RUNNING
    if status == TaskStatus.CANCELLED and not claimed:
        return TaskStatus.PENDING
    if status == TaskStatus.PENDING and not retried:
        raise ValueError("a task enters pending only when it is submitted or retried")
    return TaskStatus.RUNNING if started else TaskStatus.CLAIMED
