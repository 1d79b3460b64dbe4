"""SQLite's writer commits the autocommit statements of concurrent requests in groups:
each statement still succeeds or fails on its own, nobody hears back before the group's
commit, a failed commit fails every statement of its group, and a transaction has the
writer to itself."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import insert, select
from sqlalchemy.exc import IntegrityError

from taskhub.clock import new_id, utcnow
from taskhub.settings import Settings
from taskhub.store.database import Database, SharedOrExclusive
from taskhub.store.sqlite_driver import _run_group
from taskhub.store.tables import user_table
from tests.support.databases import create_schema_from_models
from tests.support.waiting import eventually


@pytest.fixture
async def sqlite_db(tmp_path: Path) -> AsyncIterator[Database]:
    db = Database(Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'group.db'}"))
    await create_schema_from_models(db)
    yield db
    await db.dispose()


async def add_user(db: Database, name: str) -> None:
    async with db.autocommit() as conn:
        await conn.execute(
            insert(user_table).values(
                id=new_id(), name=name, is_superuser=False, created_at=utcnow()
            )
        )


async def user_names(db: Database) -> list[str]:
    async with db.read() as conn:
        return sorted((await conn.execute(select(user_table.c.name))).scalars())


def commit_group(db: Database):  # type: ignore[no-untyped-def]
    return db.engine.sync_engine.dialect.dbapi.shares["writer"].group


async def test_concurrent_statements_share_commits_and_each_answers_for_itself(
    sqlite_db: Database,
) -> None:
    names = [f"user{n}" for n in range(40)] + ["user7"]  # one duplicate: a unique violation
    outcomes = await asyncio.gather(
        *(add_user(sqlite_db, name) for name in names), return_exceptions=True
    )
    failures = [outcome for outcome in outcomes if outcome is not None]
    assert len(failures) == 1 and isinstance(failures[0], IntegrityError)
    assert await user_names(sqlite_db) == sorted(set(names))
    group = commit_group(sqlite_db)
    assert group.statements >= len(names)
    assert group.groups < group.statements, "no two statements ever shared a commit"


def test_a_failed_commit_fails_every_statement_of_its_group(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "plain.db", isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    conn.execute("CREATE TABLE parent (id INTEGER PRIMARY KEY)")
    conn.execute(
        "CREATE TABLE child (id INTEGER PRIMARY KEY, parent_id INTEGER "
        "REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)"
    )
    # A deferred foreign key is checked at COMMIT: the group's commit fails.
    statements = [
        ("INSERT INTO parent (id) VALUES (?)", (1,)),
        ("INSERT INTO child (id, parent_id) VALUES (?, ?)", (1, 99)),
        ("INSERT INTO parent (id) VALUES (?)", (1,)),  # fails alone, in its savepoint
    ]
    outcomes = _run_group(conn, statements)
    assert all(isinstance(outcome, sqlite3.IntegrityError) for outcome in outcomes)
    assert "FOREIGN KEY" in str(outcomes[0])
    assert not conn.in_transaction
    assert conn.execute("SELECT count(*) FROM parent").fetchone() == (0,)

    statements[1] = ("INSERT INTO child (id, parent_id) VALUES (?, ?)", (1, 1))
    outcomes = _run_group(conn, statements)
    assert not isinstance(outcomes[0], Exception) and not isinstance(outcomes[1], Exception)
    assert isinstance(outcomes[2], sqlite3.IntegrityError)
    assert conn.execute("SELECT count(*) FROM parent").fetchone() == (1,)
    assert conn.execute("SELECT count(*) FROM child").fetchone() == (1,)


async def test_a_transaction_has_the_writer_to_itself(sqlite_db: Database) -> None:
    in_transaction = asyncio.Event()
    release = asyncio.Event()

    async def long_transaction() -> None:
        async with sqlite_db.write() as conn:
            await conn.execute(
                insert(user_table).values(
                    id=new_id(), name="in-tx", is_superuser=False, created_at=utcnow()
                )
            )
            in_transaction.set()
            await release.wait()

    transaction = asyncio.create_task(long_transaction())
    await in_transaction.wait()
    autocommit = asyncio.create_task(add_user(sqlite_db, "after-tx"))
    gate = sqlite_db._writer_gate
    assert gate is not None
    await eventually(lambda: gate._shared_waiting == 1, 5, "the grouped work to wait at the gate")
    assert not autocommit.done(), "grouped work ran inside someone else's transaction"
    release.set()
    await asyncio.gather(transaction, autocommit)
    assert await user_names(sqlite_db) == ["after-tx", "in-tx"]


async def test_sharers_that_waited_go_before_an_exclusive_holder_coming_straight_back() -> None:
    """A purge in batches takes the gate again right after each batch: the writes that
    waited for one batch get their turn before the next."""
    gate = SharedOrExclusive()
    log: list[str] = []
    batch_done = asyncio.Event()

    async def batches() -> None:
        for n in (1, 2):
            async with gate.exclusive():
                log.append(f"batch {n}")
                batch_done.set()
                await asyncio.sleep(0.01)

    async def write() -> None:
        async with gate.shared():
            log.append("write")

    purge = asyncio.create_task(batches())
    await batch_done.wait()
    writes = [asyncio.create_task(write()) for _ in range(2)]
    await asyncio.gather(purge, *writes)
    assert log == ["batch 1", "write", "write", "batch 2"]


async def test_a_sharer_that_gives_up_its_turn_does_not_hold_the_gate() -> None:
    gate = SharedOrExclusive()

    async def write() -> None:
        async with gate.shared():
            pass

    async with gate.exclusive():
        waiter = asyncio.create_task(write())
        await asyncio.sleep(0)  # it waits for the exclusive holder
    waiter.cancel()  # its turn came, but it is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await waiter
    async with asyncio.timeout(5), gate.exclusive():  # the turn did not stay with it
        pass


async def test_the_gate_lets_sharers_in_together_and_an_exclusive_holder_alone() -> None:
    gate = SharedOrExclusive()
    log: list[str] = []
    first_in = asyncio.Event()
    let_go = asyncio.Event()

    async def sharer(name: str) -> None:
        async with gate.shared():
            log.append(f"{name} in")
            first_in.set()
            await let_go.wait()
            log.append(f"{name} out")

    async def exclusive() -> None:
        async with gate.exclusive():
            log.append("exclusive")

    first = asyncio.create_task(sharer("a"))
    await first_in.wait()
    second = asyncio.create_task(sharer("b"))
    await asyncio.sleep(0)
    waiting = asyncio.create_task(exclusive())
    await asyncio.sleep(0)
    late = asyncio.create_task(sharer("c"))  # comes after a waiting exclusive holder
    await eventually(lambda: gate._shared_waiting == 1, 5, "c to wait at the gate")
    assert log == ["a in", "b in"]
    let_go.set()
    await asyncio.gather(first, second, waiting, late)
    assert log.index("exclusive") > max(log.index("a out"), log.index("b out"))
    assert log.index("c in") > log.index("exclusive")


SLOW = (
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3000000) "
    "SELECT count(*) FROM c"
)


@pytest.mark.parametrize("how", ["transaction", "autocommit"])
async def test_a_write_cancelled_mid_statement_leaves_the_writer_usable(
    sqlite_db: Database, how: str
) -> None:
    """SQLAlchemy ends a connection whose statement was cancelled (a request or a timer
    cancelled mid-write); on the one shared writer that rolls back what the cancelled
    write left open, and every later write works (it closed the writer for good)."""
    await add_user(sqlite_db, "before")

    async def cancelled() -> None:
        if how == "transaction":
            async with sqlite_db.write() as conn:
                await conn.execute(
                    insert(user_table).values(
                        id=new_id(), name="rolled back", is_superuser=False, created_at=utcnow()
                    )
                )
                await conn.exec_driver_sql(SLOW)
        else:
            async with sqlite_db.autocommit() as conn:
                await conn.exec_driver_sql(SLOW)

    write = asyncio.create_task(cancelled())
    # No event says the statement is under way (it runs in the driver's thread): give it
    # the time to start, so that the cancel lands mid-statement.
    await asyncio.sleep(0.05)
    write.cancel()
    await asyncio.gather(write, return_exceptions=True)
    await add_user(sqlite_db, "after, alone")
    async with sqlite_db.write() as conn:
        await conn.execute(
            insert(user_table).values(
                id=new_id(), name="after, in a transaction", is_superuser=False, created_at=utcnow()
            )
        )
    assert await user_names(sqlite_db) == ["after, alone", "after, in a transaction", "before"]
