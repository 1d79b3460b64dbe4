"""Alembic environment: async engines for both SQLite and PostgreSQL.

The database is the one given in code (``taskhub.store.migrations`` sets ``sqlalchemy.url``
or passes a connection); otherwise, for plain ``alembic`` commands, the hub's own setting
(``TASKHUB_DATABASE_URL``, or the default SQLite file), so that ``alembic downgrade`` acts on
the database the hub uses."""

from __future__ import annotations

import asyncio

from alembic import context
from pydantic import ValidationError
from sqlalchemy import pool
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from taskhub.settings import DatabaseSettings, setting_errors
from taskhub.store import migrations
from taskhub.store.tables import metadata

config = context.config


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
        compare_server_default=True,
    )


def _run_sync(connection: Connection) -> None:
    _configure(connection)
    # A revision this code does not know was written by a newer Taskhub: say so, rather
    # than alembic's "Can't locate revision".
    migrations.refuse_unknown(context.get_context().get_current_heads())
    with context.begin_transaction():
        context.run_migrations()


async def _run_async(url: str) -> None:
    # On PostgreSQL no statement is cached (so named): one run of migrations gains nothing
    # from it, and it keeps ``taskhub migrate`` safe through a transaction-mode pooler.
    postgres = url.startswith("postgresql")
    no_cache = {"statement_cache_size": 0, "prepared_statement_cache_size": 0}
    engine = create_async_engine(
        url, poolclass=pool.NullPool, connect_args=no_cache if postgres else {}
    )
    async with engine.connect() as connection:
        await connection.run_sync(_run_sync)
        await connection.commit()
    await engine.dispose()


def _database_url() -> str:
    """``sqlalchemy.url`` when code set it, else the hub's ``TASKHUB_DATABASE_URL``."""
    url = config.get_main_option("sqlalchemy.url")
    if url:
        return url
    try:
        return DatabaseSettings().database_url
    except ValidationError as exc:
        raise SystemExit(f"alembic: invalid settings: {setting_errors(exc)}") from None


def run() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run_sync(connection)
        return
    url = _database_url()
    if context.is_offline_mode():
        context.configure(url=url, target_metadata=metadata, literal_binds=True)
        with context.begin_transaction():
            context.run_migrations()
        return
    asyncio.run(_run_async(url))


run()
