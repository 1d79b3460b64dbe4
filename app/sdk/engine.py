"""One serving session of a worker, on one asyncio loop: register, heartbeat, claim and
run tasks, drain and leave.

Loops (asyncio tasks): the heartbeat (every ``heartbeat_interval``, also through the
drain; its reply lists cancelled tasks), and the claimer (batch-claims as many tasks as
there are free slots; woken by ``task_available``, a finished run or a reconnect, and
every ``poll_interval`` anyway). A worker the hub no longer knows (404, e.g. after a long
network partition) registers again under a fresh id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from app.sdk.api import WorkerApi
from app.sdk.errors import AuthError, HubUnavailable, NotFound, ProblemError
from app.sdk.execution import TaskRun
from app.sdk.extension import JobSpec
from app.sdk.http import AsyncHub
from app.sdk.models import ClaimedTask
from app.sdk.realtime import SocketLink

log = logging.getLogger("taskhub.sdk")
SHUTDOWN_ERROR = "Worker shut down before the task finished"


@dataclass(frozen=True)
class WorkerConfig:
    url: str
    token: str
    concurrency: int
    heartbeat_interval: float
    poll_interval: float
    drain_timeout: float
    startup_timeout: float
    sockets: bool
    socketio_path: str
    http_timeout: float


class WorkerEngine:
    def __init__(
        self,
        config: WorkerConfig,
        specs: list[JobSpec],
        *,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.heartbeat_interval = config.heartbeat_interval  # tightened to the hub's timeout
        self._on_ready = on_ready
        self.specs = {spec.full_name: spec for spec in specs}
        self.worker_id: str | None = None
        self.runs: dict[str, TaskRun] = {}
        self.ready = asyncio.Event()
        self.fatal: BaseException | None = None
        self._kick = asyncio.Event()
        self._beat_now = asyncio.Event()
        self._stopping = asyncio.Event()
        self._drain = True
        self._abort_drain = asyncio.Event()
        self._run_tasks: dict[str, asyncio.Task[None]] = {}
        self._reincarnation = asyncio.Lock()
        self._background: set[asyncio.Task[Any]] = set()
        self._hub = AsyncHub(config.url, config.token, timeout=config.http_timeout)
        self.api = WorkerApi(self._hub)
        self.link: SocketLink | None = None
        if config.sockets:
            self.link = SocketLink(
                config.url,
                config.token,
                path=config.socketio_path,
                on_task_available=self._kick.set,
                on_task_cancelled=self.cancel_task,
                on_joined=self._kick.set,
                on_dropped=self._beat_now.set,
            )

    # -- control (called on the engine's loop) ---------------------------------

    def request_stop(self, *, drain: bool = True) -> None:
        """Stop claiming; finish in-flight runs (up to the drain timeout) unless ``drain``
        is False; then leave. A second request without drain cuts the drain short."""
        if self._stopping.is_set():
            if not drain:
                self._abort_drain.set()
            return
        self._drain = drain
        if not drain:
            self._abort_drain.set()
        self._stopping.set()
        self._kick.set()

    def cancel_task(self, task_id: str) -> None:
        run = self.runs.get(task_id)
        if run is not None:
            run.cancel()

    @property
    def listening(self) -> bool:
        return self.link is not None and self.link.listening

    # -- the session -----------------------------------------------------------

    async def run(self) -> None:
        """Serve until stopped; raises what made the worker give up (e.g. ``AuthError``)."""
        try:
            if not await self._register_unless_stopped():
                log.info("Stopped before the worker was registered")
                return
            if self.link is not None:
                self.link.start()  # joins in the background, then triggers a claim
            self.ready.set()
            if self._on_ready is not None:
                self._on_ready()
            names = ", ".join(self.specs)
            log.info(
                "Worker %s serving %s (concurrency %d)",
                self.worker_id,
                names,
                self.config.concurrency,
            )
            heartbeat = asyncio.create_task(self._guarded(self._heartbeat_loop()))
            claimer = asyncio.create_task(self._guarded(self._claim_loop()))
            try:
                await self._stopping.wait()
                await claimer
                await self._finish_runs()
            finally:
                claimer.cancel()
                heartbeat.cancel()
                await asyncio.gather(claimer, heartbeat, return_exceptions=True)
            await self._leave()
        finally:
            await self._close()
        if self.fatal is not None:
            raise self.fatal

    async def _register_unless_stopped(self) -> bool:
        """Register (retrying up to the start-up timeout while the hub is unreachable)
        unless a stop is requested first; whether it registered."""
        registering = asyncio.create_task(self._register(retry_for=self.config.startup_timeout))
        stop = asyncio.create_task(self._stopping.wait())
        await asyncio.wait({registering, stop}, return_when=asyncio.FIRST_COMPLETED)
        stop.cancel()
        if not registering.done():
            registering.cancel()
            await asyncio.gather(registering, return_exceptions=True)
            return False
        registering.result()  # raises what made registration fail
        return True

    async def _register(self, *, retry_for: float | None = None) -> None:
        worker_id, hub_timeout = await self.api.create_worker(retry_for=retry_for)
        try:
            await self._register_jobs(worker_id, hub_timeout, retry_for)
        except BaseException:
            # Not left behind half-registered (the sweeper would remove it only later).
            with contextlib.suppress(HubUnavailable, ProblemError):
                await asyncio.shield(self.api.delete_worker(worker_id, retry_for=2.0))
            raise

    async def _register_jobs(
        self, worker_id: str, hub_timeout: float | None, retry_for: float | None
    ) -> None:
        if hub_timeout and self.heartbeat_interval > hub_timeout / 3:
            log.warning(
                "Heartbeat interval %.1fs is more than a third of the hub's worker timeout "
                "(%.1fs); beating every %.1fs instead",
                self.heartbeat_interval,
                hub_timeout,
                hub_timeout / 4,
            )
            self.heartbeat_interval = hub_timeout / 4
        for spec in self.specs.values():
            await self.api.register_job(spec, worker_id, retry_for=retry_for)
        self.worker_id = worker_id
        if self.link is not None:
            self.link.bind(worker_id, list(self.specs))

    async def _reincarnate(self, stale_id: str) -> None:
        """The hub forgot ``stale_id``: its tasks were failed there, so signal their runs
        and register again under a fresh id."""
        async with self._reincarnation:
            if self.worker_id != stale_id or self._stopping.is_set():
                return
            log.warning("The hub no longer knows worker %s; registering again", stale_id)
            for run in self.runs.values():
                run.cancel()
            try:
                await self._register()
            except (HubUnavailable, ProblemError) as exc:
                self._give_up(exc)
                return
            log.info("Registered again as worker %s", self.worker_id)

    def _give_up(self, exc: BaseException) -> None:
        if self.fatal is None:
            if isinstance(exc, AuthError):
                log.error("The hub refused this worker's token (%s); stopping", exc)
            else:
                log.error("Stopping the worker: %s", exc)
            self.fatal = exc
        self.request_stop(drain=False)

    # -- loops -------------------------------------------------------------------

    async def _guarded(self, loop: Coroutine[Any, Any, None]) -> None:
        """Run a loop; a bug in it stops the worker cleanly instead of silently."""
        try:
            await loop
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("Worker loop crashed")
            self._give_up(exc)

    async def _heartbeat_loop(self) -> None:
        while True:
            interval = self.heartbeat_interval
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._beat_now.wait(), interval)
            self._beat_now.clear()
            worker_id = self.worker_id
            assert worker_id is not None
            try:
                reply = await self.api.heartbeat(worker_id, list(self.runs), retry_for=interval)
            except NotFound:
                await self._reincarnate(worker_id)
                continue
            except AuthError as exc:
                self._give_up(exc)
                return
            except (HubUnavailable, ProblemError) as exc:
                log.warning("Heartbeat failed: %s", exc)
                continue
            for task_id in reply.cancelled_tasks:
                self.cancel_task(task_id)

    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            free = self.config.concurrency - len(self.runs)
            self._kick.clear()
            if free > 0:
                worker_id = self.worker_id
                assert worker_id is not None
                try:
                    claimed = await self.api.claim(worker_id, free)
                except NotFound:
                    await self._reincarnate(worker_id)
                    continue
                except AuthError as exc:
                    self._give_up(exc)
                    return
                except (HubUnavailable, ProblemError) as exc:
                    log.warning("Claim failed: %s", exc)
                    claimed = []
                for task in claimed:
                    self._launch(task, worker_id)
                if len(claimed) == free:
                    continue  # maybe more are waiting
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._kick.wait(), self.config.poll_interval)

    def _launch(self, task: ClaimedTask, worker_id: str) -> None:
        spec = self.specs.get(task.job_name)
        if spec is None:  # cannot happen with a correct hub; fail the task rather than hold it
            error = f"Worker {worker_id} does not serve {task.job_name}"
            self._spawn(self._reject(task, error))
            return
        run = TaskRun(task, spec, self.api, worker_id=worker_id, on_auth_lost=self._give_up)
        self.runs[task.id] = run
        job = asyncio.create_task(run.execute(), name=f"taskhub-task-{task.id}")
        self._run_tasks[task.id] = job
        job.add_done_callback(lambda _job, task_id=task.id: self._finished(task_id))

    async def _reject(self, task: ClaimedTask, error: str) -> None:
        log.error("Task %s: %s", task.id, error)
        with contextlib.suppress(HubUnavailable, ProblemError):
            await self.api.update_task(task, {"status": "failed", "error": error})

    def _spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        job = asyncio.create_task(coroutine)
        self._background.add(job)
        job.add_done_callback(self._background.discard)

    def _finished(self, task_id: str) -> None:
        self.runs.pop(task_id, None)
        job = self._run_tasks.pop(task_id, None)
        if job is not None and not job.cancelled() and job.exception() is not None:
            log.error("Task %s: unexpected error", task_id, exc_info=job.exception())
        self._kick.set()

    # -- shutdown ----------------------------------------------------------------

    async def _finish_runs(self) -> None:
        """Let in-flight runs finish (heartbeats go on) until the drain timeout or an
        abort; then signal the rest, report them failed and stop waiting for them."""
        pending = set(self._run_tasks.values())
        if pending and self._drain:
            log.info("Draining %d task(s) (up to %.0fs)", len(pending), self.config.drain_timeout)
            aborted = asyncio.create_task(self._abort_drain.wait())
            try:
                await self._wait_runs(pending, aborted)
            finally:
                aborted.cancel()
        leftovers = list(self._run_tasks.items())
        for task_id, job in leftovers:
            run = self.runs.get(task_id)
            job.cancel()
            if run is not None:
                await run.fail(SHUTDOWN_ERROR)
                run.cancel()
        await asyncio.gather(*(job for _, job in leftovers), return_exceptions=True)

    async def _wait_runs(
        self, pending: set[asyncio.Task[None]], aborted: asyncio.Task[bool]
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.drain_timeout
        while pending and not aborted.done():
            remaining = deadline - loop.time()
            if remaining <= 0:
                log.warning("Drain timeout: %d task(s) still running", len(pending))
                return
            done, _ = await asyncio.wait(
                [*pending, aborted], timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
            pending -= done

    async def _leave(self) -> None:
        if self.link is not None:
            await self.link.leave_all()
        if self.worker_id is not None and not isinstance(self.fatal, AuthError):
            try:
                await self.api.delete_worker(self.worker_id, retry_for=5.0)
                log.info("Worker %s left the hub", self.worker_id)
            except (HubUnavailable, ProblemError) as exc:
                log.warning("Could not remove worker %s: %s", self.worker_id, exc)

    async def _close(self) -> None:
        if self.link is not None:
            await self.link.close()
        await self._hub.aclose()
