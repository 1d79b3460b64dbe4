"""Real-time events a state change causes, collected during a request and published
only after its transaction commits (never for a rolled-back change). What each one sends
is written by ``realtime.event_payloads``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any, ClassVar
from uuid import UUID

from taskhub.rules.records import TaskRecord
from taskhub.rules.rooms import job_room, provider_room, room_room, worker_room
from taskhub.rules.states import TaskStatus, is_terminal


@dataclass(frozen=True, slots=True)
class TaskAvailable:
    """A task of ``job_name`` became claimable; sent to the job's worker room."""

    name: ClassVar[str] = "task_available"
    job_name: str
    room_id: str
    task_id: str

    @property
    def room(self) -> str:
        return job_room(self.job_name)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.name, self.room, self.task_id)

    def withheld(self) -> TaskAvailable:
        """The hint for a task of a private room: the job only (``room_id`` and
        ``task_id`` empty). A job's workers may include some whose owners may not read
        the room (an ``@global`` job's); a claim still gives each worker only the tasks
        its owner may run, so the hint needs neither."""
        return replace(self, room_id="", task_id="")


@dataclass(frozen=True, slots=True)
class TaskStatusChanged:
    """A task moved (or reported progress); sent to the room it was submitted into."""

    name: ClassVar[str] = "task_status_event"
    task: TaskRecord
    # The status before this change: None for a new task, the same status for progress.
    previous: TaskStatus | None = None

    @property
    def room(self) -> str:
        return room_room(self.task.room_id)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.name, self.room, str(self.task.id))

    @property
    def is_terminal(self) -> bool:
        return is_terminal(self.task.status)


@dataclass(frozen=True, slots=True)
class JobsInvalidate:
    """The job list or worker count of ``room_id`` changed."""

    name: ClassVar[str] = "jobs_invalidate"
    room_id: str

    @property
    def room(self) -> str:
        return room_room(self.room_id)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.name, self.room, "")


@dataclass(frozen=True, slots=True)
class TaskCancelled:
    """A claimed or running task was cancelled; tells the worker running it to stop."""

    name: ClassVar[str] = "task_cancelled"
    task_id: str
    job_name: str
    worker_id: str

    @property
    def room(self) -> str:
        return worker_room(self.worker_id)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.name, self.room, self.task_id)


@dataclass(frozen=True, slots=True)
class TaskLogged:
    """Log lines a run of a task sent (one POST's, stored); sent to the task's room."""

    name: ClassVar[str] = "task_log"
    task_id: str
    room_id: str
    lines: tuple[dict[str, Any], ...]

    @property
    def room(self) -> str:
        return room_room(self.room_id)

    @property
    def key(self) -> tuple[str, str, str]:
        first = self.lines[0]["id"] if self.lines else ""
        return (self.name, self.room, f"{self.task_id}:{first}")


@dataclass(frozen=True, slots=True)
class ProvidersInvalidate:
    """The provider list of ``room_id`` changed (a registration, an update, a removal)."""

    name: ClassVar[str] = "providers_invalidate"
    room_id: str

    @property
    def room(self) -> str:
        return room_room(self.room_id)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.name, self.room, "")


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    """A read no result answers yet: sent to the sockets that joined as the provider, its
    Socket.IO room ``providers:{provider_id}`` (by id: a provider registered again under
    the same name after its removal is another one, whose reads the old sockets never get).
    ``params``: the read's parameters as canonical JSON text (``rules.providers``)."""

    name: ClassVar[str] = "provider_request"
    request_id: str
    provider_name: str
    params: str
    provider_id: str

    @property
    def room(self) -> str:
        return provider_room(self.provider_id)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.name, self.room, self.request_id)


@dataclass(frozen=True, slots=True)
class ProviderResultReady:
    """A provider's result for ``request_hash`` is cached; sent to the provider's room."""

    name: ClassVar[str] = "provider_result_ready"
    provider_name: str
    request_hash: str
    room_id: str

    @property
    def room(self) -> str:
        return room_room(self.room_id)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.name, self.room, f"{self.provider_name}:{self.request_hash}")


@dataclass(frozen=True, slots=True)
class WorkerRemoved:
    """The hub removed a worker, and with it the links to its jobs and its providers (full
    names). Not sent on Socket.IO (``jobs_invalidate`` and ``providers_invalidate`` tell
    the rooms): for the process's own listeners, such as a host application's."""

    name: ClassVar[str] = "worker_removed"
    sent_to_sockets: ClassVar[bool] = False
    worker_id: UUID
    jobs: tuple[str, ...]
    providers: tuple[str, ...]

    @property
    def room(self) -> str:
        return worker_room(self.worker_id)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.name, self.room, "")


Event = (
    TaskAvailable
    | TaskStatusChanged
    | JobsInvalidate
    | TaskCancelled
    | TaskLogged
    | ProvidersInvalidate
    | ProviderRequest
    | ProviderResultReady
    | WorkerRemoved
)


class EventBatch:
    """Events of one unit of work, de-duplicated per (event, room, subject).

    A later event for the same key replaces the earlier one (the newest task state wins)
    but keeps its original position.
    """

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: dict[tuple[str, str, str], Event] = {}

    def add(self, event: Event) -> None:
        self._events[event.key] = event

    def extend(self, events: EventBatch) -> None:
        for event in events:
            self.add(event)

    def __iter__(self) -> Iterator[Event]:
        return iter(list(self._events.values()))

    def __len__(self) -> int:
        return len(self._events)
