"""SAQ's side of ``python -m benchmarks peers`` (Redis): a worker of 16 jobs at once
(``work``) and an enqueuer (``enqueue``: ``Queue.enqueue`` on one queue, whose Redis
client pools connections). Nothing to set up: a queue is its keys."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from saq import Queue, Worker

from benchmarks.apps.peers.protocol import Submit, main, record_start, setting


async def noop(ctx: dict[str, Any], *, tag: str, seq: int) -> None:
    record_start(tag, seq)


def _queue() -> Queue:
    return Queue.from_url(setting("URL"), name=setting("QUEUE"))


class SaqPeer:
    def __init__(self) -> None:
        self.queue: Queue | None = None

    async def setup(self) -> None:
        """Nothing: a SAQ queue is its Redis keys."""

    async def work(self, slots: int) -> None:
        worker = Worker(_queue(), functions=[noop], concurrency=slots)
        try:
            await worker.start()
        finally:
            await worker.stop()

    async def open_submitters(self, count: int) -> Sequence[Submit]:
        queue = self.queue = _queue()
        await queue.connect()

        async def submit(tag: str, seq: int) -> object:
            return await queue.enqueue("noop", tag=tag, seq=seq)

        return [submit] * count

    async def close(self) -> None:
        if self.queue is not None:
            await self.queue.disconnect()


if __name__ == "__main__":
    main(SaqPeer())
