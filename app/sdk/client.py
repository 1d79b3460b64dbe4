"""Submitting tasks and waiting for their results: ``Client`` (blocking) and
``AsyncClient``. Waiting is one long-poll (``Prefer: wait=N``) at a time, never a loop
of quick reads (but for a few in the last second before a deadline, which a whole-second
wait would overshoot)::

    with Client("http://127.0.0.1:8000", token) as hub:
        task = hub.submit(Rotate(angle=45), room="lab")
        print(task.result(timeout=60))      # raises TaskFailed / TaskCancelled
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from types import TracebackType
from typing import Any

import httpx

from taskhub.sdk.errors import (
    HubUnavailable,
    InvalidTransition,
    NotFound,
    TaskCancelled,
    TaskFailed,
)
from taskhub.sdk.extension import GLOBAL_ROOM, Extension, job_identity
from taskhub.sdk.http import AsyncHub, SyncHub, segment
from taskhub.sdk.models import Task

LONG_POLL_SECONDS = 60  # the hub caps it anyway (TASKHUB_LONG_POLL_MAX_WAIT_SECONDS)
EARLY_ANSWER_PAUSE = 0.5  # a hub that answers at once without waiting is not hammered
SHORT_POLL_PAUSE = 0.25  # between plain reads in the last second before a deadline


def _submit_body(payload: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    """The submit body: the payload and whichever queue options were given
    (``priority``, ``delay_seconds``, ``run_at``, ``max_attempts``)."""
    unknown = set(options) - SUBMIT_OPTIONS
    if unknown:
        raise TypeError(f"unknown submit options: {sorted(unknown)}")
    body: dict[str, Any] = {"payload": payload}
    for key, value in options.items():
        if value is not None:
            body[key] = value.isoformat() if isinstance(value, datetime) else value
    return body


SUBMIT_OPTIONS = frozenset({"priority", "delay_seconds", "run_at", "max_attempts"})


def _candidates(
    job: Extension | str, payload: dict[str, Any] | None, room: str, job_room: str | None
) -> tuple[list[str], dict[str, Any]]:
    """Full names to try, in order, and the payload. For an Extension instance without
    ``job_room``: the room's own job if it has one, else the ``@global`` one."""
    if isinstance(job, str):
        return [job], dict(payload or {})
    if isinstance(job, type) and issubclass(job, Extension):
        raise TypeError(
            f"pass an instance of {job.__name__}, e.g. {job.__name__}(...), not the class"
        )
    if not isinstance(job, Extension):
        raise TypeError(f"expected an Extension instance or a job name, not {job!r}")
    if payload is not None:
        raise TypeError("pass either an Extension instance or a job name with a payload")
    category, name = job_identity(type(job))
    rooms = [job_room] if job_room else list(dict.fromkeys([room, GLOBAL_ROOM]))
    return [f"{r}:{category}:{name}" for r in rooms], job.model_dump(mode="json")


def _wait_seconds(deadline: float | None) -> int:
    """Whole seconds the next read may ask the hub to wait (0: a plain read). Never more
    than is left before the deadline: its last fraction of a second is read client-side."""
    if deadline is None:
        return LONG_POLL_SECONDS
    return max(0, min(LONG_POLL_SECONDS, math.floor(deadline - time.monotonic())))


def _wait_headers(seconds: int) -> dict[str, str]:
    return {"Prefer": f"wait={seconds}"} if seconds > 0 else {}


def _pause(deadline: float | None, seconds: int, response: httpx.Response) -> float:
    """Seconds to sleep before reading an unfinished task again; ``TimeoutError`` once the
    deadline has passed (so a wait ends by its deadline, and ``timeout=0`` reads once)."""
    remaining = math.inf if deadline is None else deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("the task did not finish in time")
    if seconds > 0 and _waited(response):
        return 0.0
    return min(EARLY_ANSWER_PAUSE if seconds > 0 else SHORT_POLL_PAUSE, remaining)


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _retry_budget(deadline: float | None) -> float:
    """How long a request may retry an unreachable hub: no longer than the caller waits,
    and for as long as it takes when the caller waits without a timeout."""
    return math.inf if deadline is None else max(0.0, deadline - time.monotonic())


@contextlib.contextmanager
def _deadline_over_unreachable_hub(deadline: float | None) -> Iterator[None]:
    """``TimeoutError`` (as promised) when the hub stayed unreachable until the deadline."""
    try:
        yield
    except HubUnavailable as exc:
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError("the task did not finish in time (the hub was unreachable)") from exc
        raise


def _waited(response: httpx.Response) -> bool:
    return "preference-applied" in response.headers


# A provider read's wait per request (the hub caps it: TASKHUB_PROVIDER_LONG_POLL_MAX_SECONDS)
# and the pause before asking again after a 504 (the hub's Retry-After) or an unreachable hub.
PROVIDER_WAIT_SECONDS = 30
READ_RETRY_PAUSE = 2.0


def _read_path(provider: str, room: str) -> str:
    return f"/rooms/{segment(room)}/providers/{segment(provider)}"


