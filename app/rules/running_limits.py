"""How many of a job's tasks may be claimed or running at once, per submitter and per room.

A job may set ``max_running_per_submitter`` and ``max_running_per_room`` (each 1..
``MAX_RUNNING_LIMIT``, or none). A claim then skips a pending task whose submitter, or room,
already has that many tasks of the job claimed or running; the task keeps its place and is
handed out once one of them ends. The claim statement itself counts them (SQLite's writer
is one at a time); on PostgreSQL a trigger re-counts under a per-job lock after the claim
wrote, and refuses a claim that raced another past a limit (the claim is then made again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MAX_RUNNING_LIMIT = 10_000
# PostgreSQL: the SQLSTATE of the trigger's refusal (``store.queue_counts``).
LIMIT_RACE_SQLSTATE = "TH001"


@dataclass(frozen=True, slots=True)
class RunningLimits:
    per_submitter: int | None = None
    per_room: int | None = None

    @property
    def any(self) -> bool:
        return self.per_submitter is not None or self.per_room is not None


@dataclass(frozen=True, slots=True)
class HeldBack:
    """Why a pending task of a limited job is not handed out now: ``scope``'s tasks of the
    job already running (claimed or running) reached ``limit``."""

    scope: Literal["submitter", "room"]
    running: int
    limit: int


def held_back(limits: RunningLimits, by_submitter: int, by_room: int) -> HeldBack | None:
    """The limit that holds a pending task back, given how many tasks of its job its
    submitter and its room have running (None: none does)."""
    if limits.per_submitter is not None and by_submitter >= limits.per_submitter:
        return HeldBack("submitter", by_submitter, limits.per_submitter)
    if limits.per_room is not None and by_room >= limits.per_room:
        return HeldBack("room", by_room, limits.per_room)
    return None
