"""Entry point of the taskiq worker process: ``taskiq worker taskhub.internal_jobs.broker:broker``.

Reads the same ``TASKHUB_*`` settings as the server and runs ``@internal`` jobs and
providers with the hub's own ``Execution``. Its events reach browsers through
python-socketio's Redis manager (write-only) and wake long-polls through the wake bus.
"""

from __future__ import annotations

from taskiq import TaskiqEvents, TaskiqState

from taskhub.dispatch.broker import make_broker
from taskhub.realtime.redis_clients import socket_manager
from taskhub.realtime.socket_sink import SocketSink
from taskhub.realtime.waiters import TaskWaiters
from taskhub.runtime import Execution, freeze_start_up
from taskhub.settings import Settings
from taskhub.validation import payload_checks

settings = Settings()
broker = make_broker(settings)
payload_checks.PROCESS_CHECKS.configure(settings)


@broker.on_event(TaskiqEvents.WORKER_STARTUP)
async def start_runtime(state: TaskiqState) -> None:
    execution = Execution.create(settings, TaskWaiters(), pre_ping=True)
    if settings.redis_url:
        manager = socket_manager(settings, write_only=True)
        execution.publisher.add_sink(SocketSink(manager))
    execution.serve_on(broker)  # publishes only: it listens to neither Redis channel
    state.taskhub_execution = execution
    freeze_start_up()


@broker.on_event(TaskiqEvents.WORKER_SHUTDOWN)
async def stop_runtime(state: TaskiqState) -> None:
    await state.taskhub_execution.close()
