"""The running hub: the long-lived objects one server process shares across requests."""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from taskiq import AsyncBroker

from taskhub.dispatch.broker import ResilientStreamBroker, make_broker
from taskhub.dispatch.dispatcher import InternalDispatcher
from taskhub.dispatch.executor import InternalRuntime
from taskhub.dispatch.providers import (
    InternalProviderDispatcher,
    InternalProviders,
    ProviderRuntime,
    ensure_internal_providers,
)
from taskhub.dispatch.registry import BUILT_IN_MODULES, InternalRegistry
from taskhub.duties.due_announcer import DueTaskAnnouncer
from taskhub.duties.presence import SharedSockets, WorkerPresence
from taskhub.duties.sweeper import Sweeper
from taskhub.observability import metrics
from taskhub.realtime.outbox import SHUTDOWN_SEND_SECONDS
from taskhub.realtime.provider_results import LocalProviderResults, RedisProviderResults
from taskhub.realtime.publisher import Publisher
from taskhub.realtime.waiters import TaskWaiters
from taskhub.realtime.wake_bus import RedisWakeBus
from taskhub.services.identities import (
    HostAuthenticate,
    HostIdentities,
    Identities,
    IdentitySource,
)
from taskhub.services.internal_tasks import ensure_internal_jobs
from taskhub.services.jobs import KnownJobs
from taskhub.services.jwt_identities import jwt_identities
from taskhub.services.room_access import RoomAccess, RoomPolicy
from taskhub.services.rooms import PrivateRooms
from taskhub.services.task_logs import LogRates
from taskhub.services.users import Authenticator, ensure_admin_token
from taskhub.services.workers import remove_silent_worker
from taskhub.settings import Settings
from taskhub.store.database import Database
from taskhub.store.migrations import check_schema_current


@dataclass
class Execution:
    """What runs ``@internal`` jobs and providers and publishes what they change: the same
    in a hub (on the embedded broker) and in the taskiq worker process (on Redis)."""

    db: Database
    publisher: Publisher
    wake_bus: RedisWakeBus | None
    executor: InternalRuntime
    provider_results: LocalProviderResults | RedisProviderResults
    providers: ProviderRuntime

    @classmethod
    def create(
        cls, settings: Settings, waiters: TaskWaiters, *, pre_ping: bool = False
    ) -> Execution:
        db = Database(settings, pre_ping=pre_ping)
        bus = (
            RedisWakeBus(settings.redis_url, settings.redis_key("task-ended"), waiters)
            if settings.redis_url
            else None
        )
        publisher = Publisher(waiters, bus)
        modules = [*BUILT_IN_MODULES, *settings.internal_job_modules]
        executor = InternalRuntime(
            db=db, publisher=publisher, registry=InternalRegistry.from_modules(modules)
        )
        results = (
            RedisProviderResults(
                settings.redis_url, settings.redis_namespace, settings.provider_cache_max_bytes
            )
            if settings.redis_url
            else LocalProviderResults(settings.provider_cache_max_bytes)
        )
        providers = ProviderRuntime(
            db,
            results,
            publisher,
            InternalProviders.from_modules(modules),
            settings.provider_result_ttl_seconds,
        )
        return cls(db, publisher, bus, executor, results, providers)

    def serve_on(self, broker: AsyncBroker) -> None:
        """Let ``broker``'s tasks run ``@internal`` jobs and providers here."""
        broker.state.taskhub = self.executor
        broker.state.taskhub_providers = self.providers

    async def start(self) -> None:
        if self.wake_bus is not None:
            await self.wake_bus.start()
        if isinstance(self.provider_results, RedisProviderResults):
            await self.provider_results.start()

    async def close(self) -> None:
        await self.publisher.drain(SHUTDOWN_SEND_SECONDS)
        if self.wake_bus is not None:
            await self.wake_bus.close(SHUTDOWN_SEND_SECONDS)
        if isinstance(self.provider_results, RedisProviderResults):
            await self.provider_results.close()
        await self.db.dispose()


