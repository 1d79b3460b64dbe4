"""Plain ``alembic`` (the README's ``alembic downgrade``) acts on the hub's database: the one
``TASKHUB_DATABASE_URL`` names, or the hub's default, never a URL of its own; a URL given in
code (``taskhub.store.migrations``) still wins over the environment.

``alembic`` runs as a real subprocess from a scratch directory, with the repository's
``alembic.ini``; each test gets an empty database (a SQLite file elsewhere, or a fresh
PostgreSQL database dropped afterwards).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from taskhub.settings import Settings
from taskhub.store import migrations
from taskhub.store.database import Database
from tests.support.databases import create_postgres_database, drop_postgres_database

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "postgres"])
async def empty_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        (tmp_path / "data").mkdir()
        yield f"sqlite+aiosqlite:///{tmp_path / 'data' / 'hub.db'}"
        return
    url = await create_postgres_database("taskhub_alembic")
    try:
        yield url
    finally:
        await drop_postgres_database(url)


def alembic(
    cwd: Path, *args: str, database_url: str | None, **settings: str
) -> subprocess.CompletedProcess[str]:
    """``alembic -c <repo>/alembic.ini ARGS…`` in ``cwd`` with only the given database URL
    (and ``settings``, as ``TASKHUB_<NAME>`` variables)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("TASKHUB_")}
    if database_url is not None:
        env["TASKHUB_DATABASE_URL"] = database_url
    env |= {f"TASKHUB_{name.upper()}": value for name, value in settings.items()}
    return subprocess.run(
        [sys.executable, "-m", "alembic", "-c", str(REPO_ROOT / "alembic.ini"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def revision_of(url: str) -> str | None:
    db = Database(Settings(database_url=url))
    try:
        return await migrations.current_revision(db)
    finally:
        await db.dispose()


async def test_alembic_upgrades_and_downgrades_the_database_of_taskhub_database_url(
    empty_url: str, tmp_path: Path
) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    up = await asyncio.to_thread(alembic, cwd, "upgrade", "head", database_url=empty_url)
    assert up.returncode == 0, up.stderr
    assert await revision_of(empty_url) == migrations.head_revision()

    down = await asyncio.to_thread(alembic, cwd, "downgrade", "0007", database_url=empty_url)
    assert down.returncode == 0, down.stderr
    assert await revision_of(empty_url) == "0007"
    assert list(cwd.iterdir()) == [], "alembic used a database file of its own"


async def test_alembic_without_taskhub_database_url_uses_the_hubs_default(
    tmp_path: Path,
) -> None:
    """The hub's default is ``taskhub.db`` in the working directory: so is alembic's."""
    result = await asyncio.to_thread(alembic, tmp_path, "upgrade", "0007", database_url=None)
    assert result.returncode == 0, result.stderr
    assert await revision_of(f"sqlite+aiosqlite:///{tmp_path / 'taskhub.db'}") == "0007"


async def test_other_invalid_settings_do_not_stand_in_the_way_of_alembic(
    empty_url: str, tmp_path: Path
) -> None:
    """Only the database matters to a migration: a port out of range or a Redis URL the hub
    would refuse are for ``taskhub serve`` to report."""
    result = await asyncio.to_thread(
        alembic,
        tmp_path,
        "upgrade",
        "0007",
        database_url=empty_url,
        port="99999",
        redis_url="http://not-redis",
    )
    assert result.returncode == 0, result.stderr
    assert await revision_of(empty_url) == "0007"


def test_an_invalid_taskhub_database_url_is_refused_in_one_line(tmp_path: Path) -> None:
    result = alembic(tmp_path, "upgrade", "head", database_url="postgresql://u:secret@h/db")
    assert result.returncode != 0
    assert "alembic: invalid settings: TASKHUB_DATABASE_URL: unsupported driver" in result.stderr
    assert "secret" not in result.stderr
    assert list(tmp_path.iterdir()) == []


async def test_a_url_given_in_code_wins_over_taskhub_database_url(
    empty_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = f"sqlite+aiosqlite:///{tmp_path / 'elsewhere.db'}"
    monkeypatch.setenv("TASKHUB_DATABASE_URL", elsewhere)
    await asyncio.to_thread(migrations.upgrade, empty_url, "0007")
    assert await revision_of(empty_url) == "0007"
    assert not (tmp_path / "elsewhere.db").exists()
