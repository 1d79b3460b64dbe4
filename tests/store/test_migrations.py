"""Alembic owns the schema: the migrations build exactly the models' schema, on SQLite and
PostgreSQL, and every migration goes up, down and up again.

Each test gets an empty database of its own (a SQLite file, or a fresh PostgreSQL database
that is dropped afterwards). ``migrations.upgrade``/``downgrade`` are blocking and run their
own event loop, so async tests call them through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, String, delete, insert, inspect, select, text, update
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import ClauseElement

from taskhub.clock import new_id, utcnow
from taskhub.settings import Settings
from taskhub.store import migrations
from taskhub.store.database import Database
from taskhub.store.tables import (
    job_table,
    link_table,
    metadata,
    task_table,
    token_table,
    user_table,
    worker_table,
)
from tests.support.databases import (
    create_postgres_database,
    create_schema_from_models,
    drop_postgres_database,
)

APP_TABLES = {
    "app_user",
    "api_token",
    "worker",
    "job",
    "worker_job_link",
    "task",
    "task_log",
    "task_queue_bucket",
    "cluster_lease",
    "revoked_token",
    "user_usage",
    "provider",
    "room_setting",
    "room_member",
}


@pytest.fixture(params=["sqlite", "postgres"])
async def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """The URL of an empty database of its own for this test."""
    if request.param == "sqlite":
        yield f"sqlite+aiosqlite:///{tmp_path / 'm.db'}"
        return
    url = await create_postgres_database("taskhub_migrations")
    try:
        yield url
    finally:
        await drop_postgres_database(url)


@pytest.fixture
async def database(empty_url: str) -> AsyncIterator[Database]:
    database = Database(Settings(database_url=empty_url))
    yield database
    await database.dispose()


async def upgrade(url: str, revision: str = "head") -> None:
    await asyncio.to_thread(migrations.upgrade, url, revision)


async def downgrade(url: str, revision: str) -> None:
    await asyncio.to_thread(migrations.downgrade, url, revision)


def history() -> list[tuple[str, str]]:
    """Every ``(revision, the revision below it or "base")``, oldest first; linear."""
    script = ScriptDirectory.from_config(migrations.alembic_config("sqlite://"))
    assert len(script.get_heads()) == 1, f"migration history has branches: {script.get_heads()}"
    steps = [(rev.revision, rev.down_revision) for rev in reversed(list(script.walk_revisions()))]
    for revision, below in steps:
        assert below is None or isinstance(below, str), f"{revision} is a merge revision"
    return [(revision, below or "base") for revision, below in steps]


def schema_diff(conn: Connection, target: MetaData = metadata) -> list[Any]:
    """What ``alembic check`` reports: the differences between the database and ``target``."""
    context = MigrationContext.configure(
        conn, opts={"compare_type": True, "compare_server_default": True}
    )
    return compare_metadata(context, target)


def drifted_models() -> MetaData:
    """A copy of the models in which ``task.status`` is wider than in the database."""
    drifted = MetaData(naming_convention=metadata.naming_convention)
    for table in metadata.sorted_tables:
        table.to_metadata(drifted)
    drifted.tables["task"].c.status.type = String(32)
    return drifted


def _plain(value: Any) -> Any:
    """Reflection output with SQL expressions (e.g. a partial index's WHERE) as strings."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, ClauseElement):
        return str(value)
    return value


def by_name(items: list[Any]) -> list[Any]:
    return sorted(items, key=lambda item: item["name"])


def schema_snapshot(conn: Connection) -> dict[str, Any]:
    """Everything the inspector knows about the application's tables."""
    inspector = inspect(conn)
    snapshot: dict[str, Any] = {}
    for table in sorted(set(inspector.get_table_names()) - {"alembic_version"}):
        columns = [
            {**column, "type": str(column["type"].compile(dialect=conn.dialect))}
            for column in inspector.get_columns(table)
        ]
        snapshot[table] = _plain(
            {
                "columns": columns,
                "primary_key": inspector.get_pk_constraint(table),
                "indexes": by_name(inspector.get_indexes(table)),
                "unique_constraints": by_name(inspector.get_unique_constraints(table)),
                "foreign_keys": by_name(inspector.get_foreign_keys(table)),
                "check_constraints": by_name(inspector.get_check_constraints(table)),
            }
        )
    snapshot["triggers"] = trigger_definitions(conn)
    return snapshot


def trigger_definitions(conn: Connection) -> dict[str, str]:
    """The triggers (and PostgreSQL trigger functions) as the database reports them."""
    if conn.dialect.name == "sqlite":
        rows = conn.exec_driver_sql("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
        return dict(rows.all())
    triggers = conn.exec_driver_sql(
        "SELECT tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal"
    )
    functions = conn.exec_driver_sql(
        "SELECT proname, prosrc FROM pg_proc WHERE proname LIKE 'taskhub\\_%'"
    )
    return dict(triggers.all()) | dict(functions.all())


async def pending_counts(db: Database) -> tuple[dict[Any, int], dict[Any, int]]:
    """Pending tasks per (job, priority): counted in ``task``, and as the triggers keep them."""
    async with db.read() as conn:
        counted = await conn.execute(
            text(
                "SELECT job_id, priority, count(*) FROM task WHERE status = 'pending' "
                "GROUP BY job_id, priority"
            )
        )
        kept = await conn.execute(
            text("SELECT job_id, priority, sum(pending) FROM task_queue_bucket GROUP BY 1, 2")
        )
        return (
            {(row[0], row[1]): row[2] for row in counted},
            {(row[0], row[1]): row[2] for row in kept},
        )


async def table_names(db: Database) -> set[str]:
    async with db.read() as conn:
        return set(await (await conn.sa()).run_sync(lambda sync: inspect(sync).get_table_names()))


async def insert_sample_rows(db: Database, tag: str) -> None:
    """One row in every table: a user with a token and a worker serving a job with a task."""
    now = utcnow()
    user_id, worker_id, job_id = new_id(), new_id(), new_id()
    async with db.write() as conn:
        await conn.execute(
            insert(user_table).values(
                id=user_id, name=f"alice-{tag}", is_superuser=False, created_at=now
            )
        )
        await conn.execute(
            insert(token_table).values(
                id=new_id(), user_id=user_id, token_hash=f"{tag:0>64}", created_at=now
            )
        )
        await conn.execute(
            insert(worker_table).values(
                id=worker_id, user_id=user_id, last_heartbeat=now, created_at=now
            )
        )
        await conn.execute(
            insert(job_table).values(
                id=job_id,
                room_id="room1",
                category="modifiers",
                name=f"Rotate{tag}",
                schema={"type": "object"},
                deleted=False,
                created_at=now,
                updated_at=now,
            )
        )
        await conn.execute(insert(link_table).values(worker_id=worker_id, job_id=job_id))
        await conn.execute(
            insert(task_table).values(
                id=new_id(),
                job_id=job_id,
                room_id="room1",
                status="pending",
                payload={"angle": 90},
                created_at=now,
                submitted_by=user_id,
                attempt=0,
            )
        )


async def test_migrated_schema_matches_the_models(empty_url: str, database: Database) -> None:
    """No drift: after ``upgrade head`` autogenerate finds nothing to do (``alembic check``)."""
    await upgrade(empty_url)
    async with database.read() as conn:
        assert await (await conn.sa()).run_sync(schema_diff) == []
        # The comparison is not vacuous: it sees missing tables and a changed column type.
        removed = await (await conn.sa()).run_sync(schema_diff, MetaData())
        modified = await (await conn.sa()).run_sync(schema_diff, drifted_models())
    assert {op[1].name for op in removed if op[0] == "remove_table"} == APP_TABLES
    assert [(op[0], op[2], op[3]) for ops in modified for op in ops] == [
        ("modify_type", "task", "status")
    ]


async def test_create_all_builds_the_same_schema_as_the_migrations(
    empty_url: str, database: Database, tmp_path: Path
) -> None:
    """The suite may build schemas with ``metadata.create_all``: it is the migrated schema,
    down to index names, partial-index predicates, constraint names and ON DELETE rules."""
    await upgrade(empty_url)
    async with database.read() as conn:
        migrated = await (await conn.sa()).run_sync(schema_snapshot)

    if database.is_sqlite:
        other_url = f"sqlite+aiosqlite:///{tmp_path / 'create_all.db'}"
    else:
        other_url = await create_postgres_database("taskhub_create_all")
    other = Database(Settings(database_url=other_url))
    try:
        await create_schema_from_models(other)
        async with other.read() as conn:
            created = await (await conn.sa()).run_sync(schema_snapshot)
        await migrations.check_schema_current(other)
    finally:
        await other.dispose()
        if not database.is_sqlite:
            await drop_postgres_database(other_url)

    assert set(migrated) == APP_TABLES | {"triggers"}
    assert len(migrated["triggers"]) >= 3, migrated["triggers"]
    pending_queue = next(
        index for index in migrated["task"]["indexes"] if index["name"] == "ix_task_claim_queue"
    )
    where = pending_queue["dialect_options"][f"{database.dialect}_where"]
    assert "status" in where and "pending" in where
    for table in [*APP_TABLES, "triggers"]:
        assert created[table] == migrated[table], table


async def test_queue_counts_start_from_the_tasks_already_waiting(
    empty_url: str, database: Database
) -> None:
    """0006 counts the pending tasks already there; from then on the triggers keep the
    counts through inserts, status changes and deletes; its downgrade leaves plain tables."""
    await upgrade(empty_url, "0005")
    await insert_sample_rows(database, "first")
    await insert_sample_rows(database, "second")
    async with database.write() as conn:
        await conn.execute(text("UPDATE task SET priority = 3 WHERE room_id = 'room1'"))
    await upgrade(empty_url)
    counted, kept = await pending_counts(database)
    assert len(counted) == 2 and kept == counted

    await insert_sample_rows(database, "third")
    task = task_table
    async with database.write() as conn:
        first = await conn.scalar(select(task.c.id).order_by(task.c.id).limit(1))
        await conn.execute(update(task).where(task.c.id == first).values(status="claimed"))
    counted, kept = await pending_counts(database)
    assert len(counted) == 2 and kept == counted
    async with database.write() as conn:
        await conn.execute(update(task).where(task.c.id == first).values(status="pending"))
        await conn.execute(delete(task).where(task.c.status == "pending", task.c.id != first))
    counted, kept = await pending_counts(database)
    assert len(counted) == 1 and kept == counted

    await downgrade(empty_url, "0005")
    assert "task_queue_bucket" not in await table_names(database)
    async with database.write() as conn:
        await conn.execute(text("UPDATE task SET status = 'claimed'"))


async def waiting_state(db: Database) -> tuple[dict[str, bool], int]:
    """Each task's ``waiting`` flag by its room, and the waiting tasks the counts keep."""
    async with db.read() as conn:
        flags = await conn.execute(text("SELECT room_id, waiting FROM task"))
        kept = await conn.scalar(text("SELECT coalesce(sum(waiting), 0) FROM task_queue_bucket"))
        return {row[0]: bool(row[1]) for row in flags}, int(kept)


async def test_0011_sets_the_tasks_that_wait_apart(empty_url: str, database: Database) -> None:
    """0011 marks the pending tasks due after its moment as waiting and counts them; the
    ones due already, and tasks not pending, are queued (or not in the queue at all). Its
    downgrade leaves the pending counts as they were."""
    await upgrade(empty_url, "0010")
    for tag in ("ahead", "past", "none", "claimed"):
        await insert_sample_rows(database, tag)
    now = utcnow()
    runs = {"ahead": now + timedelta(hours=1), "past": now - timedelta(minutes=1)}
    runs["claimed"] = runs["ahead"]
    task = task_table
    async with database.write() as conn:
        for tag, run_at in runs.items():
            job = f"Rotate{tag}"
            await conn.execute(
                update(task)
                .where(task.c.job_id.in_(select(job_table.c.id).where(job_table.c.name == job)))
                .values(run_at=run_at, room_id=tag)
            )
        await conn.execute(text("UPDATE task SET room_id = 'none' WHERE run_at IS NULL"))
        await conn.execute(text("UPDATE task SET status = 'claimed' WHERE room_id = 'claimed'"))
    await upgrade(empty_url, "0011")
    flags, kept = await waiting_state(database)
    assert flags == {"ahead": True, "past": False, "none": False, "claimed": False}
    assert kept == 1
    counted, kept_pending = await pending_counts(database)
    assert len(counted) == 3 and kept_pending == counted

    await downgrade(empty_url, "0010")
    counted, kept_pending = await pending_counts(database)
    assert len(counted) == 3 and kept_pending == counted
    async with database.read() as conn:
        columns = await (await conn.sa()).run_sync(
            lambda sync: {c["name"] for c in inspect(sync).get_columns("task")}
        )
    assert "waiting" not in columns
    await upgrade(empty_url)
    assert (await waiting_state(database))[1] == 1


async def task_documents(db: Database) -> list[tuple[Any, Any, bool]]:
    """Each task's payload, result, and whether the result is SQL NULL; oldest first."""
    task = task_table
    async with db.read() as conn:
        rows = await conn.execute(
            select(task.c.payload, task.c.result, task.c.result.is_(None)).order_by(task.c.id)
        )
        return [tuple(row) for row in rows]


async def document_types(db: Database) -> set[str]:
    """The database's types of ``task.payload`` and ``task.result``."""
    async with db.read() as conn:
        return await (await conn.sa()).run_sync(_document_types)


def _document_types(conn: Connection) -> set[str]:
    return {
        str(column["type"].compile(dialect=conn.dialect))
        for column in inspect(conn).get_columns("task")
        if column["name"] in ("payload", "result")
    }


async def set_task_documents(db: Database, payload: Any, result: Any) -> None:
    """Give the oldest task ``payload`` and ``result``."""
    task = task_table
    async with db.write() as conn:
        oldest = await conn.scalar(select(task.c.id).order_by(task.c.id).limit(1))
        await conn.execute(
            update(task).where(task.c.id == oldest).values(payload=payload, result=result)
        )


async def retyped(migration: Awaitable[None], db: Database) -> None:
    """Run a migration that changes column types, then drop ``db``'s pooled connections:
    their statements, prepared for the old types, would fail once (as a running replica's
    do, see 0010)."""
    await migration
    await db.dispose()


async def test_task_documents_keep_their_values_through_0010_and_back(
    empty_url: str, database: Database
) -> None:
    """0010 turns ``jsonb`` payloads and results into ``json`` (PostgreSQL; SQLite keeps its
    text): every stored value stays, JSON ``null`` and SQL NULL results apart; from then on
    a payload keeps its key order. The downgrade keeps the values, not the order."""
    await upgrade(empty_url, "0009")
    for tag in ("first", "second", "third"):
        await insert_sample_rows(database, tag)
    await set_task_documents(database, {"b": [1, 2.5, None], "a": {"big": 2**70}}, None)
    stored = await task_documents(database)
    assert [row[2] for row in stored] == [False, True, True]  # JSON null, then SQL NULLs
    as_before = await document_types(database)
    assert as_before == ({"JSONB"} if database.dialect == "postgresql" else {"JSON"})

    await retyped(upgrade(empty_url, "0010"), database)
    assert await document_types(database) == {"JSON"}
    assert await task_documents(database) == stored
    await set_task_documents(database, {"b": 1, "a": 2}, {"z": True, "y": [3]})
    payload, result, _ = (await task_documents(database))[0]
    assert list(payload) == ["b", "a"] and list(result) == ["z", "y"]

    await retyped(downgrade(empty_url, "0009"), database)
    assert await document_types(database) == as_before
    assert await task_documents(database) == [
        ({"a": 2, "b": 1}, {"y": [3], "z": True}, False),
        *stored[1:],
    ]


async def usage_rows(db: Database) -> dict[Any, tuple[int, int, int]]:
    """``user_usage`` as the database keeps it: ``user -> (unfinished tasks, unfinished
    costly tasks, stored bytes)``."""
    async with db.read() as conn:
        kept = await conn.execute(
            text(
                "SELECT user_id, unfinished_tasks, unfinished_costly_tasks, stored_bytes"
                " FROM user_usage"
            )
        )
        return {row[0]: (row[1], row[2], row[3]) for row in kept}


async def test_0017_counts_each_user_s_tasks_and_lines_already_there(
    empty_url: str, database: Database
) -> None:
    """0017 starts ``user_usage`` from the tasks and log lines already stored; from then on
    its triggers keep it; its downgrade leaves the tables as they were."""
    await upgrade(empty_url, "0016")
    for tag in ("first", "second"):
        await insert_sample_rows(database, tag)
    async with database.write() as conn:
        first = await conn.scalar(select(task_table.c.id).order_by(task_table.c.id).limit(1))
        await conn.execute(
            update(task_table)
            .where(task_table.c.id == first)
            .values(status="completed", result={"ok": "é"}, completed_at=utcnow())
        )
        await conn.execute(
            text(
                "INSERT INTO task_log (task_id, attempt, logged_at, level, logger, message)"
                " VALUES (:task, 1, :at, 'info', 'job', 'ça va')"
            ).bindparams(task=first.hex if database.is_sqlite else first, at=utcnow())
        )
    await upgrade(empty_url)
    payload = len(b'{"angle":90}')
    kept = sorted((await usage_rows(database)).values())
    assert kept == [(0, 0, payload + len('{"ok":"é"}'.encode()) + len("jobça va".encode())),
                    (1, 0, payload)]  # fmt: skip

    await insert_sample_rows(database, "third")
    async with database.write() as conn:
        await conn.execute(delete(task_table).where(task_table.c.id == first))
    assert sorted((await usage_rows(database)).values()) == [
        (0, 0, 0),
        (1, 0, payload),
        (1, 0, payload),
    ]

    await downgrade(empty_url, "0016")
    assert "user_usage" not in await table_names(database)
    async with database.read() as conn:
        columns = await (await conn.sa()).run_sync(lambda sync: inspect(sync).get_columns("job"))
    assert "costly" not in {column["name"] for column in columns}
    async with database.write() as conn:  # no trigger is left behind to fail a write
        await conn.execute(text("UPDATE task SET status = 'cancelled'"))
        await conn.execute(text("DELETE FROM task"))


async def test_every_migration_goes_up_down_and_up_again(
    empty_url: str, database: Database
) -> None:
    """Walk the history one revision at a time, up to head, down to base with data in the
    tables, and up again; the schema is current and usable at the end."""
    steps = history()
    assert steps[0][1] == "base"
    assert steps[-1][0] == migrations.head_revision()

    for revision, _below in steps:
        await upgrade(empty_url, revision)
        assert await migrations.current_revision(database) == revision
    await insert_sample_rows(database, "first")

    for revision, below in reversed(steps):
        await downgrade(empty_url, below)
        expected = None if below == "base" else below
        assert await migrations.current_revision(database) == expected, f"downgrade of {revision}"
    assert await table_names(database) <= {"alembic_version"}

    for revision, _below in steps:
        await upgrade(empty_url, revision)
        assert await migrations.current_revision(database) == revision
    await migrations.check_schema_current(database)
    await insert_sample_rows(database, "second")
    async with database.read() as conn:
        assert await (await conn.sa()).run_sync(schema_diff) == []
        names = (await conn.execute(select(user_table.c.name))).scalars().all()
        pending = await conn.scalar(text("SELECT count(*) FROM task WHERE status = 'pending'"))
    assert names == ["alice-second"]
    assert pending == 1


async def test_schema_check_refuses_an_unmigrated_database(
    empty_url: str, database: Database
) -> None:
    """``check_schema_current`` tells the operator to run ``taskhub migrate`` until the
    database is at head, and again once it has been downgraded."""
    with pytest.raises(migrations.SchemaOutdated, match="taskhub migrate"):
        await migrations.check_schema_current(database)

    await upgrade(empty_url)
    await migrations.check_schema_current(database)
    assert await migrations.current_revision(database) == migrations.head_revision()

    await downgrade(empty_url, "base")
    with pytest.raises(migrations.SchemaOutdated, match="taskhub migrate"):
        await migrations.check_schema_current(database)


@pytest.mark.parametrize(("version_num", "refused"), [(130_012, True), (140_000, False)])
def test_a_postgresql_server_older_than_14_is_refused(version_num: int, refused: bool) -> None:
    """(Listings tell a small document from a big one by ``pg_column_compression``.)"""
    if refused:
        with pytest.raises(migrations.DatabaseUnfit, match="PostgreSQL 13; Taskhub needs"):
            migrations.refuse_old_server(version_num)
    else:
        migrations.refuse_old_server(version_num)


@pytest.mark.postgres_only
async def test_a_role_that_may_not_read_the_revision_is_told_so_not_sent_to_migrate(
    empty_url: str, database: Database
) -> None:
    """Only a missing ``alembic_version`` means "never migrated"; a role without rights on
    it hears PostgreSQL's refusal (``taskhub serve`` prints it), not "run taskhub migrate"."""
    await upgrade(empty_url)
    role = f"taskhub_no_rights_{new_id().hex[-8:]}"
    async with database.write() as conn:
        await conn.execute(text(f"CREATE ROLE {role} LOGIN"))
    limited = Database(
        Settings(
            database_url=make_url(empty_url)
            .set(username=role)
            .render_as_string(hide_password=False)
        )
    )
    try:
        with pytest.raises(DBAPIError, match="permission denied for table alembic_version"):
            await migrations.check_schema_current(limited)
    finally:
        await limited.dispose()
        async with database.write() as conn:
            await conn.execute(text(f"DROP ROLE {role}"))
