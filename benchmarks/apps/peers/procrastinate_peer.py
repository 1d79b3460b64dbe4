"""procrastinate's side of ``python -m benchmarks peers`` (PostgreSQL, psycopg 3): its
schema (``setup``), a worker of 16 jobs at once (``work``; LISTEN/NOTIFY on, as by
default) and an enqueuer (``enqueue``: ``defer_async`` over a pool of one connection per
concurrent enqueuer). Client and worker talk to PostgreSQL directly."""

from __future__ import annotations

from collections.abc import Sequence

import procrastinate

from benchmarks.apps.peers.protocol import Submit, main, record_start, setting


def _app(pool_size: int | None = None) -> tuple[procrastinate.App, procrastinate.tasks.Task]:
    sizes = {} if pool_size is None else {"min_size": pool_size, "max_size": pool_size}
    connector = procrastinate.PsycopgConnector(conninfo=setting("URL"), **sizes)
    app = procrastinate.App(connector=connector)

    @app.task(name="noop", queue=setting("QUEUE"))
    async def noop(tag: str, seq: int) -> None:
        record_start(tag, seq)

    return app, noop


class ProcrastinatePeer:
    def __init__(self) -> None:
        self.app: procrastinate.App | None = None

    async def setup(self) -> None:
        app, _ = _app()
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    async def work(self, slots: int) -> None:
        app, _ = _app()
        async with app.open_async():
            await app.run_worker_async(queues=[setting("QUEUE")], concurrency=slots)

    async def open_submitters(self, count: int) -> Sequence[Submit]:
        self.app, noop = _app(count)
        await self.app.open_async()

        async def submit(tag: str, seq: int) -> object:
            return await noop.defer_async(tag=tag, seq=seq)

        return [submit] * count

    async def close(self) -> None:
        if self.app is not None:
            await self.app.close_async()


if __name__ == "__main__":
    main(ProcrastinatePeer())
