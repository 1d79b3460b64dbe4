"""What the database URL means for the hub's processes.

An embedded database (an SQLite file) is served by one process, which migrates it at
start and locks the file against a second ``taskhub serve``; a database server
(PostgreSQL) is shared by replicas and migrated by the operator (``taskhub migrate``).
"""

from __future__ import annotations

from pathlib import Path

from sqlalchemy.engine import make_url


def is_embedded(database_url: str) -> bool:
    """Whether the database lives in this process (SQLite) rather than on a server."""
    return make_url(database_url).get_backend_name() == "sqlite"


def database_file(database_url: str) -> Path | None:
    """The file of an embedded database (None for a server or an in-memory database)."""
    if not is_embedded(database_url):
        return None
    database = make_url(database_url).database
    if not database or database == ":memory:":
        return None
    return Path(database)
