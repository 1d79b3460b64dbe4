"""Domain errors. Each maps to one RFC 9457 problem type (``/v1/problems/<slug>``).

These classes are the one table of problem slugs: the HTTP framework's own error statuses
(400, 404, 405, ...) are answered with the slug and title of the error of that status here
(``transport/http/problems.py``), the base class's being ``internal-error``."""

from __future__ import annotations

from typing import Any


class DomainError(Exception):
    """An expected refusal: the request is wrong or conflicts with the current state."""

    # The problem's type, title and status: each class's own (a ``RoomRefused`` carries
    # those its policy chose).
    slug: str = "internal-error"
    title: str = "Internal Server Error"
    status: int = 500
    # Seconds after which the same request may succeed (``Retry-After``), if that is known:
    # a class's constant, or one refusal's own (``retry_after=`` when raised).
    retry_after: int | None = None

    def __init__(
        self,
        detail: str,
        *,
        errors: list[dict[str, Any]] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = errors
        if retry_after is not None:
            self.retry_after = retry_after


class BadRequest(DomainError):
    """The framework's 400: a request it rejected before any handler (never raised here)."""

    slug, title, status = "bad-request", "Bad Request", 400


class InvalidRoomId(DomainError):
    slug, title, status = "invalid-room-id", "Invalid room id", 400


class InvalidCategory(DomainError):
    slug, title, status = "invalid-category", "Invalid category", 400


class Unauthorized(DomainError):
    slug, title, status = "unauthorized", "Unauthorized", 401


class Forbidden(DomainError):
    slug, title, status = "forbidden", "Forbidden", 403


class NotFound(DomainError):
    slug, title, status = "not-found", "Not Found", 404


class WorkerNotFound(DomainError):
    slug, title, status = "worker-not-found", "Worker not found", 404


class JobNotFound(DomainError):
    slug, title, status = "job-not-found", "Job not found", 404


class TaskNotFound(DomainError):
    slug, title, status = "task-not-found", "Task not found", 404


class MethodNotAllowed(DomainError):
    """The framework's 405: the path exists with other methods (never raised here)."""

    slug, title, status = "method-not-allowed", "Method Not Allowed", 405


class SchemaConflict(DomainError):
    slug, title, status = "schema-conflict", "Schema conflict", 409


class InvalidTaskTransition(DomainError):
    slug, title, status = "invalid-task-transition", "Invalid task transition", 409


class TaskNotRerunnable(DomainError):
    """A re-run asked of a task that is not ``failed`` or ``cancelled``."""

    slug, title, status = "task-not-rerunnable", "Task not rerunnable", 409


class WorkerNotJoined(DomainError):
    """A socket event about a worker that has not joined a job room through that socket."""

    slug, title, status = "worker-not-joined", "Worker not joined", 409


class StaleClaim(DomainError):
    slug, title, status = "stale-claim", "Stale claim", 409


class PayloadTooLarge(DomainError):
    slug, title, status = "payload-too-large", "Payload Too Large", 413


class ValidationFailed(DomainError):
    slug, title, status = "validation-error", "Validation error", 422


class TooManyTasks(DomainError):
    """A bulk action over more tasks than one call may change: nothing was changed."""

    slug, title, status = "too-many-tasks", "Too many tasks", 422


class IdempotencyKeyReused(DomainError):
    """A submit repeated an ``Idempotency-Key`` with another request than the one that
    created the task (IETF ``Idempotency-Key`` draft: 422)."""

    slug, title, status = "idempotency-key-reused", "Idempotency key reused", 422


class InternalJobNotConfigured(DomainError):
    slug, title, status = "internal-job-not-configured", "Internal job not configured", 503


class ServiceUnavailable(DomainError):
    slug, title, status = "service-unavailable", "Service Unavailable", 503


class SocketGone(DomainError):
    """The socket an event came from disconnected while the event was handled."""

    slug, title, status = "socket-disconnected", "Conflict", 409


class TooManyRooms(DomainError):
    """A socket is in as many rooms as it may be (``MAX_ROOMS_PER_SOCKET``)."""

    slug, title, status = "too-many-rooms", "Too Many Rooms", 429


class TooManySockets(DomainError):
    """A user holds ``TASKHUB_USER_MAX_SOCKETS`` connected sockets in this process."""

    slug, title, status = "too-many-sockets", "Too Many Sockets", 429


class IdentityUnavailable(DomainError):
    """A source of identity could not tell who the caller is now (a host's hook raised, an
    identity provider's keys could not be read); nothing was done."""

    slug, title, status = "identity-unavailable", "Identity Unavailable", 503
    retry_after = 5


class RoomPolicyUnavailable(DomainError):
    """The room policy (a host's hook) could not decide; nothing was done."""

    slug, title, status = "room-policy-unavailable", "Room Policy Unavailable", 503
    retry_after = 5


class RoomRefused(DomainError):
    """A room policy's refusal, with the problem it chose: for instance 423 ``room-locked``
    with the host's detail, or 404 for a room the host does not know."""

    def __init__(self, status: int, slug: str, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.slug, self.title = status, slug, title


class ValidationBusy(DomainError):
    """Too many costly payloads are being validated in this process already (see
    ``payload_checks.py``); the request changed nothing."""

    slug, title, status = "validation-busy", "Service Unavailable", 503
    retry_after = 1


class SubmitRateExceeded(DomainError):
    """A user submitted faster than ``TASKHUB_USER_SUBMIT_RATE`` allows past its burst
    (``rules.user_limits``); nothing was stored. ``retry_after``: when a token is back."""

    slug, title, status = "submit-rate-exceeded", "Too Many Requests", 429
    retry_after = 1


class TooManyPendingTasks(DomainError):
    """The user has ``TASKHUB_USER_MAX_PENDING_TASKS`` unfinished tasks already; nothing
    was stored."""

    slug, title, status = "too-many-pending-tasks", "Too Many Requests", 429
    retry_after = 10


class StorageQuotaExceeded(DomainError):
    """The user's tasks keep ``TASKHUB_USER_MAX_STORED_BYTES`` of payloads, results and
    logs already; nothing was stored (bytes come back as old tasks are purged)."""

    slug, title, status = "storage-quota-exceeded", "Too Many Requests", 429
    retry_after = 600


class NoWorkersAvailable(DomainError):
    """A submit to a job no live worker serves, refused (``TASKHUB_SUBMIT_REQUIRES_LIVE_WORKER``);
    nothing was stored."""

    slug, title, status = "no-workers-available", "No workers available", 409