def _read_params(params: dict[str, Any] | None) -> dict[str, str]:
    """A read's parameters as the query string carries them (text)."""
    return {str(key): str(value) for key, value in (params or {}).items()}


def _read_wait(deadline: float | None) -> int:
    return min(_wait_seconds(deadline), PROVIDER_WAIT_SECONDS)


def _answer(response: httpx.Response) -> Any:
    """A provider's answer: decoded JSON for ``application/json``, else the bytes."""
    if response.headers.get("content-type", "").split(";")[0].strip() == "application/json":
        return response.json()
    return response.content


def _read_pause(deadline: float | None, exc: HubUnavailable) -> float:
    """Seconds before asking again after a read found no answer in time (504) or the hub
    unreachable; ``TimeoutError`` once the deadline has passed."""
    remaining = math.inf if deadline is None else deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("the provider did not answer in time") from exc
    return min(READ_RETRY_PAUSE, remaining)


def outcome(task: Task) -> Any:
    """The result of a terminal task; ``TaskFailed``/``TaskCancelled`` otherwise."""
    if task.status == "failed":
        raise TaskFailed(task)
    if task.status == "cancelled":
        raise TaskCancelled(task.id, task)
    return task.result


class Client:
    """Blocking client for scripts that submit tasks."""

    def __init__(self, url: str, token: str, *, timeout: float = 10.0) -> None:
        self._timeout = timeout
        self._hub = SyncHub(url, token, timeout=timeout)

    def submit(
        self,
        job: Extension | str,
        payload: dict[str, Any] | None = None,
        *,
        room: str,
        job_room: str | None = None,
        **options: Any,
    ) -> TaskHandle:
        """Submit ``job`` (an Extension instance, or a full job name plus ``payload``)
        into ``room``; ``options`` are the hub's queue fields (``priority``,
        ``delay_seconds``, ``run_at``, ``max_attempts``)."""
        names, body = _candidates(job, payload, room, job_room)
        key = {"Idempotency-Key": uuid.uuid4().hex}
        for index, name in enumerate(names):
            try:
                response = self._hub.request(
                    "POST",
                    f"/rooms/{segment(room)}/tasks/{segment(name)}",
                    json=_submit_body(body, options),
                    headers=key,
                    idempotent=True,  # the key makes a retry after a lost answer safe
                )
            except NotFound:
                if index == len(names) - 1:
                    raise
                continue
            return TaskHandle(self, Task.model_validate(response.json()))
        raise AssertionError("unreachable")  # pragma: no cover

    def task(self, task_id: str) -> TaskHandle:
        return TaskHandle(self, self.get(task_id))

    def get(self, task_id: str) -> Task:
        return Task.model_validate(self._hub.request("GET", f"/tasks/{task_id}").json())

    def wait(self, task_id: str, timeout: float | None = None) -> Task:
        """The task once terminal; ``TimeoutError`` after ``timeout`` seconds. Without a
        timeout it waits through hub outages, however long they last."""
        deadline = _deadline(timeout)
        while True:
            seconds = _wait_seconds(deadline)
            with _deadline_over_unreachable_hub(deadline):
                response = self._hub.request(
                    "GET",
                    f"/tasks/{task_id}",
                    headers=_wait_headers(seconds),
                    http_timeout=seconds + self._timeout,
                    retry_for=_retry_budget(deadline),
                )
            task = Task.model_validate(response.json())
            if task.is_terminal:
                return task
            pause = _pause(deadline, seconds, response)
            if pause > 0:
                time.sleep(pause)

    def read(
        self,
        provider: str,
        params: dict[str, Any] | None = None,
        *,
        room: str,
        timeout: float | None = 30.0,
    ) -> Any:
        """Read from the provider ``provider`` (its full name, visible from ``room``) with
        ``params``: its answer, decoded JSON or bytes (docs/protocol.md, "Providers"). Waits
        for the provider with long-polls, asking again after each 504 until ``timeout``
        (``TimeoutError``; None: no end). A failed read raises its ``ProblemError``."""
        deadline = _deadline(timeout)
        while True:
            seconds = _read_wait(deadline)
            try:
                response = self._hub.request(
                    "GET",
                    _read_path(provider, room),
                    params=_read_params(params),
                    headers={"Prefer": f"wait={seconds}"},
                    http_timeout=seconds + self._timeout,
                    retry_for=0,
                )
            except HubUnavailable as exc:  # 504, 503, the hub unreachable: ask again
                time.sleep(_read_pause(deadline, exc))
                continue
            return _answer(response)

    def cancel(self, task_id: str) -> Task:
        """Cancel the task (``InvalidTransition`` when it had ended already). A retry that
        finds it cancelled succeeds: the lost answer was most likely our own cancel's."""
        try:
            response = self._hub.request("PATCH", f"/tasks/{task_id}", json={"status": "cancelled"})
        except InvalidTransition as exc:
            if exc.retried and (task := self.get(task_id)).status == "cancelled":
                return task
            raise
        return Task.model_validate(response.json())

    def close(self) -> None:
        self._hub.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class TaskHandle:
    """A submitted task."""

    def __init__(self, client: Client, task: Task) -> None:
        self.client = client
        self.task = task  # the latest snapshot

    @property
    def id(self) -> str:
        return self.task.id

    def refresh(self) -> Task:
        self.task = self.client.get(self.id)
        return self.task

    def wait(self, timeout: float | None = None) -> Task:
        self.task = self.client.wait(self.id, timeout)
        return self.task

    def result(self, timeout: float | None = None) -> Any:
        """Wait for the task and return its result (raises if it failed or was cancelled)."""
        return outcome(self.wait(timeout))

    def cancel(self) -> Task:
        self.task = self.client.cancel(self.id)
        return self.task

    def __repr__(self) -> str:
        return f"TaskHandle({self.id!r}, {self.task.job_name!r}, status={self.task.status!r})"


