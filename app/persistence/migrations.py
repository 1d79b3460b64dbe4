"""Alembic, driven from code: upgrade/downgrade, and the start-up schema check."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app.persistence.database import Database

ALEMBIC_DIR = Path(__file__).resolve().parents[2] / "alembic"


class SchemaOutdated(RuntimeError):
    """The database's schema is older (or newer) than this code."""


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
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    assert head is not None
    return head


async def current_revision(db: Database) -> str | None:
    try:
        async with db.read() as conn:
            return await conn.scalar(text("SELECT version_num FROM alembic_version"))
    except DBAPIError:
        return None


async def check_schema_current(db: Database) -> None:
    current, head = await current_revision(db), head_revision()
    if current != head:
        raise SchemaOutdated(
            f"The database schema is at revision {current or 'none (empty database)'}, "
            f"but this Taskhub needs {head}. Run `taskhub migrate` first."
        )
