"""What a fair job's new task's turn is computed from (``rules.fair_share.next_turn``):
the turn at the head of its priority's queue, and the last turn its share holds there.
Both are the first entry of an index range (``ix_task_claim_queue``,
``ix_task_share_queue``), however deep the queue."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import bindparam, select

from taskhub.store.connections import Connection
from taskhub.store.hot_statements import hot
from taskhub.store.tables import is_queued, task_table

task = task_table


def _queued_of_priority() -> list[Any]:
    return [
        task.c.job_id == bindparam("job_id", type_=task.c.job_id.type),
        task.c.priority == bindparam("priority", type_=task.c.priority.type),
        is_queued(),
    ]


_HEAD = select(task.c.turn_at).where(*_queued_of_priority()).order_by(task.c.turn_at).limit(1)
_LAST_OF_SHARE = (
    select(task.c.turn_at)
    .where(
        *_queued_of_priority(),
        task.c.share_key == bindparam("share_key", type_=task.c.share_key.type),
    )
    .order_by(task.c.turn_at.desc())
    .limit(1)
)
_TURN_INPUTS = hot(
    select(_HEAD.scalar_subquery().label("head"), _LAST_OF_SHARE.scalar_subquery().label("last"))
)


async def turn_inputs(
    conn: Connection, job_id: UUID, priority: int, share_key: str
) -> tuple[datetime | None, datetime | None]:
    """``(head, last)``: the lowest turn queued in the job at ``priority``, and the highest
    one ``share_key`` holds there (None where there is none)."""
    params = {"job_id": job_id, "priority": priority, "share_key": share_key}
    row = (await conn.execute(_TURN_INPUTS, params)).first()
    assert row is not None  # a select of two scalars has one row
    return row.head, row.last
