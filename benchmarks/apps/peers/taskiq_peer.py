"""taskiq's side of ``python -m benchmarks peers`` (Redis streams, ``taskiq-redis``'s
``RedisStreamBroker``, no result backend): a worker of 16 jobs at once (``work``: taskiq's
receiver in this process, ``max_async_tasks`` 16, arguments checked against the task's
type hints as by default) and an enqueuer (``enqueue``: ``kiq`` on one broker, whose Redis
client pools connections)."""

from __future__ import annotations

from collections.abc import Sequence

from taskiq.api import run_receiver_task
from taskiq_redis import RedisStreamBroker

from benchmarks.apps.peers.protocol import Submit, main, record_start, setting


async def noop(tag: str, seq: int) -> None:
    """A coroutine: taskiq runs plain functions in a thread pool."""
    record_start(tag, seq)


def _broker() -> RedisStreamBroker:
    return RedisStreamBroker(setting("URL"), queue_name=setting("QUEUE"))


class TaskiqPeer:
    def __init__(self) -> None:
        self.broker: RedisStreamBroker | None = None

    async def setup(self) -> None:
        """Nothing: the stream and its consumer group are made by the worker's start-up."""

    async def work(self, slots: int) -> None:
        broker = _broker()
        broker.register_task(noop, task_name="noop")
        broker.is_worker_process = True
        await broker.startup()
        try:
            await run_receiver_task(broker, max_async_tasks=slots)
        finally:
            await broker.shutdown()

    async def open_submitters(self, count: int) -> Sequence[Submit]:
        broker = self.broker = _broker()
        task = broker.register_task(noop, task_name="noop")
        await broker.startup()

        async def submit(tag: str, seq: int) -> object:
            return await task.kiq(tag, seq)

        return [submit] * count

    async def close(self) -> None:
        if self.broker is not None:
            await self.broker.shutdown()


if __name__ == "__main__":
    main(TaskiqPeer())
