"""Exceptions raised by the Taskhub SDK."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from taskhub.sdk.models import Task


class TaskhubError(Exception):
    """Base class of every SDK error."""


class HubUnavailable(TaskhubError):
    """The hub could not be reached, or kept failing, within the retry budget.
    ``status``: the HTTP status of its last answer, None if it did not answer."""

    status: int | None = None


class ProblemError(TaskhubError):
    """The hub refused a request with an RFC 9457 problem document."""

    def __init__(self, status: int, problem: dict[str, Any]) -> None:
        self.status = status
        self.type = str(problem.get("type") or f"/v1/problems/http-{status}")
        self.title = str(problem.get("title") or "")
        self.detail = str(problem.get("detail") or "")
        self.errors: list[dict[str, Any]] = list(problem.get("errors") or [])
        self.retried = False  # set when the refusal answered a retry of the request
        text = f"{status} {self.title or self.slug}: {self.detail}".rstrip(": ")
        details = _short_errors(self.errors)
        super().__init__(f"{text} ({details})" if details else text)

    @property
    def slug(self) -> str:
        """The problem's kebab-case name, e.g. ``stale-claim``."""
        return self.type.rsplit("/", 1)[-1]


MAX_ERRORS_SHOWN = 3


def _short_errors(errors: list[Any]) -> str:
    """``loc: msg`` of the first few entries of a problem's ``errors`` (e.g. which field
    failed validation), ``; ``-separated."""
    parts = []
    for error in errors[:MAX_ERRORS_SHOWN]:
        if not isinstance(error, dict):
            parts.append(str(error))
            continue
        loc = error.get("loc")
        where = ".".join(str(part) for part in loc) if isinstance(loc, list) else str(loc or "")
        message = str(error.get("msg") or "")
        parts.append(f"{where}: {message}" if where and message else where or message)
    if len(errors) > MAX_ERRORS_SHOWN:
        parts.append(f"{len(errors) - MAX_ERRORS_SHOWN} more")
    return "; ".join(part for part in parts if part)


class AuthError(ProblemError):
    """401 (bad or missing token) or 403 (the token may not do this)."""


class NotFound(ProblemError):
    """404: the worker, job or task does not exist (any more)."""


class WorkerNotFound(NotFound):
    """404 ``worker-not-found``: the hub no longer knows this worker (e.g. the sweeper
    removed it after a long partition). Any other 404 — a proxy's, say — is not this."""


class Conflict(ProblemError):
    """409: the request conflicts with the current state."""


class StaleClaim(Conflict):
    """409 ``stale-claim``: the task was claimed again since; this claim is void."""


class InvalidTransition(Conflict):
    """409 ``invalid-task-transition``: e.g. the task was cancelled meanwhile."""


class TaskFailed(TaskhubError):
    """The awaited task ended FAILED; ``task.error`` says why."""

    def __init__(self, task: Task) -> None:
        self.task = task
        super().__init__(f"Task {task.id} failed: {task.error}")


class RetryLater(TaskhubError):
    """Raise inside a run to fail this attempt but ask for another: the hub puts the task
    back in the queue (after its backoff) while it has attempts left (``max_attempts``),
    and fails it otherwise."""


class TaskCancelled(TaskhubError):
    """The task was cancelled: raised to a submitter waiting for its result, and inside a
    run by ``ctx.raise_if_cancelled()`` (the worker then drops the run's outcome)."""

    def __init__(self, task_id: str, task: Task | None = None) -> None:
        self.task_id = task_id
        self.task = task
        super().__init__(f"Task {task_id} was cancelled")


_BY_STATUS: dict[int, type[ProblemError]] = {401: AuthError, 403: AuthError, 404: NotFound}
_BY_SLUG: dict[str, type[ProblemError]] = {
    "stale-claim": StaleClaim,
    "invalid-task-transition": InvalidTransition,
    "worker-not-found": WorkerNotFound,
}


def problem_error(status: int, problem: dict[str, Any]) -> ProblemError:
    """The most specific exception for a problem document."""
    slug = str(problem.get("type") or "").rsplit("/", 1)[-1]
    cls = _BY_SLUG.get(slug) or _BY_STATUS.get(status)
    if cls is None:
        cls = Conflict if status == 409 else ProblemError
    return cls(status, problem)
