"""On PostgreSQL every wait on the database is bounded: a request that finds no free pooled
connection within ``TASKHUB_DB_POOL_TIMEOUT_SECONDS``, or whose statement gets no answer
within ``TASKHUB_DB_STATEMENT_TIMEOUT_SECONDS`` (a row lock held elsewhere, a connection
gone half-open), is answered with a 503 ``database-unavailable`` problem and
``Retry-After`` — never a hang, never a 500 — and what it wrote did not commit: the client
repeats it (with its key) once the database answers again.

(Seen: a GET and a submit answered 500 after 61 s behind a pool held by requests waiting on
a row lock; submits on half-open connections left unanswered for ever while ``/readyz``
said 200.)"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from uuid import UUID

import asyncpg
import httpx
import pytest
from sqlalchemy import select, text
from sqlalchemy.engine import make_url

from taskhub.main import TaskhubApp, create_app
from taskhub.services import sweeps
from taskhub.settings import Settings
from taskhub.store.database import Database
from taskhub.store.hot_statements import hot
from taskhub.store.tables import job_table
from tests.support.api import JOB, ApiClient, assert_problem
from tests.support.tcp_proxy import TcpProxy
from tests.support.waiting import eventually

pytestmark = pytest.mark.postgres_only

ONE = hot(text("SELECT 1 AS one"))
# How long an answer may take here: the timeouts below are 1 s; this is generous for a
# loaded machine, and far below the minute (or for ever) it took without them.
BOUND = 8.0


@asynccontextmanager
async def hub(url: str, **settings: Any) -> AsyncIterator[tuple[TaskhubApp, httpx.AsyncClient]]:
    """The hub in-process on ``url`` with these settings (no sweeper: it would use the
    small pools too), and an HTTP client of it."""
    app = create_app(Settings(database_url=url, sweeper_enabled=False, **settings))
    async with app.lifespan_context():
        transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as client:
            yield app, client


@asynccontextmanager
async def row_locked(url: str, table: str, row_id: str) -> AsyncIterator[asyncpg.Connection]:
    """Another session holding ``table``'s row ``row_id`` locked (``FOR UPDATE``)."""
    dsn = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(f"SELECT 1 FROM {table} WHERE id = $1 FOR UPDATE", UUID(row_id))
            yield conn
    finally:
        await conn.close()


async def waiting_on_locks(conn: asyncpg.Connection) -> int:
    """How many sessions of this database wait for a lock, now. ``conn`` is inside the lock's
    transaction, where ``pg_stat_activity`` lists the sessions of its first reading: one
    that connected later (the pool opening its second connection for a waiting PATCH)
    would never be counted without dropping that snapshot."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    return int(
        await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
    )


async def until_waiting_on_locks(conn: asyncpg.Connection, count: int) -> None:
    """Until ``count`` sessions of this database wait for a lock."""

    async def waiting() -> bool:
        return await waiting_on_locks(conn) == count

    await eventually(waiting, 5, f"{count} sessions waiting on a lock", 0.025)


async def job_id(app: TaskhubApp) -> str:
    """The id of ``JOB``."""
    room, category, name = JOB.split(":")
    named = (
        job_table.c.room_id == room,
        job_table.c.category == category,
        job_table.c.name == name,
    )
    async with app.hub.db.read() as conn:
        return str(await conn.scalar(select(job_table.c.id).where(*named)))


def assert_database_unavailable(response: httpx.Response, detail: str) -> None:
    body = assert_problem(response, 503, "database-unavailable")
    assert body["title"] == "Service Unavailable"
    assert detail in body["detail"]
    assert response.headers["retry-after"] == "1"


async def task_status(client: ApiClient, task_id: str) -> str:
    response = await client.get(f"/tasks/{task_id}")
    assert response.status_code == 200, response.text
    return str(response.json()["status"])


async def test_an_exhausted_pool_answers_503_after_the_pool_timeout(database_url, tokens) -> None:
    """Both pooled connections held by PATCHes waiting on a row lock: an unrelated GET and
    a Socket.IO event wait for a connection at most the pool timeout, then get the 503."""
    async with hub(database_url, db_pool_size=2, db_pool_timeout_seconds=1) as (app, http):
        alice = ApiClient(http, tokens.alice)
        worker_id = (await alice.register())["worker_id"]
        locked, other = await alice.submit(JOB), await alice.submit(JOB)
        await app.sockets.connect("sid-pool", {}, {"token": tokens.alice})
        join_job_room = app.sio.handlers["/"]["join_job_room"]
        async with row_locked(database_url, "task", locked["id"]) as lock:
            patches = [
                asyncio.create_task(alice.transition(locked["id"], "cancelled")) for _ in range(2)
            ]
            await until_waiting_on_locks(lock, 2)

            response = await asyncio.wait_for(alice.get(f"/tasks/{other['id']}"), BOUND)
            assert_database_unavailable(response, "No database connection became free within 1 s")
            ack = await asyncio.wait_for(
                join_job_room("sid-pool", {"job_name": JOB, "worker_id": worker_id}), BOUND
            )
            assert ack["status"] == 503, ack
            assert ack["type"] == "/v1/problems/database-unavailable"
            assert "within 1 s" in ack["detail"]
        # The lock gone, the waiting PATCHes go through (one cancels, the other finds it so).
        statuses = sorted(response.status_code for response in await asyncio.gather(*patches))
        assert statuses[0] == 200, statuses
        assert await task_status(alice, other["id"]) == "pending"
        await app.sockets.disconnect("sid-pool")


async def test_a_hot_statement_past_the_statement_timeout_answers_503_and_changes_nothing(
    database_url, tokens
) -> None:
    """A PATCH (a hot statement, straight on the driver) waiting on a row lock held
    elsewhere is cancelled after the statement timeout; the task is as it was, and the
    client's repeat goes through once the lock is gone."""
    async with hub(database_url, db_statement_timeout_seconds=1) as (_app, http):
        alice = ApiClient(http, tokens.alice)
        await alice.register()
        task = await alice.submit(JOB)
        async with row_locked(database_url, "task", task["id"]) as lock:
            response = await asyncio.wait_for(alice.transition(task["id"], "cancelled"), BOUND)
            assert_database_unavailable(response, "The database did not answer within 1 s")
            await until_waiting_on_locks(lock, 0)  # the statement was cancelled, not left
        assert await task_status(alice, task["id"]) == "pending"
        assert (await alice.transition(task["id"], "cancelled")).status_code == 200