class AsyncClient:
    """``Client`` for asyncio code."""

    def __init__(self, url: str, token: str, *, timeout: float = 10.0) -> None:
        self._timeout = timeout
        self._hub = AsyncHub(url, token, timeout=timeout)

    async def submit(
        self,
        job: Extension | str,
        payload: dict[str, Any] | None = None,
        *,
        room: str,
        job_room: str | None = None,
        **options: Any,
    ) -> AsyncTaskHandle:
        """See ``Client.submit``."""
        names, body = _candidates(job, payload, room, job_room)
        key = {"Idempotency-Key": uuid.uuid4().hex}
        for index, name in enumerate(names):
            try:
                response = await self._hub.request(
                    "POST",
                    f"/rooms/{segment(room)}/tasks/{segment(name)}",
                    json=_submit_body(body, options),
                    headers=key,
                    idempotent=True,  # the key makes a retry after a lost answer safe
                )
            except NotFound:
                if index == len(names) - 1:
                    raise
                continue
            return AsyncTaskHandle(self, Task.model_validate(response.json()))
        raise AssertionError("unreachable")  # pragma: no cover

    async def task(self, task_id: str) -> AsyncTaskHandle:
        return AsyncTaskHandle(self, await self.get(task_id))

    async def get(self, task_id: str) -> Task:
        response = await self._hub.request("GET", f"/tasks/{task_id}")
        return Task.model_validate(response.json())

    async def wait(self, task_id: str, timeout: float | None = None) -> Task:  # noqa: ASYNC109
        deadline = _deadline(timeout)
        while True:
            seconds = _wait_seconds(deadline)
            with _deadline_over_unreachable_hub(deadline):
                response = await self._hub.request(
                    "GET",
                    f"/tasks/{task_id}",
                    headers=_wait_headers(seconds),
                    http_timeout=seconds + self._timeout,
                    retry_for=_retry_budget(deadline),
                )
            task = Task.model_validate(response.json())
            if task.is_terminal:
                return task
            pause = _pause(deadline, seconds, response)
            if pause > 0:
                await asyncio.sleep(pause)

    async def read(
        self,
        provider: str,
        params: dict[str, Any] | None = None,
        *,
        room: str,
        timeout: float | None = 30.0,  # noqa: ASYNC109
    ) -> Any:
        """See ``Client.read``."""
        deadline = _deadline(timeout)
        while True:
            seconds = _read_wait(deadline)
            try:
                response = await self._hub.request(
                    "GET",
                    _read_path(provider, room),
                    params=_read_params(params),
                    headers={"Prefer": f"wait={seconds}"},
                    http_timeout=seconds + self._timeout,
                    retry_for=0,
                )
            except HubUnavailable as exc:
                await asyncio.sleep(_read_pause(deadline, exc))
                continue
            return _answer(response)

    async def cancel(self, task_id: str) -> Task:
        """See ``Client.cancel``."""
        try:
            response = await self._hub.request(
                "PATCH", f"/tasks/{task_id}", json={"status": "cancelled"}
            )
        except InvalidTransition as exc:
            if exc.retried and (task := await self.get(task_id)).status == "cancelled":
                return task
            raise
        return Task.model_validate(response.json())

    async def aclose(self) -> None:
        await self._hub.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


class AsyncTaskHandle:
    """A submitted task, for asyncio code."""

    def __init__(self, client: AsyncClient, task: Task) -> None:
        self.client = client
        self.task = task

    @property
    def id(self) -> str:
        return self.task.id

    async def refresh(self) -> Task:
        self.task = await self.client.get(self.id)
        return self.task

    async def wait(self, timeout: float | None = None) -> Task:  # noqa: ASYNC109
        self.task = await self.client.wait(self.id, timeout)
        return self.task

    async def result(self, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        return outcome(await self.wait(timeout))

    async def cancel(self) -> Task:
        self.task = await self.client.cancel(self.id)
        return self.task

    def __repr__(self) -> str:
        return f"AsyncTaskHandle({self.id!r}, {self.task.job_name!r}, status={self.task.status!r})"
