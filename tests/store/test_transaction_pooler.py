"""PostgreSQL through a real PgBouncer in transaction mode (``TASKHUB_DATABASE_POOLER=
transaction``): two server connections shared by every client, so that whatever relied on
session state (a named prepared statement, a session advisory lock) breaks here.

The hot-statement tests and the sweeper's lease tests run here again, through the bouncer
(imported: pytest collects them in this module, with this module's fixtures). Debian's
PgBouncer 1.18 has no prepared statement support; the first test shows that it is one
that catches named statements."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from taskhub.duties.sweeper import Sweeper
from taskhub.settings import Settings
from taskhub.store.cluster_lease import ClusterLease
from taskhub.store.database import Database
from taskhub.store.tables import cluster_lease_table
from tests.conftest import run_sync
from tests.duties.test_sweeper import (  # noqa: F401 (collected here, through the bouncer)
    age_worker,
    sweeper,
    test_an_expired_lease_fails_the_task_and_tells_its_worker,
    test_one_replica_sweeps_and_another_takes_over_when_it_stops,
    test_two_sweepers_at_once_do_the_work_once,
)
from tests.store.test_hot_statements import (  # noqa: F401 (collected here, through the bouncer)
    test_a_hot_read_gives_what_sqlalchemy_gives,
    test_a_hot_write_returns_typed_rows_and_is_committed,
    test_a_missing_parameter_sends_nothing,
    test_a_text_statement_names_its_columns_as_the_driver_does,
    test_none_is_written_as_sqlalchemy_writes_it,
    test_statements_not_marked_hot_run_through_sqlalchemy,
)
from tests.support.api import ApiClient
from tests.support.databases import (
    _asyncpg_dsn,
    create_postgres_database,
    create_schema_from_models,
    drop_postgres_database,
    truncate_all,
)
from tests.support.pgbouncer import PgBouncer
from tests.support.waiting import eventually

pytestmark = pytest.mark.postgres  # PgBouncer in front of PostgreSQL, whatever the engine
CLIENTS = 8
CYCLES = 12


@pytest.fixture(scope="module")
def bouncer() -> Iterator[PgBouncer]:
    with PgBouncer(default_pool_size=2) as running:
        yield running


@pytest.fixture(scope="module")
def direct_url() -> Iterator[str]:
    """The module's own database (schema from the models), reached directly."""

    async def create() -> str:
        url = await create_postgres_database("taskhub_pooler")
        db = Database(Settings(database_url=url))
        await create_schema_from_models(db)
        await db.dispose()
        return url

    url = run_sync(create())
    yield url
    run_sync(drop_postgres_database(url))


@pytest.fixture
async def database_url(direct_url: str, bouncer: PgBouncer) -> str:
    """The module's database, emptied, through the bouncer."""
    db = Database(Settings(database_url=direct_url))
    await truncate_all(db)
    await db.dispose()
    return bouncer.url(direct_url)


@pytest.fixture
def settings(database_url: str) -> Settings:
    """Transaction mode; the hub's own sweeper off (the tests drive their own)."""
    return Settings(
        database_url=database_url,
        database_pooler="transaction",
        long_poll_max_wait_seconds=5,
        sweeper_enabled=False,
        worker_timeout_seconds=60,
        internal_task_timeout_seconds=60,
    )


async def advisory_locks(direct_url: str) -> int:
    """Advisory locks held on the module's database now (any session's)."""
    conn = await asyncpg.connect(_asyncpg_dsn(direct_url))
    try:
        return int(
            await conn.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
                " AND database = (SELECT oid FROM pg_database WHERE datname = $1)",
                make_url(direct_url).database,
            )
        )
    finally:
        await conn.close()


def test_the_pooler_setting_takes_none_or_transaction() -> None:
    from pydantic import ValidationError

    assert Settings().database_pooler == "none"
    assert Settings(database_pooler="transaction").database_pooler == "transaction"
    with pytest.raises(ValidationError):
        Settings(database_pooler="session")


async def test_the_bouncer_breaks_named_prepared_statements(database_url: str) -> None:
    """What the hub avoids: asyncpg's default statement cache (named statements) fails
    through this bouncer once clients outnumber its server connections."""
    dsn = _asyncpg_dsn(database_url)
    conns = [await asyncpg.connect(dsn) for _ in range(5)]
    try:
        with pytest.raises(asyncpg.exceptions.InvalidSQLStatementNameError):
            for round_ in range(20):
                await asyncio.gather(
                    *(conn.fetchval(f"SELECT $1::int + {round_ % 3}", 1) for conn in conns)
                )
    finally:
        for conn in conns:
            await conn.close()


