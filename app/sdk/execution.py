"""One claimed task on a worker: move it to RUNNING, run the Extension, report progress
and the outcome, each update carrying the claim token.

A cancelled run's outcome is dropped, and so is one the hub refuses as stale (409): the
task has moved on without this worker, which is not an error. An outcome the hub could not
be told yet is retried until the hub answers (a live worker never throws a result away);
the run stays in the worker's runs meanwhile, so its heartbeat keeps the task's lease. A
worker's shutdown bounds that by its drain timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python

from taskhub.sdk.api import WorkerApi
from taskhub.sdk.context import TaskContext
from taskhub.sdk.errors import (
    AuthError,
    Conflict,
    HubUnavailable,
    InvalidTransition,
    NotFound,
    ProblemError,
    RetryLater,
)
from taskhub.sdk.extension import JobSpec
from taskhub.sdk.logs import Send, TaskLog, hub_sender
from taskhub.sdk.models import MAX_ERROR_CHARS, MAX_PROGRESS_MESSAGE_CHARS, ClaimedTask

log = logging.getLogger("taskhub.sdk")
T = TypeVar("T")
UPDATE_RETRY_SECONDS = 60.0  # one round of retries of an update; an end report goes on
PROGRESS_RETRY_SECONDS = 5.0


async def run_in_thread(fn: Callable[[], T], name: str) -> T:
    """Run ``fn`` in a fresh daemon thread (so a run that never returns cannot keep the
    process alive after the worker gave up on it) and await its result."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def target() -> None:
        try:
            outcome: tuple[Any, BaseException | None] = (fn(), None)
        except BaseException as exc:
            outcome = (None, exc)
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(settle, *outcome)

    threading.Thread(target=target, name=name, daemon=True).start()
    return await future