async def test_a_transaction_past_the_statement_timeout_answers_503_and_commits_nothing(
    database_url, tokens
) -> None:
    """A keyed claim (a transaction through SQLAlchemy) waiting on its worker's row lock:
    503 after the statement timeout, nothing claimed; the repeat with the same key claims
    the task once."""
    async with hub(database_url, db_statement_timeout_seconds=1) as (_app, http):
        alice = ApiClient(http, tokens.alice)
        worker_id = (await alice.register())["worker_id"]
        task = await alice.submit(JOB)

        async def claim() -> httpx.Response:
            return await alice.post(
                "/tasks/claim", json={"worker_id": worker_id}, headers={"Idempotency-Key": "c1"}
            )

        async with row_locked(database_url, "worker", worker_id) as lock:
            response = await asyncio.wait_for(claim(), BOUND)
            assert_database_unavailable(response, "The database did not answer within 1 s")
            await until_waiting_on_locks(lock, 0)
        assert await task_status(alice, task["id"]) == "pending"
        first, repeat = await claim(), await claim()
        assert first.status_code == repeat.status_code == 200, (first.text, repeat.text)
        assert first.json()["task"]["id"] == repeat.json()["task"]["id"] == task["id"]


async def test_a_task_end_stands_when_its_jobs_cleanup_cannot_run(database_url, tokens) -> None:
    """Cancelling the last pending task of a job without workers commits, then soft-deletes
    the job in a transaction of its own. When that follow-up meets the job row locked past
    the statement timeout, the cancel is still answered 200 and announced (a long-poll on
    the task returns), and the sweeper's orphan sweep deletes the job later.

    (Seen: a 503 for the committed cancel, whose repeat then got 409, and its events were
    never sent: a long-poll waited out its full time.)"""
    async with hub(database_url, db_statement_timeout_seconds=1) as (app, http):
        alice = ApiClient(http, tokens.alice)
        worker_id = (await alice.register())["worker_id"]
        task = await alice.submit(JOB)
        assert (await alice.delete(f"/workers/{worker_id}")).status_code == 204
        assert [j["full_name"] for j in await alice.room_jobs()] == [JOB]  # its task keeps it
        waiting = asyncio.create_task(
            alice.get(f"/tasks/{task['id']}", headers={"Prefer": "wait=30"})
        )
        async with row_locked(database_url, "job", await job_id(app)):
            response = await asyncio.wait_for(alice.transition(task["id"], "cancelled"), BOUND)
            assert response.status_code == 200, response.text
            assert response.json()["status"] == "cancelled"
            woken = await asyncio.wait_for(waiting, BOUND)
            assert woken.json()["status"] == "cancelled"
        assert [j["full_name"] for j in await alice.room_jobs()] == [JOB]
        deleted, _events = await sweeps.soft_delete_orphaned_jobs(app.hub.db)
        assert deleted == 1
        assert await alice.room_jobs() == []


