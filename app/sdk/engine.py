"""One serving session of a worker, on one asyncio loop: register, heartbeat, claim and
run tasks, drain and leave.

Loops (asyncio tasks): the heartbeat (``heartbeat_interval`` after the last beat that got
through, retried soon while it fails, also through the drain; its reply lists cancelled
tasks), and the claimer (batch-claims as many tasks as there are free slots; woken by
``task_available``, a finished run or a reconnect, and every ``poll_interval`` anyway). A
worker the hub no longer knows (404 ``worker-not-found``, e.g. after a long network
partition; not any 404, a proxy's say) registers again under a fresh id; the runs of its
earlier id are signalled, and tracked until they return (each run on its own: the hub may
hand the same task to the new id meanwhile).

Round trips: a claim asks the hub to start its tasks too (``"start": true``), and a run's
end report asks it to claim the worker's next task(s) (``claim_next``), as many as slots
will be free (docs/protocol.md, "Worker shortcuts"); at saturation a task then costs its
worker one request. A hub that ignores them (an older one) answers tasks ``claimed`` and
no ``next``: the run then starts with ``PATCH running`` and the claimer claims as before.
Slots asked for by a claim or an end report in flight are reserved, so the two never
claim more than the concurrency between them; an ending run's slot, once its report asks
for the next task (or grants the slot), counts as that only, not as the run's too, so that
runs ending together each ask for their successor instead of leaving it to a claim.

End reports go over the Socket.IO link while it listens (``task_update``, docs/protocol.md
"Task updates over Socket.IO"): the same update as the PATCH, without an HTTP request.
One with no answer is sent again by PATCH (a repeat of an applied outcome is refused 409
and changes nothing); a result over ``LINK_RESULT_BYTES`` goes by PATCH at once, and a
hub that does not know the event gets PATCHes from then on.

Push (docs/protocol.md, "Task push"): slots a claim or an end report found nothing for are
granted to the hub over the Socket.IO link (``worker_ready``); while it holds them, the
hub claims and starts tasks for this worker as they are submitted and sends them over the
link (``task_pushed``), so an idle worker's task starts without a round trip of its own.
Granted slots count as taken here until a push fills them, the hub answers that it holds
fewer, or the link drops (the hub forgets a socket's grants). Each ``poll_interval`` while
it holds slots the worker asks the hub to look again (a grant of 0), the safety net for a
wake-up that went astray; the answer also corrects the count. A hub that refuses the event
(an older one) gets claims only.

A stop ends claiming. A claim in flight and the running tasks may finish until the drain
is over: ``drain_timeout`` after the stop, at once for a hard stop (``drain=False``), or in
time to be done within a stop's timeout. Then what still runs is reported failed, and the
worker leaves the hub (within ``LEAVE_SECONDS``) and closes its connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from taskhub.sdk.api import WorkerApi, next_tasks
from taskhub.sdk.errors import AuthError, HubUnavailable, NotFound, ProblemError, WorkerNotFound
from taskhub.sdk.execution import TaskRun
from taskhub.sdk.extension import JobSpec
from taskhub.sdk.http import AsyncHub, Backoff
from taskhub.sdk.models import ClaimedTask
from taskhub.sdk.provider import ProviderSpec
from taskhub.sdk.realtime import SocketLink, fits_link

log = logging.getLogger("taskhub.sdk")
SHUTDOWN_ERROR = "Worker shut down before the task finished"
LEAVE_SECONDS = 5.0  # after the drain: fail what still runs, leave the rooms, deregister
HARD_STOP_SECONDS = 5.0  # a stop without drain is done within this unless told otherwise
CLOSE_MARGIN = 1.0  # of a stop's timeout, kept for closing the connections (at most)
CLOSE_SECONDS = 5.0  # closing the connections after a stop without a timeout
# An end report's answer over the link is awaited this long before the PATCH is sent.
LINK_UPDATE_SECONDS = 5.0
# Results larger than this go by PATCH: Engine.IO closes a connection whose message passes
# its buffer size (1 MB by default), and a large message would hold up the link's events.
LINK_RESULT_BYTES = 64 * 1024


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
    server_timeout: float | None = None  # the hub's worker timeout, as configured
    push: bool = True  # grant idle slots to the hub for pushed tasks
    socket_updates: bool = True  # report run ends over the Socket.IO link (task_update)


class WorkerEngine:
    def __init__(
        self,
        config: WorkerConfig,
        specs: list[JobSpec],
        *,
        providers: Iterable[ProviderSpec] = (),
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.heartbeat_interval = config.heartbeat_interval  # tightened to the hub's timeout
        # The hub drops a worker silent for this long (the hub's own figure once it says).
        self.worker_timeout = config.server_timeout or 3 * config.heartbeat_interval
        self._on_ready = on_ready
        self.specs = {spec.full_name: spec for spec in specs}
        self.providers = {spec.full_name: spec for spec in providers}
        self._provider_ids: dict[str, str] = {}  # full name -> the hub's id, per registration
        self.worker_id: str | None = None
        self.ready = asyncio.Event()
        self.fatal: BaseException | None = None
        self._runs: dict[TaskRun, asyncio.Task[None]] = {}  # every live run, and its task
        self._reserved = 0  # slots asked for by claims (or end reports) in flight
        # Live runs whose slot their end report handed on (reserved for the next tasks, or
        # granted): counted there, not again as the run's until it is gone.
        self._handed_over: set[TaskRun] = set()
        # The shortcuts, used until the hub shows it does not know them.
        self._claims_start = True
        self._claims_next = True
        self._pushes = config.push
        self._updates_over_link = config.socket_updates
        self._granted = 0  # slots the hub may push tasks into, as last known
        self._unanswered = 0  # slots granted by calls not answered yet
        self._kick = asyncio.Event()
        self._beat_now = asyncio.Event()
        self._stopping = asyncio.Event()
        self._drain_over = asyncio.Event()  # stop waiting for runs and a claim in flight
        self._done_by: float | None = None  # loop time a stop's timeout asks to be done by
        self._close_margin = CLOSE_MARGIN  # then left to close the connections
        self._timers: list[asyncio.TimerHandle] = []
        self._reincarnation = asyncio.Lock()
        self._background: set[asyncio.Task[Any]] = set()
        self._hub = AsyncHub(config.url, config.token, timeout=config.http_timeout)
        self.api = WorkerApi(self._hub, slots=config.concurrency)  # slots: reported to the hub
        self.link: SocketLink | None = None
        if config.sockets:
            self.link = SocketLink(
                config.url,
                config.token,
                path=config.socketio_path,
                on_task_available=self._kick.set,
                on_task_cancelled=self.cancel_task,
                on_joined=self._kick.set,
                on_dropped=self._link_dropped,
                on_task_pushed=self._pushed,
                on_provider_request=self._provider_request,
            )

    # -- control (called on the engine's loop) ---------------------------------

    def request_stop(self, *, drain: bool = True, within: float | None = None) -> None:
        """Stop claiming; let a claim in flight and the running tasks finish (up to the
        drain timeout) unless ``drain`` is False; then fail what still runs and leave.
        ``within``: be done in about that many seconds (default for a hard stop:
        ``HARD_STOP_SECONDS``). A later request can only make the stop harsher."""
        loop = asyncio.get_running_loop()
        if within is None and not drain:
            within = HARD_STOP_SECONDS
        if within is not None:
            self._finish_within(loop, within)
        if not drain:
            self._drain_over.set()
        if self._stopping.is_set():
            return
        self._stopping.set()
        self._kick.set()
        if self._granted and self.link is not None:
            self._spawn(self._take_back_grant())
        self._timers.append(loop.call_later(self.config.drain_timeout, self._drain_timed_out))

    def _finish_within(self, loop: asyncio.AbstractEventLoop, within: float) -> None:
        """Aim to be done ``within`` seconds from now (keeping a margin to close the
        connections), ending the drain in time to leave the hub."""
        now = loop.time()
        margin = min(CLOSE_MARGIN, within / 5)
        done_by = now + within - margin
        if self._done_by is not None and self._done_by <= done_by:
            return
        self._done_by, self._close_margin = done_by, margin
        drain_by = done_by - min(LEAVE_SECONDS, (done_by - now) / 2)
        self._timers.append(loop.call_at(drain_by, self._drain_over.set))

    def _drain_timed_out(self) -> None:
        if self._runs and not self._drain_over.is_set():
            log.warning("Drain timeout: %d task(s) still running", len(self._runs))
        self._drain_over.set()

    def cancel_task(self, task_id: str, worker_id: str | None = None) -> None:
        """Signal the runs of ``task_id``; with ``worker_id``, only those claimed under it
        (a notice meant for an earlier id of this worker spares a later attempt)."""
        for run in list(self._runs):
            if run.id == task_id and worker_id in (None, run.worker_id):
                run.cancel()

    @property
    def active_task_ids(self) -> list[str]:
        """Ids of the tasks with a live run, each once (safe to read from any thread)."""
        runs = list(self._runs)  # one step: the loop's thread may change the runs meanwhile
        return list(dict.fromkeys(run.id for run in runs))

    @property
    def listening(self) -> bool:
        return self.link is not None and self.link.listening

    # -- the session -----------------------------------------------------------

    async def run(self) -> None:
        """Serve until stopped; raises what made the worker give up (e.g. ``AuthError``).
        Cancelled, it stops as ``request_stop()`` would (cancelled again: without drain),
        then raises ``CancelledError``."""
        session = asyncio.create_task(self._session(), name="taskhub-worker-session")
        cancels = 0
        while not session.done():
            try:
                await asyncio.shield(session)
            except asyncio.CancelledError:
                if session.cancelled():
                    raise
                cancels += 1
                self.request_stop(drain=cancels == 1)
        if cancels:
            if session.exception() is not None:
                log.error("The worker failed while stopping", exc_info=session.exception())
            raise asyncio.CancelledError
        session.result()
        if self.fatal is not None:
            raise self.fatal

    async def _session(self) -> None:
        try:
            if not await self._register_unless_stopped(self.config.startup_timeout):
                log.info("Stopped before the worker was registered")
                return
            self._announce()
            heartbeat = asyncio.create_task(self._guarded(self._heartbeat_loop()))
            claimers = []  # (a worker serving providers only claims nothing)
            if self.specs:
                claimers.append(asyncio.create_task(self._guarded(self._claim_loop())))
            try:
                await self._stopping.wait()
                await self._until_drain_over(claimers)  # a claim in flight brings tasks
                await self._drain()
            finally:
                for claimer in claimers:
                    claimer.cancel()
                heartbeat.cancel()
                await asyncio.gather(*claimers, heartbeat, return_exceptions=True)
            await self._leave()
        finally:
            await self._close()

    def _announce(self) -> None:
        if self.link is not None:
            self.link.start()  # joins in the background, then triggers a claim
        self.ready.set()
        if self._on_ready is not None:
            self._on_ready()
        log.info(
            "Worker %s serving %s (concurrency %d)",
            self.worker_id,
            ", ".join([*self.specs, *self.providers]),
            self.config.concurrency,
        )

    async def _register_unless_stopped(self, retry_for: float | None = None) -> bool:
        """Register (retrying up to ``retry_for`` while the hub is unreachable) unless a
        stop is requested first, which cancels it; whether it registered."""
        registering = asyncio.create_task(self._register(retry_for=retry_for))
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
        if hub_timeout:
            self.worker_timeout = hub_timeout
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
        for name, provider in self.providers.items():
            self._provider_ids[name] = await self.api.register_provider(
                provider, worker_id, retry_for=retry_for
            )
        self.worker_id = worker_id
        if self.link is not None:
            self.link.bind(worker_id, list(self.specs), list(self.providers))

    async def _reincarnate(self, stale_id: str) -> None:
        """The hub forgot ``stale_id``: its tasks were failed there, so signal their runs
        and register again under a fresh id (unless the worker is stopping)."""
        async with self._reincarnation:
            if self.worker_id != stale_id or self._stopping.is_set():
                return
            log.warning("The hub no longer knows worker %s; registering again", stale_id)
            for run in self._runs:
                run.cancel()
            try:
                if not await self._register_unless_stopped():
                    return
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
        """Beat ``heartbeat_interval`` after the last beat that got through (at once when
        the socket dropped). A failed beat is retried soon, each attempt bounded: once the
        hub is reachable again, a beat gets through within a quarter of its worker timeout
        (so the worker outlives an outage that ends within three quarters of it after its
        last beat)."""
        loop = asyncio.get_running_loop()
        last_beat = loop.time()  # the registration counts as one
        retries: Iterator[float] | None = None  # delays between attempts while failing
        while True:
            due = next(retries) if retries else last_beat + self.heartbeat_interval - loop.time()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._beat_now.wait(), max(due, 0.0))
            self._beat_now.clear()
            started = loop.time()
            try:
                await self._beat()
            except AuthError as exc:
                self._give_up(exc)
                return
            except (HubUnavailable, ProblemError) as exc:
                level = logging.WARNING if retries is None else logging.DEBUG
                log.log(level, "Heartbeat failed (retrying): %s", exc)
                retries = retries or self._beat_retry_delays()
                continue
            if retries is not None:
                log.info("Heartbeat got through again")
            last_beat, retries = started, None

    def _beat_retry_delays(self) -> Iterator[float]:
        longest = min(self.worker_timeout / 12, self.heartbeat_interval)
        return Backoff(initial=min(0.2, longest), maximum=longest).delays()

    async def _beat(self) -> None:
        """One heartbeat attempt, bounded by a sixth of the hub's worker timeout."""
        worker_id = self.worker_id
        assert worker_id is not None
        timeout = min(self.config.http_timeout, self.worker_timeout / 6)
        try:
            reply = await self.api.heartbeat(
                worker_id, self.active_task_ids, retry_for=0, http_timeout=timeout
            )
        except WorkerNotFound:
            await self._reincarnate(worker_id)
            return
        for task_id in reply.cancelled_tasks:
            self.cancel_task(task_id, worker_id)

    @property
    def _free_slots(self) -> int:
        held = len(self._runs) - len(self._handed_over)
        return self.config.concurrency - held - self._reserved - self._granted

    async def _claim_loop(self) -> None:
        while not self._stopping.is_set():
            free = self._free_slots
            self._kick.clear()
            if free > 0:
                worker_id = self.worker_id
                assert worker_id is not None
                try:
                    self._reserved += free
                    try:
                        claimed = await self._claim(worker_id, free)
                    finally:
                        self._reserved -= free
                except WorkerNotFound:
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
                self._grant(free - len(claimed))
            try:
                await asyncio.wait_for(self._kick.wait(), self.config.poll_interval)
            except TimeoutError:
                if self._granted:
                    self._grant(0)  # the hub looks again for the slots it holds

    async def _claim(self, worker_id: str, free: int) -> list[ClaimedTask]:
        """A claim of ``free`` tasks, started by the hub if it can (a hub that refuses the
        unknown field, 422, is asked again without it, and no more)."""
        if self._claims_start:
            try:
                return await self.api.claim(worker_id, free, start=True)
            except ProblemError as exc:
                if not _refuses_field(exc, "start"):
                    raise
                log.info("The hub refused a claim with start (%s); claiming without", exc)
                self._claims_start = False
        return await self.api.claim(worker_id, free)

    async def _end_and_claim_next(
        self, run: TaskRun, body: dict[str, Any], retry_for: float
    ) -> None:
        """``run``'s end report, asking the hub to claim as many tasks as slots will be free
        once it ends (none while stopping), which are launched at once."""
        worker_id = self.worker_id
        own = run in self._runs and run not in self._handed_over
        if self._granted:
            # The hub holds slots of this worker: it pushed any task that waited, so a
            # claim would come back empty. Report, then hand the slots over as well.
            await self._report(run, body, None, retry_for)
            want = self._free_slots + int(own)  # the ending run's slot too
            if own:
                self._handed_over.add(run)
            self._grant(want)
            return
        want = self._free_slots + int(own)
        if not self._claims_next or self._stopping.is_set() or worker_id is None or want < 1:
            await self._report(run, body, None, retry_for)
            return
        ask = {"worker_id": worker_id, "max_tasks": want, "start": self._claims_start}
        # Reserved as one: another run ending meanwhile does not count this slot again.
        self._reserved += want
        if own:
            self._handed_over.add(run)
        claimed = None
        try:
            try:
                claimed = await self._report(run, body, ask, retry_for)
            except ProblemError as exc:
                if not _refuses_field(exc, "claim_next"):
                    raise  # (a refused result, say: ``TaskRun`` handles it as ever)
                # A hub that refuses the unknown field: report again without it.
                self._claims_next = False
                await self._report(run, body, None, retry_for)
                return
        finally:
            self._reserved -= want
            if claimed is None:  # nothing claimed for the slot: the run holds it to its end
                self._handed_over.discard(run)
        if claimed is None:
            log.info("The hub does not claim with end reports; the claimer claims alone")
            self._claims_next = False
            return
        for task in claimed:
            self._launch(task, worker_id)
        self._grant(want - len(claimed))

    async def _report(
        self,
        run: TaskRun,
        body: dict[str, Any],
        ask: dict[str, Any] | None,
        retry_for: float,
    ) -> list[ClaimedTask] | None:
        """One end report (over the link if it can, else or failing that by PATCH), asking
        for the next tasks with ``ask``: those tasks, or None from a hub that ignored the
        ask (or when there was none)."""
        sent = False
        link = self.link
        size = run.result_bytes if "result" in body else 0
        over_link = size <= LINK_RESULT_BYTES and fits_link(body, size)
        if self._updates_over_link and link is not None and over_link:
            update = {**body, "claim_token": run.task.claim_token}
            if ask is not None:
                update["claim_next"] = ask
            sent = link.listening
            try:
                reply = await link.update(run.task.id, update, LINK_UPDATE_SECONDS)
            except ProblemError as exc:
                if exc.status != 404 or exc.slug != "not-found":
                    raise
                log.info("The hub does not take task_update; reporting by PATCH")
                self._updates_over_link = sent = False
                reply = None
            if reply is not None:
                return None if ask is None else next_tasks(reply)
        try:
            if ask is None:
                await self.api.update_task(run.task, body, retry_for=retry_for)
                return None
            return await self.api.end_task(run.task, body, ask, retry_for=retry_for)
        except ProblemError as exc:
            exc.retried = exc.retried or sent  # the link's update may have been applied
            raise

    # -- push --------------------------------------------------------------------

    def _grant(self, slots: int) -> None:
        """Grant the hub ``slots`` found idle (0: ask it to look again), unless the hub or
        the link cannot take them, or the worker is stopping."""
        link = self.link
        if not self._pushes or link is None or not link.listening or self._stopping.is_set():
            return
        if slots < 0 or (slots == 0 and not self._granted):
            return
        self._granted += slots
        self._unanswered += slots
        self._spawn(self._granted_by_hub(link, slots))

    async def _granted_by_hub(self, link: SocketLink, slots: int) -> None:
        held = await link.grant(slots)
        self._unanswered = max(self._unanswered - slots, 0)  # (a drop cleared it)
        if held is None:  # refused or no answer: the slots are this worker's again
            if link.listening:
                log.info("The hub does not take granted slots; the claimer claims alone")
                self._pushes = False
            self._granted = self._unanswered
        else:
            # The hub's count, after every push it sent before its answer (those arrived
            # first and were taken off already), plus what later calls grant.
            self._granted = held + self._unanswered
        self._kick.set()

    async def _take_back_grant(self) -> None:
        assert self.link is not None
        await self.link.pause(within=1.0)
        self._granted = 0

    def _pushed(self, worker_id: str, tasks: list[dict[str, Any]]) -> None:
        """Tasks the hub claimed and started for this worker: run them."""
        self._granted = max(self._granted - len(tasks), 0)
        if worker_id != self.worker_id:
            log.warning(
                "%d pushed task(s) for an earlier id of this worker: left to their lease",
                len(tasks),
            )
            return
        for body in tasks:
            try:
                task = ClaimedTask.model_validate(body)
            except ValueError as exc:
                log.error("A pushed task could not be read (left to its lease): %s", exc)
                continue
            self._launch(task, worker_id)

    def _provider_request(self, name: str, request_id: str, params: str) -> None:
        """A read of one of this worker's providers: answered in the background."""
        provider, provider_id = self.providers.get(name), self._provider_ids.get(name)
        if provider is None or provider_id is None or self._stopping.is_set():
            return
        self._spawn(self._answer(provider, provider_id, request_id, params))

    async def _answer(
        self, provider: ProviderSpec, provider_id: str, request_id: str, params: str
    ) -> None:
        body, failed = await provider.answer(params)
        if failed:
            log.warning("Provider %s failed a read: %s", provider.full_name, body[:300])
        try:
            await self.api.post_provider_result(provider_id, request_id, body, failed=failed)
        except (HubUnavailable, ProblemError) as exc:  # its readers time out and ask again
            log.warning("Answer of provider %s not delivered: %s", provider.full_name, exc)

    def _link_dropped(self) -> None:
        """The hub forgets a dropped socket's grants: the slots are free again."""
        self._granted = self._unanswered = 0
        self._beat_now.set()
        self._kick.set()

    def _launch(self, task: ClaimedTask, worker_id: str) -> None:
        spec = self.specs.get(task.job_name)
        if spec is None:  # cannot happen with a correct hub; fail the task rather than hold it
            error = f"Worker {worker_id} does not serve {task.job_name}"
            self._spawn(self._reject(task, error))
            return
        run = _EngineRun(task, spec, self.api, worker_id=worker_id, on_auth_lost=self._give_up)
        run.engine = self
        job = asyncio.create_task(run.execute(), name=f"taskhub-task-{task.id}")
        self._runs[run] = job
        job.add_done_callback(functools.partial(self._finished, run))

    async def _reject(self, task: ClaimedTask, error: str) -> None:
        log.error("Task %s: %s", task.id, error)
        with contextlib.suppress(HubUnavailable, ProblemError):
            await self.api.update_task(task, {"status": "failed", "error": error})

    def _spawn(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        job = asyncio.create_task(coroutine)
        self._background.add(job)
        job.add_done_callback(self._background.discard)

    def _finished(self, run: TaskRun, job: asyncio.Task[None]) -> None:
        self._runs.pop(run, None)
        self._handed_over.discard(run)
        if not job.cancelled() and job.exception() is not None:
            log.error("Task %s: unexpected error", run.id, exc_info=job.exception())
        self._kick.set()

    # -- shutdown ----------------------------------------------------------------

    async def _until_drain_over(self, tasks: Iterable[asyncio.Task[Any]]) -> None:
        """Wait until ``tasks`` are done or the drain is over, whichever comes first."""
        pending = set(tasks)
        over = asyncio.create_task(self._drain_over.wait())
        try:
            while pending and not over.done():
                done, _ = await asyncio.wait({*pending, over}, return_when=asyncio.FIRST_COMPLETED)
                pending -= done
        finally:
            over.cancel()

    async def _drain(self) -> None:
        """Let in-flight runs finish (heartbeats go on) until the drain is over."""
        if self._runs and not self._drain_over.is_set():
            log.info(
                "Draining %d task(s) (up to %.0fs)", len(self._runs), self.config.drain_timeout
            )
            await self._until_drain_over(list(self._runs.values()))

    async def _leave(self) -> None:
        """Fail what still runs, leave the job rooms and deregister, within
        ``LEAVE_SECONDS`` (or by the deadline of a stop's timeout)."""
        loop = asyncio.get_running_loop()
        by = loop.time() + LEAVE_SECONDS
        if self._done_by is not None:
            by = min(by, self._done_by)
        await self._abandon_runs(within=max(by - loop.time(), 0.0) / 2)
        left = max(by - loop.time(), 0.0)
        await asyncio.gather(self._leave_rooms(left), self._deregister(left))

    async def _abandon_runs(self, *, within: float) -> None:
        """Stop the runs still going: report their tasks failed (to be retried while they
        have attempts left; trying for up to ``within`` seconds), and signal them."""
        leftovers = list(self._runs.items())
        for _run, job in leftovers:
            job.cancel()
        reports = (run.fail(SHUTDOWN_ERROR, within=within) for run, _job in leftovers)
        await asyncio.gather(*reports, return_exceptions=True)
        for run, _job in leftovers:
            run.cancel()
        await asyncio.gather(*(job for _run, job in leftovers), return_exceptions=True)

    async def _leave_rooms(self, within: float) -> None:
        if self.link is not None:
            await self.link.leave_all(within=within)

    async def _deregister(self, within: float) -> None:
        if self.worker_id is None or isinstance(self.fatal, AuthError):
            return
        try:
            await self.api.delete_worker(self.worker_id, retry_for=within)
        except NotFound:
            log.info("Worker %s was no longer known to the hub", self.worker_id)
        except (HubUnavailable, ProblemError) as exc:
            log.warning("Could not remove worker %s: %s", self.worker_id, exc)
        else:
            log.info("Worker %s left the hub", self.worker_id)

    async def _close(self) -> None:
        for timer in self._timers:
            timer.cancel()
        if self.link is not None:
            timeout = CLOSE_SECONDS
            if self._done_by is not None:
                remaining = self._done_by - asyncio.get_running_loop().time()
                timeout = max(remaining, 0.0) + self._close_margin / 2
            await self.link.close(within=timeout)
        await self._hub.aclose()


def _refuses_field(exc: ProblemError, field: str) -> bool:
    """Whether a 422 names ``field``: a hub strict about fields it does not know."""
    return exc.status == 422 and field in f"{exc.errors} {exc.detail}"


class _EngineRun(TaskRun):
    """A run of the engine: its end report also claims the worker's next task(s)."""

    engine: WorkerEngine

    async def _send_end(self, body: dict[str, Any], retry_for: float) -> None:
        await self.engine._end_and_claim_next(self, body, retry_for)