async def test_many_task_cycles_from_several_clients_on_two_server_connections(
    alice: ApiClient,
) -> None:
    """Submit, claim, running, completed and a long-poll, by eight clients at once, twelve
    times each: every statement of the cycle (hot ones straight on asyncpg, the rest
    through SQLAlchemy) on two server connections that the bouncer hands around."""

    async def cycles(index: int) -> list[str]:
        worker = await alice.register(room="lab", name=f"J{index}", schema={})
        job = f"lab:modifiers:J{index}"
        done = []
        for round_ in range(CYCLES):
            task = await alice.submit(job, room="lab", payload={"n": round_})
            claimed = await alice.claim(worker["worker_id"])
            assert claimed is not None and claimed["id"] == task["id"]
            token = claimed["claim_token"]
            running = await alice.transition(task["id"], "running", claim_token=token)
            assert running.status_code == 200, running.text
            waiting = asyncio.create_task(
                alice.get(f"/tasks/{task['id']}", headers={"Prefer": "wait=5"})
            )
            completed = await alice.transition(
                task["id"], "completed", claim_token=token, result={"n": round_}
            )
            assert completed.status_code == 200, completed.text
            answer = await waiting
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "completed"
            done.append(task["id"])
        return done

    finished = await asyncio.gather(*(cycles(index) for index in range(CLIENTS)))
    ids = [task_id for each in finished for task_id in each]
    assert len(set(ids)) == CLIENTS * CYCLES
    listed = await alice.get("/rooms/lab/tasks", params={"status": "completed", "limit": 1})
    assert listed.json()["total"] == CLIENTS * CYCLES


async def test_the_sweeper_lease_is_a_row_and_no_advisory_lock(
    db: Database, settings: Settings, direct_url: str
) -> None:
    """Held as a ``cluster_lease`` row (no session advisory lock anywhere): a second
    holder is refused while it lasts, and takes it once it is given up."""
    first = ClusterLease(db, "test.lease", row_seconds=60)
    second = ClusterLease(db, "test.lease", row_seconds=60)
    assert await first.hold()
    assert await first.hold()  # renewed
    assert not await second.hold()
    assert await advisory_locks(direct_url) == 0
    async with db.read() as conn:
        rows = (await conn.execute(select(cluster_lease_table))).all()
    assert [row.name for row in rows] == ["test.lease"]
    await first.release()
    assert await second.hold()
    await second.release()
    async with db.read() as conn:
        assert (await conn.execute(select(cluster_lease_table))).all() == []


async def test_when_the_holder_dies_the_other_replica_sweeps_once_its_lease_runs_out(
    app: Any, direct_url: str
) -> None:
    """Replica A sweeps and dies without giving the lease up (its process killed: nothing
    released); B, refused meanwhile, sweeps once A's row has run out."""
    hub = app.hub
    settings = hub.settings.model_copy(update={"sweeper_interval_seconds": 0.05})
    cycles = {"a": 0, "b": 0}

    class Replica(Sweeper):
        def __init__(self, name: str) -> None:
            super().__init__(settings, hub.db, hub.publisher)
            self.name = name

        async def _sweep(self) -> Any:
            report = await super()._sweep()
            cycles[self.name] += 1
            return report

    a, b = Replica("a"), Replica("b")
    a.start()
    await eventually(lambda: cycles["a"] >= 1, 30, "A's first sweep")
    b.start()
    await eventually(lambda: cycles["a"] >= 6, 30, "A sweeping on")
    assert cycles["b"] == 0
    assert await advisory_locks(direct_url) == 0

    async def dies() -> None:  # a killed process releases nothing
        return None

    a.finish = dies  # type: ignore[method-assign]
    await a.stop()
    swept_by_a = cycles["a"]
    await eventually(lambda: cycles["b"] >= 2, 30, "B taking over")
    assert cycles["a"] == swept_by_a
    await b.stop()
    async with hub.db.read() as conn:  # B gave it up; A's row went with B's take-over
        assert (await conn.execute(select(cluster_lease_table))).all() == []