class ProgressReporter:
    """Sends a run's progress in order, one request at a time, coalesced (newest wins)."""

    def __init__(
        self, send: Callable[[float, str | None], Awaitable[bool]], min_interval: float = 0.1
    ) -> None:
        self._send = send
        self._min_interval = min_interval
        self._latest: tuple[float, str | None] | None = None
        self._wake = asyncio.Event()
        self._closing = False
        self._enabled = True
        self._pump_task = asyncio.create_task(self._pump(), name="taskhub-progress")

    def update(self, fraction: float, message: str | None) -> None:
        if self._enabled and not self._closing:
            self._latest = (fraction, message)
            self._wake.set()

    async def _pump(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            latest, self._latest = self._latest, None
            if latest is not None and self._enabled:
                self._enabled = await self._send(*latest)
            if self._closing:
                if self._latest is None or not self._enabled:
                    return
            else:
                await asyncio.sleep(self._min_interval)

    async def close(self) -> None:
        """Send the last pending report, then stop."""
        self._closing = True
        self._wake.set()
        await self._pump_task

    def abort(self) -> None:
        self._pump_task.cancel()


def _being_cancelled() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


@dataclass(frozen=True)
class Outcome:
    result: Any = None
    error: str | None = None
    retry: bool = False  # the run raised RetryLater


def fit(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters (marked where it was cut), so that the hub
    takes the report rather than refusing it whole."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception (one whose ``str`` fails is named by its type
    alone; ``_report_end`` makes the text storable)."""
    try:
        text = str(exc)
    except Exception:
        text = ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def storable(text: str) -> str:
    """``text`` without what JSON over HTTP or PostgreSQL cannot carry: U+0000 (shown as
    ``\\x00``) and lone surrogates (replaced)."""
    text = text.replace("\x00", "\\x00")
    return text.encode("utf-8", "replace").decode("utf-8")


def json_ready(value: Any) -> tuple[Any, int]:
    """``value`` as plain JSON, and the bytes of its JSON text; or ``ValueError`` saying
    why it cannot be (not serialisable, NaN or infinity, bytes that are not UTF-8, lone
    surrogates)."""
    try:
        plain = to_jsonable_python(value)
        text = json.dumps(plain, allow_nan=False, ensure_ascii=False).encode("utf-8")  # as sent
    except (PydanticSerializationError, ValueError, TypeError) as exc:  # (UnicodeError too)
        raise ValueError(str(exc)) from None
    return plain, len(text)


def _log_sender(api: WorkerApi, task: ClaimedTask) -> Send | None:
    """How a run's log lines reach the hub; None for a hub without claim tokens (one
    without task logs either)."""
    claim_token = getattr(task, "claim_token", None)  # (test doubles may have none)
    hub = getattr(api, "hub", None)
    if claim_token is None or hub is None:
        return None
    return hub_sender(hub, task.id, claim_token, min(hub.timeout, 5.0))


def _payload_errors(exc: ValidationError) -> str:
    parts = [
        f"{'.'.join(str(p) for p in error['loc']) or 'payload'}: {error['msg']}"
        for error in exc.errors(include_url=False)
    ]
    return "Invalid payload: " + "; ".join(parts)


class TaskRun:
    """Executes one claimed task; ``cancel()`` signals the run cooperatively."""

    def __init__(
        self,
        task: ClaimedTask,
        spec: JobSpec,
        api: WorkerApi,
        *,
        worker_id: str,
        on_auth_lost: Callable[[AuthError], None],
    ) -> None:
        self.task = task
        self.spec = spec
        self.api = api
        self.worker_id = worker_id
        self._on_auth_lost = on_auth_lost
        self._reporter: ProgressReporter | None = None
        self._refusal: ProblemError | None = None  # why the hub refused the result
        self.result_bytes = 0  # the size of the result's JSON, once the run has one
        # Task logs (``ctx.log`` and the run's ``logging`` records), shipped in batches.
        self.task_log = TaskLog(_log_sender(api, task), asyncio.get_running_loop())
        self.ctx = TaskContext(
            task_id=task.id,
            job_name=task.job_name,
            room_id=task.room_id,
            attempt=task.attempt,
            payload=task.payload,
            progress_sink=self._on_progress,
            loop=asyncio.get_running_loop(),
            log_sink=self.task_log.add,
        )

    @property
    def id(self) -> str:
        return self.task.id

    @property
    def cancelled(self) -> bool:
        return self.ctx.cancelled

    def cancel(self) -> None:
        if not self.ctx.cancelled:
            log.info("Task %s cancelled; signalling its run", self.id)
        self.ctx._cancel()

    async def execute(self) -> None:
        if self.cancelled or not await self._start():
            return
        self._reporter = ProgressReporter(self._send_progress)
        try:
            outcome = await self._run()
        except asyncio.CancelledError:
            self._reporter.abort()
            self.task_log.abort()
            raise
        # The last log lines are stored before the task ends.
        await asyncio.gather(self._reporter.close(), self.task_log.close())
        await self._finish(outcome)

    async def fail(self, error: str, *, within: float = 5.0) -> None:
        """Report the task failed (trying for up to ``within`` seconds) when the worker
        gives up on an unfinished run: retried while it has attempts left (as it would be
        had the worker been killed)."""
        if not self.cancelled:
            body = {"status": "failed", "error": error, "retry": True}
            await self._report_end(body, retry_for=within)

    async def _start(self) -> bool:
        if self.task.status == "running":  # the claim started it (a hub with claim-and-start)
            log.info("Task %s (%s) running", self.id, self.task.job_name)
            return True
        try:
            await self.api.update_task(
                self.task, {"status": "running"}, retry_for=UPDATE_RETRY_SECONDS
            )
            log.info("Task %s (%s) running", self.id, self.task.job_name)
            return True
        except InvalidTransition:
            return await self._started_by_earlier_attempt()
        except (ProblemError, HubUnavailable) as exc:
            self._refused(exc, "start")
            return False

    async def _started_by_earlier_attempt(self) -> bool:
        """A retried PATCH may find its first attempt applied; anything else means the task
        was cancelled before it started."""
        with contextlib.suppress(ProblemError, HubUnavailable):
            current = await self.api.get_task(self.id)
            if current.status == "running" and current.worker_id == self.worker_id:
                return True
        log.info("Task %s was cancelled before it started", self.id)
        return False

    async def _run(self) -> Outcome:
        try:
            extension = self.spec.extension.model_validate(self.task.payload)
        except ValidationError as exc:
            return Outcome(error=_payload_errors(exc))
        try:
            with self.task_log.capturing():  # the run's ``logging`` records are its lines
                if self.spec.is_async:
                    result = await extension.run(self.ctx)
                else:
                    context = contextvars.copy_context()  # (the thread's records too)
                    result = await run_in_thread(
                        lambda: context.run(extension.run, self.ctx),
                        name=f"taskhub-task-{self.id}",
                    )
        except asyncio.CancelledError as exc:
            if _being_cancelled():  # the worker stops the run (shutdown)
                raise
            return Outcome(error=describe(exc))  # the run's own code raised it
        except BaseException as exc:
            if isinstance(exc, RetryLater):
                log.info("Task %s asks to be retried: %s", self.id, exc)
                return Outcome(error=describe(exc), retry=True)
            if not self.cancelled:
                log.error("Task %s (%s) failed", self.id, self.task.job_name, exc_info=exc)
            return Outcome(error=describe(exc))
        return Outcome(result=result)

    async def _finish(self, outcome: Outcome) -> None:
        if self.cancelled:
            log.info("Task %s was cancelled; its outcome is dropped", self.id)
            return
        if outcome.error is not None:
            body = {"status": "failed", "error": outcome.error}
            await self._report_end({**body, "retry": True} if outcome.retry else body)
            return
        try:
            result, self.result_bytes = json_ready(outcome.result)
        except ValueError as exc:
            error = f"The result is not JSON-serialisable: {exc}"
            await self._report_end({"status": "failed", "error": error})
            return
        completed: dict[str, Any] = {"status": "completed"}
        if result is not None:
            completed["result"] = result
        if await self._report_end(completed) == "refused-result":
            error = f"The hub refused the result: {self._refusal}"
            await self._report_end({"status": "failed", "error": error})

    async def _report_end(self, body: dict[str, Any], retry_for: float | None = None) -> str:
        """Tell the hub how the run ended; with no ``retry_for``, keep trying (round after
        round of ``UPDATE_RETRY_SECONDS``) until the hub answers."""
        if body.get("error") is not None:
            body = {**body, "error": fit(storable(body["error"]), MAX_ERROR_CHARS)}
        try:
            await self._update_until_answered(body, retry_for)
        except ProblemError as exc:
            if exc.status in (413, 422) and "result" in body:
                log.warning("Task %s: the hub refused its result: %s", self.id, exc)
                self._refusal = exc
                return "refused-result"
            self._refused(exc, f"report {body['status']}")
            return "dropped"
        except HubUnavailable as exc:
            self._refused(exc, f"report {body['status']}")
            return "dropped"
        log.info("Task %s %s", self.id, body["status"])
        return "reported"

    async def _update_until_answered(self, body: dict[str, Any], retry_for: float | None) -> None:
        if retry_for is not None:
            await self._send_end(body, retry_for)
            return
        while True:
            try:
                await self._send_end(body, UPDATE_RETRY_SECONDS)
                return
            except HubUnavailable as exc:
                if exc.status == 500:  # the hub answers, with an error of its own: not again
                    raise
                log.warning(
                    "Task %s: could not report %s yet (%s); still trying",
                    self.id,
                    body["status"],
                    exc,
                )

    async def _send_end(self, body: dict[str, Any], retry_for: float) -> None:
        """One end report (retried for ``retry_for``); the worker engine's runs override
        it to claim their worker's next task(s) with it (``claim_next``)."""
        await self.api.update_task(self.task, body, retry_for=retry_for)

    def _refused(self, exc: ProblemError | HubUnavailable, action: str) -> None:
        if isinstance(exc, Conflict | NotFound):
            log.info("Task %s: could not %s (%s); dropping it", self.id, action, exc)
        elif isinstance(exc, AuthError) and exc.status == 401:
            self._on_auth_lost(exc)
        else:
            log.warning("Task %s: could not %s: %s", self.id, action, exc)

    def _on_progress(self, fraction: float, message: str | None) -> None:
        if self._reporter is not None and not self.cancelled:
            self._reporter.update(fraction, message)

    async def _send_progress(self, fraction: float, message: str | None) -> bool:
        """One progress PATCH; False stops further reports for this run."""
        body: dict[str, Any] = {"progress": fraction}
        if message is not None:
            body["progress_message"] = fit(storable(str(message)), MAX_PROGRESS_MESSAGE_CHARS)
        try:
            await self.api.update_task(self.task, body, retry_for=PROGRESS_RETRY_SECONDS)
        except ProblemError as exc:
            if exc.status == 422:
                log.warning("Task %s: the hub does not accept progress reports: %s", self.id, exc)
            return False
        except HubUnavailable as exc:
            log.debug("Task %s: progress report lost: %s", self.id, exc)
        return True
