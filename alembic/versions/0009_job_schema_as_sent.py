"""Job schemas kept as sent.

On PostgreSQL ``job.schema`` was ``jsonb``, which orders an object's keys by their length
and writes a number such as ``1e23`` as ``100000000000000000000000``: the page's form showed
a job's fields in another order than on SQLite (and than the worker's model), and a worker
re-registering a schema with such a number met a schema conflict with itself. ``json``
keeps the text as sent. SQLite's column is text already: nothing changes there.

The job table is small (one row per job ever registered), so the rewrite this takes is
short. Replicas of an older version still running keep working: PostgreSQL casts the
``jsonb`` they send to ``json``. A schema stored before keeps the order ``jsonb`` gave it
until its job is registered again (a re-registration that differs only in key order
stores the order sent).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column(
            "job",
            "schema",
            type_=sa.JSON(),
            existing_type=postgresql.JSONB(),
            existing_nullable=False,
            postgresql_using="schema::json",
        )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.alter_column(
            "job",
            "schema",
            type_=postgresql.JSONB(),
            existing_type=sa.JSON(),
            existing_nullable=False,
            postgresql_using="schema::jsonb",
        )
