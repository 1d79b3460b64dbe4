"""Taskhub's side of ``python -m benchmarks peers``: the no-op job, served by ``taskhub
worker benchmarks.apps.peers.taskhub_peer:Noop --room ROOM --concurrency 16``, and its
enqueuer (``enqueue``): one SDK ``AsyncClient`` per concurrent enqueuer, each submit an
``AsyncClient.submit`` to the hub (``BENCH_PEERS_URL``, token ``BENCH_PEERS_TOKEN``) in
room ``BENCH_PEERS_QUEUE``. Runs in Taskhub's own environment."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence

from benchmarks.apps.peers.protocol import Submit, main, record_start, setting
from taskhub.sdk import AsyncClient, Extension, NotFound, TaskContext

JOB = "modifiers:Noop"


class Noop(Extension):
    """Records its start and does nothing else (a coroutine: no thread per run)."""

    category = "modifiers"
    tag: str
    seq: int

    async def run(self, ctx: TaskContext) -> None:
        record_start(self.tag, self.seq)


class TaskhubPeer:
    def __init__(self) -> None:
        self.clients: list[AsyncClient] = []

    async def setup(self) -> None:
        """Nothing: the hub's database is migrated, the worker registers the job."""

    async def work(self, slots: int) -> None:
        raise NotImplementedError("the worker is `taskhub worker`")

    async def open_submitters(self, count: int) -> Sequence[Submit]:
        url, token, room = setting("URL"), setting("TOKEN"), setting("QUEUE")
        submitters = []
        for _ in range(count):
            client = AsyncClient(url, token, timeout=30.0)
            await client.__aenter__()
            self.clients.append(client)
            with contextlib.suppress(NotFound):  # connected before the clock starts
                await client.get(str(uuid.uuid4()))
            submitters.append(_submitter(client, room))
        return submitters

    async def close(self) -> None:
        for client in self.clients:
            await client.__aexit__(None, None, None)


def _submitter(client: AsyncClient, room: str) -> Submit:
    async def submit(tag: str, seq: int) -> object:
        return await client.submit(f"{room}:{JOB}", {"tag": tag, "seq": seq}, room=room)

    return submit


if __name__ == "__main__":
    main(TaskhubPeer(), commands=("enqueue",))
