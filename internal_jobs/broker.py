"""Entry point of the taskiq worker process: ``taskiq worker internal_jobs.broker:broker``.

Reads the same ``TASKHUB_*`` settings as the server. Its events reach browsers through
python-socketio's Redis manager (write-only) and wake long-polls through the wake bus.
"""

from __future__ import annotations

from taskiq import TaskiqEvents, TaskiqState

from app.dispatch.broker import make_broker
from app.dispatch.executor import InternalRuntime
from app.dispatch.registry import BUILT_IN_MODULES, InternalRegistry
from app.domain import payload_checks
from app.persistence.database import Database
from app.realtime.outbox import SHUTDOWN_SEND_SECONDS
from app.realtime.publisher import Publisher
from app.realtime.redis_clients import socket_manager
from app.realtime.socket_sink import SocketSink
from app.realtime.waiters import TaskWaiters
from app.realtime.wake_bus import RedisWakeBus
from app.runtime import freeze_start_up
from app.settings import Settings

settings = Settings()
broker = make_broker(settings)
payload_checks.PROCESS_CHECKS.deadline_seconds = settings.payload_validation_seconds


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
    state.taskhub_bus = bus
    freeze_start_up()


@broker.on_event(TaskiqEvents.WORKER_SHUTDOWN)
async def stop_runtime(state: TaskiqState) -> None:
    await state.taskhub.publisher.drain(SHUTDOWN_SEND_SECONDS)
    if state.taskhub_bus is not None:
        await state.taskhub_bus.close(SHUTDOWN_SEND_SECONDS)
    await state.taskhub.db.dispose()
