"""Real databases for tests: a SQLite file per test, a PostgreSQL database per session.

PostgreSQL must be reachable (``TASKHUB_TEST_POSTGRES_URL``); if it is not, the tests that
need it fail: they are never skipped."""

from __future__ import annotations

import os
import uuid

import asyncpg
from sqlalchemy import text
from sqlalchemy.engine import make_url

from taskhub.store.database import Database
from taskhub.store.migrations import head_revision
from taskhub.store.tables import metadata
from tests.support.waiting import eventually

POSTGRES_URL = os.environ.get(
    "TASKHUB_TEST_POSTGRES_URL", "postgresql+asyncpg://postgres@127.0.0.1:5432/test"
)
REDIS_URL = os.environ.get("TASKHUB_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
TABLES = (
    "provider",
    "task_queue_bucket",
    "task",
    "worker_job_link",
    "worker",
    "job",
    "api_token",
    "app_user",
    "cluster_lease",
    "revoked_token",
    "room_setting",
    "room_member",
)


def _asyncpg_dsn(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


async def create_postgres_database(
    prefix: str = "taskhub_test", template: str | None = None
) -> str:
    """Create an empty database (or a copy of the database ``template``, which nobody may
    be connected to); returns its SQLAlchemy URL."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    conn = await asyncpg.connect(_asyncpg_dsn(POSTGRES_URL))
    try:
        copied = f' TEMPLATE "{template}"' if template is not None else ""
        await conn.execute(f'CREATE DATABASE "{name}"{copied}')
    finally:
        await conn.close()
    return make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)


async def drop_postgres_database(url: str) -> None:
    name = make_url(url).database
    conn = await asyncpg.connect(_asyncpg_dsn(POSTGRES_URL))
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


async def create_schema_from_models(db: Database) -> None:
    """Build the schema from the models and mark it current (the migrations test proves the
    two are the same schema)."""
    async with db.engine.begin() as conn:
        await conn.run_sync(metadata.create_all)
        await conn.execute(
            text("CREATE TABLE alembic_version (version_num VARCHAR(32) PRIMARY KEY)")
        )
        await conn.execute(text("INSERT INTO alembic_version VALUES (:v)"), {"v": head_revision()})


async def truncate_all(db: Database) -> None:
    async with db.engine.begin() as conn:
        await conn.execute(text(f"TRUNCATE {', '.join(TABLES)} CASCADE"))


async def until_a_lock_is_waited_for(database_url: str) -> None:
    """Until a session of the test's database waits for a lock (what the request started
    beside the lock was meant to reach), however long the machine takes to get it there."""
    dsn = make_url(database_url).set(drivername="postgresql").render_as_string(False)
    watcher = await asyncpg.connect(dsn)  # outside a transaction: every reading is fresh
    try:
        await eventually(
            lambda: watcher.fetchval(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ),
            30,
            "a session waiting for the lock",
            0.01,
        )
    finally:
        await watcher.close()
