"""Turns in a fair job's queue (``rules.fair_share``): what a new task's turn is computed
from (``next_turn``) — the turn at the head of its priority's queue, and the last turn its
share holds there, each the first entry of an index range (``ix_task_claim_queue``,
``ix_task_share_queue``) however deep the queue — and the turn of a task that comes back
into the queue (``requeued_turn``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from sqlalchemy import and_, bindparam, case, func, literal_column, select

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


def requeued_turn() -> Any:
    """The ``turn_at`` of a fair job's task written back into the queue (a retry, a
    waiting task found due): no earlier than the head of its priority's queue of tasks that
    came straight in (no ``run_at``). Kept, its old turn would let the tasks its share
    submits next follow on from it, ahead of every other share's. (Tasks with a ``run_at``
    are left out of that head, so that a statement queueing several reads the same head
    for each, on either engine.)"""
    queued = task.alias("queued")
    head = (
        select(func.min(queued.c.turn_at))
        .where(
            queued.c.job_id == task.c.job_id,
            queued.c.priority == task.c.priority,
            # ``QUEUED_ONLY`` as the claim queue's index spells it
            queued.c.status == literal_column("'pending'"),
            literal_column(f"NOT {queued.name}.waiting"),
            queued.c.run_at.is_(None),
        )
        .scalar_subquery()
    )
    behind = and_(task.c.share_key.is_not(None), head > task.c.turn_at)
    return case((behind, head), else_=task.c.turn_at)


async def turn_inputs(
    conn: Connection, job_id: UUID, priority: int, share_key: str
) -> tuple[datetime | None, datetime | None]:
    """``(head, last)``: the lowest turn queued in the job at ``priority``, and the highest
    one ``share_key`` holds there (None where there is none)."""
    params = {"job_id": job_id, "priority": priority, "share_key": share_key}
    row = (await conn.execute(_TURN_INPUTS, params)).first()
    assert row is not None  # a select of two scalars has one row
    return row.head, row.last
