"""Which of a room's tasks a listing or a bulk action covers: one value object, read from
query parameters or a bulk body, turned into SQL by ``app/store/task_search.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args
from uuid import UUID

from taskhub.rules.errors import InvalidRoomId, JobNotFound, ValidationFailed
from taskhub.rules.naming import JobName
from taskhub.rules.states import TaskStatus

MAX_QUERY_CHARS = 200
# Orders a listing may ask for (``-`` descending); ``-created_at`` is the default (newest
# first, the order listings always had).
Sort = Literal[
    "created_at",
    "-created_at",
    "started_at",
    "-started_at",
    "completed_at",
    "-completed_at",
    "status",
    "-status",
]
SORTS: tuple[str, ...] = get_args(Sort)
DEFAULT_SORT: Sort = "-created_at"


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """Tasks of a room matching every given field (None / empty: any).

    ``statuses``: any of them; ``job``: the job's full name (soft-deleted jobs too: their
    tasks stay); ``submitted_by`` / ``worker_id``: exact ids; ``q``: a case-insensitive
    substring of the task's error or payload text, taken literally (no wildcards)."""

    statuses: tuple[TaskStatus, ...] = ()
    job: JobName | None = None
    submitted_by: UUID | None = None
    worker_id: UUID | None = None
    q: str | None = None

    @property
    def is_plain(self) -> bool:
        """Whether at most one status narrows it (what listings did before filters)."""
        return (
            len(self.statuses) <= 1
            and self.job is None
            and self.submitted_by is None
            and self.worker_id is None
            and self.q is None
        )


def parse_statuses(value: str | None, where: list[str]) -> tuple[TaskStatus, ...]:
    """``failed`` or ``failed,cancelled``: each a task status, else 422."""
    if value is None:
        return ()
    found: list[TaskStatus] = []
    for part in value.split(","):
        try:
            status = TaskStatus(part.strip())
        except ValueError:
            allowed = ", ".join(status.value for status in TaskStatus)
            raise ValidationFailed(
                f"status must be one or more of {allowed}, separated by commas.",
                errors=[{"loc": where, "msg": f"unknown status {part[:40]!r}"}],
            ) from None
        if status not in found:
            found.append(status)
    return tuple(found)


def parse_job(value: str | None, where: list[str]) -> JobName | None:
    """A job's full name (``room:category:name``), else 422."""
    if value is None:
        return None
    try:
        return JobName.parse(value)
    except (JobNotFound, InvalidRoomId):  # malformed: here a bad parameter, not a 404
        raise ValidationFailed(
            "job must be a job's full name, room:category:name.",
            errors=[{"loc": where, "msg": "not a job full name"}],
        ) from None


def parse_query_text(value: str | None, where: list[str]) -> str | None:
    """1 to ``MAX_QUERY_CHARS`` characters, else 422."""
    if value is None:
        return None
    if not 0 < len(value) <= MAX_QUERY_CHARS:
        raise ValidationFailed(
            f"q must be 1 to {MAX_QUERY_CHARS} characters.",
            errors=[{"loc": where, "msg": f"length must be 1..{MAX_QUERY_CHARS}"}],
        )
    if "\x00" in value:
        raise ValidationFailed(
            "q must not contain NUL characters.",
            errors=[{"loc": where, "msg": "NUL characters are not allowed"}],
        )
    return value


def like_pattern(text: str) -> str:
    """A ``LIKE … ESCAPE '\\'`` pattern matching ``text`` anywhere, its own ``%``, ``_``
    and ``\\`` taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
