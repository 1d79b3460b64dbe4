"""Entry point of the taskiq worker process: ``taskiq worker taskhub.internal_jobs.broker:broker``.

Reads the same ``TASKHUB_*`` settings as the server. Its events reach browsers through
python-socketio's Redis manager (write-only) and wake long-polls through the wake bus.
"""

from __future__ import annotations

from taskiq import TaskiqEvents, TaskiqState

from taskhub.dispatch.broker import make_broker
from taskhub.dispatch.executor import InternalRuntime
from taskhub.dispatch.providers import InternalProviders, ProviderRuntime
from taskhub.dispatch.registry import BUILT_IN_MODULES, InternalRegistry
from taskhub.realtime.outbox import SHUTDOWN_SEND_SECONDS
from taskhub.realtime.provider_results import LocalProviderResults, RedisProviderResults
from taskhub.realtime.publisher import Publisher
from taskhub.realtime.redis_clients import socket_manager
from taskhub.realtime.socket_sink import SocketSink
from taskhub.realtime.waiters import TaskWaiters
from taskhub.realtime.wake_bus import RedisWakeBus
from taskhub.runtime import freeze_start_up
from taskhub.settings import Settings
from taskhub.store.database import Database
from taskhub.validation import payload_checks

settings = Settings()
broker = make_broker(settings)
payload_checks.PROCESS_CHECKS.deadline_seconds = settings.payload_validation_seconds
payload_checks.PROCESS_CHECKS.most_waiting_per_user = settings.user_max_costly_validations


@broker.on_event(TaskiqEvents.WORKER_STARTUP)
async def start_runtime(state: TaskiqState) -> None:
    db = Database(settings, pre_ping=True)
    bus = (
        RedisWakeBus(settings.redis_url, settings.redis_key("task-ended"), TaskWaiters())
        if settings.redis_url
        else None
    )
    publisher = Publisher(TaskWaiters(), bus)
    if settings.redis_url:
        manager = socket_manager(settings, write_only=True)
        publisher.add_sink(SocketSink(manager))
    registry = InternalRegistry.from_modules([*BUILT_IN_MODULES, *settings.internal_job_modules])
    state.taskhub = InternalRuntime(db=db, publisher=publisher, registry=registry)
    providers = InternalProviders.from_modules([*BUILT_IN_MODULES, *settings.internal_job_modules])
    results = (
        RedisProviderResults(
            settings.redis_url, settings.redis_namespace, settings.provider_cache_max_bytes
        )
        if settings.redis_url
        else LocalProviderResults(settings.provider_cache_max_bytes)
    )
    state.taskhub_providers = ProviderRuntime(
        db, results, publisher, providers, settings.provider_result_ttl_seconds
    )
    state.taskhub_bus = bus
    freeze_start_up()


@broker.on_event(TaskiqEvents.WORKER_SHUTDOWN)
async def stop_runtime(state: TaskiqState) -> None:
    await state.taskhub.publisher.drain(SHUTDOWN_SEND_SECONDS)
    if state.taskhub_bus is not None:
        await state.taskhub_bus.close(SHUTDOWN_SEND_SECONDS)
    if isinstance(state.taskhub_providers.results, RedisProviderResults):
        await state.taskhub_providers.results.close()
    await state.taskhub.db.dispose()
