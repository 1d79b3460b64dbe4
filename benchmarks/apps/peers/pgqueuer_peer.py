"""PgQueuer's side of ``python -m benchmarks peers`` (PostgreSQL, asyncpg): its schema
(``setup``: ``Queries.install``), a worker of 16 jobs at once (``work``:
``max_concurrent_tasks`` 16, batches of 8, the most it allows at that cap) and an enqueuer
(``enqueue``: ``Queries.enqueue`` over an asyncpg pool of one connection per concurrent
enqueuer). Client and worker talk to PostgreSQL directly."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg
from pgqueuer import Job, PgQueuer, Queries

from benchmarks.apps.peers.protocol import Submit, main, record_start, setting

ENTRYPOINT = "noop"


class PgQueuerPeer:
    def __init__(self) -> None:
        self.pool: asyncpg.Pool | None = None

    async def setup(self) -> None:
        connection = await asyncpg.connect(setting("URL"))
        try:
            await Queries.from_asyncpg_connection(connection).install()
        finally:
            await connection.close()

    async def work(self, slots: int) -> None:
        connection = await asyncpg.connect(setting("URL"))
        try:
            pgq = PgQueuer.from_asyncpg_connection(connection)

            @pgq.entrypoint(ENTRYPOINT)
            async def noop(job: Job) -> None:
                tag, seq = (job.payload or b"").decode().split()
                record_start(tag, int(seq))

            await pgq.run(batch_size=slots // 2, max_concurrent_tasks=slots)
        finally:
            await connection.close()

    async def open_submitters(self, count: int) -> Sequence[Submit]:
        self.pool = await asyncpg.create_pool(setting("URL"), min_size=count, max_size=count)
        queries = Queries.from_asyncpg_pool(self.pool)

        async def submit(tag: str, seq: int) -> object:
            return await queries.enqueue(ENTRYPOINT, f"{tag} {seq}".encode())

        return [submit] * count

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()


if __name__ == "__main__":
    main(PgQueuerPeer())
