"""Alembic, driven from code: upgrade/downgrade, and the start-up schema check."""

from __future__ import annotations

from collections.abc import Iterable
from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import inspect, text

from taskhub.store.database import Database

# The package's own migrations (``app/migrations`` is ``alembic/`` in a checkout).
ALEMBIC_DIR = Path(__file__).resolve().parent.parent / "migrations"


class DatabaseUnfit(RuntimeError):
    """This code cannot serve the database as it is (``taskhub`` refuses to start)."""


class SchemaOutdated(DatabaseUnfit):
    """The database's schema is older (or newer) than this code."""


# PostgreSQL 14 brought ``pg_column_compression``, which listings use to tell a small
# document from a big one without reading it.
OLDEST_POSTGRESQL = 14


class ServerTooOld(DatabaseUnfit):
    def __init__(self, version_num: int) -> None:
        major = version_num // 10_000
        super().__init__(
            f"The database server is PostgreSQL {major}; Taskhub needs PostgreSQL "
            f"{OLDEST_POSTGRESQL} or newer."
        )


def refuse_old_server(version_num: int) -> None:
    """``ServerTooOld`` unless ``version_num`` (PostgreSQL's ``server_version_num``) is
    recent enough."""
    if version_num < OLDEST_POSTGRESQL * 10_000:
        raise ServerTooOld(version_num)


class SchemaNewer(SchemaOutdated):
    """The database was migrated by a newer Taskhub: its revision is unknown to this code,
    which can neither serve it nor migrate it (only the newer code knows the way down)."""

    def __init__(self, revision: str) -> None:
        super().__init__(
            f"The database was migrated by a newer Taskhub (revision {revision} is unknown "
            "to this version): upgrade Taskhub."
        )
        self.revision = revision


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(ALEMBIC_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Blocking: runs its own event loop (call from sync code or a worker thread)."""
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str) -> None:
    command.downgrade(alembic_config(url), revision)


def stamp(url: str, revision: str = "head") -> None:
    command.stamp(alembic_config(url), revision)


def head_revision() -> str:
    head = _script().get_current_head()
    assert head is not None
    return head


@cache
def _script() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config("sqlite://"))


@cache
def known_revisions() -> frozenset[str]:
    return frozenset(script.revision for script in _script().walk_revisions())


def refuse_unknown(revisions: Iterable[str]) -> None:
    """``SchemaNewer`` for the first of a database's ``revisions`` this code does not know
    (alembic/env.py calls this before any migration command touches the database)."""
    for revision in revisions:
        if revision not in known_revisions():
            raise SchemaNewer(revision)


async def current_revision(db: Database) -> str | None:
    """The database's revision; None when it has no ``alembic_version`` table (never
    migrated). Any other failure to read it — a role without rights on it, say — is raised
    as it is, not taken for an empty database."""
    async with db.read() as conn:
        sa = await conn.sa()
        if not await sa.run_sync(lambda sync: inspect(sync).has_table("alembic_version")):
            return None
        revision: str | None = await conn.scalar(text("SELECT version_num FROM alembic_version"))
        return revision


async def check_schema_current(db: Database) -> None:
    """Refuse (``DatabaseUnfit``) a database this code cannot serve: a PostgreSQL server too
    old, or a schema at another revision than this code's."""
    if not db.is_sqlite:
        async with db.read() as conn:
            refuse_old_server(int(await conn.scalar(text("SHOW server_version_num"))))
    current, head = await current_revision(db), head_revision()
    if current is not None:
        refuse_unknown([current])
    if current != head:
        raise SchemaOutdated(
            f"The database schema is at revision {current or 'none (empty database)'}, "
            f"but this Taskhub needs {head}. Run `taskhub migrate` first."
        )