@dataclass
class Hub:
    settings: Settings
    db: Database
    auth: Authenticator
    waiters: TaskWaiters
    publisher: Publisher
    broker: AsyncBroker
    internal: InternalDispatcher
    execution: Execution  # runs ``@internal`` tasks here on the embedded (in-memory) broker
    identities: Identities  # who callers are: tokens, then a host's hook, JWTs
    internal_providers: InternalProviderDispatcher
    rooms: RoomAccess = field(default_factory=RoomAccess)  # the room policy
    known_jobs: KnownJobs = field(default_factory=KnownJobs)
    log_rates: LogRates = field(default_factory=LogRates)  # task logs' bounds and rates
    draining: bool = False  # a graceful shutdown has begun (``/readyz`` answers 503)
    presence: WorkerPresence = field(init=False)
    sweeper: Sweeper = field(init=False)
    due_announcer: DueTaskAnnouncer = field(init=False)

    @property
    def wake_bus(self) -> RedisWakeBus | None:
        return self.execution.wake_bus

    @property
    def executor(self) -> InternalRuntime:
        return self.execution.executor

    @property
    def provider_results(self) -> LocalProviderResults | RedisProviderResults:
        return self.execution.provider_results

    def __post_init__(self) -> None:
        shared = (
            SharedSockets(self.settings.redis_url, self.settings.redis_key("worker-sockets"))
            if self.settings.redis_url
            else None
        )
        self.presence = WorkerPresence(
            self.settings.socket_disconnect_grace_seconds,
            self._remove_disconnected_worker,
            shared,
        )
        self.sweeper = Sweeper(
            self.settings,
            self.db,
            self.publisher,
            dispatch=self.internal.dispatch_missed,
            trim=self.broker.trim_done if isinstance(self.broker, ResilientStreamBroker) else None,
        )
        self.due_announcer = DueTaskAnnouncer(
            self.db, self.publisher, dispatch=self.internal.dispatch_due
        )
        self.publisher.add_sink(self.due_announcer)

    @classmethod
    def create(
        cls,
        settings: Settings,
        *,
        authenticate: HostAuthenticate | None = None,
        room_policy: RoomPolicy | None = None,
    ) -> Hub:
        """Build the hub; nothing connects until ``start``. ``authenticate`` and
        ``room_policy``: a host application's hooks (``taskhub.embedding``)."""
        waiters = TaskWaiters()
        execution = Execution.create(settings, waiters)
        db = execution.db
        broker = make_broker(settings)
        # Embedded (in-memory broker): internal tasks and providers run right here.
        execution.serve_on(broker)
        tokens = Authenticator(
            db,
            settings.auth_cache_seconds,
            settings.auth_miss_cache_seconds,
            on_miss=metrics.auth_miss,
        )
        sources: list[IdentitySource] = []
        if authenticate is not None:
            sources.append(HostIdentities(authenticate))
        jwts = jwt_identities(settings)
        if jwts is not None:
            sources.append(jwts)
        return cls(
            settings=settings,
            db=db,
            auth=tokens,
            waiters=waiters,
            publisher=execution.publisher,
            broker=broker,
            internal=InternalDispatcher(db, broker, execution.executor.registry),
            execution=execution,
            identities=Identities(db, tokens, sources),
            internal_providers=InternalProviderDispatcher(execution.providers.registry, broker),
            rooms=RoomAccess(room_policy, PrivateRooms(db, settings.auth_cache_seconds)),
        )

    async def start(self) -> None:
        await check_schema_current(self.db)
        if self.settings.admin_token:
            await ensure_admin_token(self.db, self.settings.admin_token)
        await ensure_internal_jobs(
            self.db,
            {
                f"{job.category}:{job.job_name()}": job.json_schema()
                for job in self.internal.registry
            },
            {f"{job.category}:{job.job_name()}" for job in self.internal.registry if job.costly},
        )
        await ensure_internal_providers(self.db, self.internal_providers.registry)
        await self.broker.startup()
        await self.execution.start()
        self.presence.start()
        if self.settings.sweeper_enabled:
            self.sweeper.start()
        self.due_announcer.start()

    async def begin_shutdown(self) -> None:
        """Answer every waiting long-poll now and stop the background timers (graceful
        shutdown; ``close`` follows once the server's connections are done)."""
        self.draining = True
        self.presence.stop_grace_periods()
        self.waiters.release_all()
        self.provider_results.release_all()
        await self.sweeper.stop()
        await self.due_announcer.stop()

    async def close(self) -> None:
        await self.sweeper.stop()
        await self.due_announcer.stop()
        self.waiters.release_all()
        await self.presence.close()
        await self.identities.close()
        await self.executor.drain(self.settings.graceful_shutdown_seconds)
        await self.broker.shutdown()
        await self.execution.close()

    async def _remove_disconnected_worker(self, worker_id: UUID, since: datetime) -> bool:
        events = await remove_silent_worker(
            self.db, worker_id, since, policy=self.settings.retry_policy
        )
        if events is None:
            return False
        await self.publisher.publish(events)
        return True


def freeze_start_up() -> None:
    """Move every object alive now (modules, the app, its pools: some 150,000 of them) out
    of the garbage collector's sight for good. A server process calls it once it has
    started: a big request body allocates tens of thousands of lists or dicts, and each
    collection they set off walked all of those objects again (a 560 kB payload of 40,000
    points took 105-114 ms to submit in-process here, 34-41 ms frozen). Not for a process
    that starts and stops many apps (tests): what one leaves behind would never go."""
    gc.collect()
    gc.freeze()
