"""Migrations are frozen: each revision carries its own SQL and imports nothing from the
application, only ``alembic``, ``sqlalchemy`` and the standard library. A migration that
imported ``taskhub`` (say, the module that writes the queue-count triggers) would change
what an old revision does whenever that module changes, so a database migrated today would
differ from one migrated when the revision was written."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory

from taskhub.store import migrations

ALLOWED = frozenset({"__future__", "alembic", "sqlalchemy"}) | frozenset(sys.stdlib_module_names)

IMPORTERS = frozenset({"__import__", "import_module"})


def versions_directory() -> Path:
    """The folder alembic reads the revisions from (``alembic/versions``, as installed)."""
    script = ScriptDirectory.from_config(migrations.alembic_config("sqlite://"))
    return Path(script.versions)


def migration_files() -> list[Path]:
    return sorted(versions_directory().glob("*.py"))


def forbidden_imports(source: str) -> list[str]:
    """Every import in ``source`` (at any depth, in functions too) of a module other than
    the allowed ones, relative imports and calls that import by name, as ``line: what``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = ["." * node.level + (node.module or "")]
        elif isinstance(node, ast.Call):
            called = node.func
            name = called.id if isinstance(called, ast.Name) else getattr(called, "attr", None)
            if name in IMPORTERS:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
            continue
        else:
            continue
        for name in names:
            if name.startswith(".") or name.partition(".")[0] not in ALLOWED:
                found.append(f"{node.lineno}: {name}")
    return found


def test_every_revision_file_is_checked() -> None:
    """The files checked are the revisions alembic runs, all of them."""
    script = ScriptDirectory.from_config(migrations.alembic_config("sqlite://"))
    revision_files = {Path(revision.path).resolve() for revision in script.walk_revisions()}
    checked = {path.resolve() for path in migration_files()}
    assert revision_files, "no revisions found"
    assert revision_files <= checked


@pytest.mark.parametrize("path", migration_files(), ids=lambda path: path.name)
def test_a_migration_imports_nothing_from_the_application(path: Path) -> None:
    found = forbidden_imports(path.read_text(encoding="utf-8"))
    assert not found, f"{path.name} imports beyond alembic, sqlalchemy and the stdlib: {found}"


@pytest.mark.parametrize(
    "source",
    [
        "from taskhub.store import queue_counts",
        "import taskhub.store.columns",
        "from taskhub import store as s",
        "def upgrade():\n    from taskhub.store.columns import UTCDateTime",
        "from . import helpers",
        "import orjson",
        "import importlib\nimportlib.import_module('taskhub.store')",
        "__import__('taskhub')",
    ],
)
def test_the_check_finds_an_application_import(source: str) -> None:
    assert forbidden_imports(source)


def test_the_check_lets_alembic_sqlalchemy_and_the_stdlib_pass() -> None:
    source = (
        "from __future__ import annotations\n"
        "from collections.abc import Sequence\n"
        "from datetime import UTC, datetime\n"
        "import sqlalchemy as sa\n"
        "from sqlalchemy.dialects import postgresql\n"
        "from alembic import op\n"
    )
    assert forbidden_imports(source) == []
