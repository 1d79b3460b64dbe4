"""Private rooms (docs/protocol.md, "Private rooms"):

- ``room_setting``: a room's visibility, one row per room made private (or opened again);
- ``room_member``: its members, users by id and groups by name, each with a role.

Expand only: new tables, which older replicas neither read nor write (they keep every
room open until they are upgraded).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-10
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Timestamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "room_setting",
        sa.Column("room_id", sa.String(length=128), nullable=False),
        sa.Column("visibility", sa.String(length=16), nullable=False),
        sa.Column("updated_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("room_id", name="pk_room_setting"),
    )
    op.create_table(
        "room_member",
        sa.Column("room_id", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("subject", sa.String(length=255), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("created_at", Timestamp, nullable=False),
        sa.PrimaryKeyConstraint("room_id", "kind", "subject", name="pk_room_member"),
    )


def downgrade() -> None:
    op.drop_table("room_member")
    op.drop_table("room_setting")
