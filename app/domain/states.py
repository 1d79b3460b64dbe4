"""The task state machine: statuses, the transition matrix, and who may cause what."""

from __future__ import annotations

from enum import StrEnum

from app.domain.errors import InvalidTaskTransition


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


_PREDECESSORS = {
    target: frozenset(s for s, targets in TRANSITIONS.items() if target in targets)
    for target in TaskStatus
}