async def test_a_worker_removal_stands_when_its_jobs_cleanup_cannot_run(
    database_url, tokens
) -> None:
    """Removing a job's last worker commits, then soft-deletes the job: with the job row
    locked past the statement timeout, the removal is still answered 204."""
    async with hub(database_url, db_statement_timeout_seconds=1) as (app, http):
        alice = ApiClient(http, tokens.alice)
        worker_id = (await alice.register())["worker_id"]
        async with row_locked(database_url, "job", await job_id(app)):
            response = await asyncio.wait_for(alice.delete(f"/workers/{worker_id}"), BOUND)
            assert response.status_code == 204, response.text
        listed = (await alice.get("/workers")).json()["items"]
        assert worker_id not in [worker["id"] for worker in listed]
        deleted, _events = await sweeps.soft_delete_orphaned_jobs(app.hub.db)
        assert deleted == 1


async def test_half_open_connections_answer_503_and_a_keyed_submit_is_created_once(
    database_url, tokens
) -> None:
    """The hub's connections go half-open (through a proxy that now swallows everything on
    them; new connections get through): a submit is answered 503 after the statement
    timeout, and the client repeating it with its Idempotency-Key gets it created once, as
    soon as the hub is on a fresh connection."""
    target = make_url(database_url)
    with TcpProxy(target.port or 5432) as proxy:
        url = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        async with hub(url, db_pool_size=2, db_statement_timeout_seconds=1) as (_app, http):
            alice = ApiClient(http, tokens.alice)
            await alice.register()
            await alice.submit(JOB)

            async def submit() -> httpx.Response:
                return await alice.post(
                    f"/rooms/room1/tasks/{JOB}",
                    json={"payload": {"angle": 1}},
                    headers={"Idempotency-Key": "s1"},
                )

            proxy.black_hole()
            response = await asyncio.wait_for(submit(), BOUND)
            assert_database_unavailable(response, "The database did not answer within 1 s")
            for _ in range(3):  # each half-open connection fails once, then is gone
                response = await asyncio.wait_for(submit(), BOUND)
                if response.status_code != 503:
                    break
            assert response.status_code == 202, response.text
            assert (await submit()).status_code == 200  # the key: the same task
            listed = await alice.get("/rooms/room1/tasks")
            assert listed.json()["total"] == 2


async def test_connections_have_tcp_keepalive(database_url) -> None:
    """So that an idle pooled connection whose peer vanished is closed within about a
    minute rather than handed out again (the kernel's default waits over two hours)."""
    db = Database(Settings(database_url=database_url))
    try:
        async with db.read() as conn:
            raw = (await conn.sa()).sync_connection.connection.dbapi_connection.driver_connection  # type: ignore[union-attr]
            sock = raw._transport.get_extra_info("socket")
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            idle = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE)
            assert idle == 30  # database.KEEPALIVE_IDLE_SECONDS
    finally:
        await db.dispose()


async def test_connections_run_without_jit(database_url) -> None:
    """A statement PostgreSQL prices high (a page's positions in a queue of 100,000
    delayed tasks) is not compiled first, which would add hundreds of ms to every run."""
    db = Database(Settings(database_url=database_url))
    try:
        async with db.read() as conn:
            assert await conn.scalar(text("SHOW jit")) == "off"
    finally:
        await db.dispose()


async def test_a_pool_of_one_is_not_kept_from_reads(database_url) -> None:
    """The single-statement path keeps up to half the pool checked out between uses: of a
    pool of one, nothing (it kept the one connection, and every read then waited for it)."""
    db = Database(Settings(database_url=database_url, db_pool_size=1, db_pool_timeout_seconds=1))
    try:
        async with db.autocommit() as conn:
            await conn.execute(ONE)  # hot: the connection stays checked out if it may
        async with db.read() as conn:
            assert (await conn.scalar(text("SELECT 2"))) == 2
    finally:
        await db.dispose()
