"""The taskiq broker for ``@internal`` tasks.

Embedded default: taskiq's in-memory broker; tasks execute inside the server process.
With ``TASKHUB_REDIS_URL``: taskiq-redis's stream broker (messages are acknowledged after
execution, so a killed worker does not lose them), executed by
``taskiq worker internal_jobs.broker:broker``.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from taskiq import AsyncBroker, Context, InMemoryBroker, TaskiqDepends
from taskiq_redis import RedisStreamBroker

from app.dispatch.executor import InternalRuntime, execute
from app.settings import Settings

TASK_NAME = "taskhub.run_internal"


async def run_internal(task_id: str, attempt: int, context: Context = TaskiqDepends()) -> None:
    """The one taskiq task: execute ``(task_id, attempt)`` against the task row."""
    runtime: InternalRuntime = context.state.taskhub
    await execute(runtime, UUID(task_id), attempt)


def make_broker(settings: Settings) -> AsyncBroker:
    broker: Any
    if settings.redis_url:
        broker = RedisStreamBroker(
            settings.redis_url,
            queue_name=settings.redis_key("internal"),
            consumer_group_name=settings.redis_key("executors"),
            # A message taken by a worker that died unacknowledged is redelivered after this.
            idle_timeout=int(settings.internal_redelivery_seconds * 1000),
        )
    else:
        broker = InMemoryBroker()
    broker.register_task(run_internal, task_name=TASK_NAME)
    return broker
