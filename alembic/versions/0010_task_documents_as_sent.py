"""Task payloads and results kept as sent.

On PostgreSQL ``task.payload`` and ``task.result`` were ``jsonb``, which orders an object's
keys by their length, keeps the last of duplicate keys and rewrites numbers (``1e23`` came
back as ``100000000000000000000000``, an integer; ``-0.0`` as ``0.0``): a worker got a
payload in another key order than was submitted, and a submitter read another payload or
result than on SQLite. ``json`` keeps the text as sent, as 0009 did for job schemas.
SQLite's columns are text already: nothing changes there.

On PostgreSQL both columns change in one ``ALTER TABLE``, which rewrites the task table and
its indexes under an ACCESS EXCLUSIVE lock held until the migration commits: submits,
claims, reports and reads of tasks wait meanwhile (and the ``ALTER`` itself waits for any
transaction using the table). Measured here (2 cores, PostgreSQL 15): 200,000 tasks with
small payloads (92 MB with indexes) take 0.9 s, the downgrade as long; migrate a big
database at a quiet time. The downgrade fails on a document holding ``\\u0000``, which
``json`` keeps and ``jsonb`` refuses (the REST API refuses U+0000 in any body; an
``@internal`` job's result could still hold it).

Replicas of the older version still running during a rolling upgrade keep working (tried:
submit, read, list, claim, running, completed): PostgreSQL casts the ``jsonb`` they send to
``json`` on assignment, and asyncpg decodes ``json`` with the engine's ``load_json`` as it
does ``jsonb``. A statement they ran through SQLAlchemy before the upgrade fails once
("cached statement plan is invalid", a 500); SQLAlchemy then drops its prepared statements
and the next request succeeds (asyncpg re-prepares the hot statements by itself). What they
write passes through ``jsonb`` first, so it keeps ``jsonb``'s order, as do the tasks stored
before the upgrade. A replica of the older version that restarts is refused (its code does
not know revision 0010).

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-26
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DOCUMENT_COLUMNS = ("payload", "result")


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(retype_documents("json"))


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(retype_documents("jsonb"))


def retype_documents(type_name: str) -> str:
    """One ``ALTER TABLE`` for both columns: the table is rewritten once (an
    ``op.alter_column`` per column rewrites it twice, 1.6 s instead of 0.9 s above)."""
    changes = ", ".join(
        f"ALTER COLUMN {column} TYPE {type_name} USING {column}::{type_name}"
        for column in DOCUMENT_COLUMNS
    )
    return f"ALTER TABLE task {changes}"
