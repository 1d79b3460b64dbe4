"""The SQLite claim: ``UPDATE task … WHERE id IN (<the first claimable tasks of the served
jobs>) AND pending RETURNING …``, and how ``claims.claim`` reads its answer. It runs on the
one writer connection, which serialises writers: nothing to lock or skip. docs/performance.md
("The claim") says why it is built so; tests/store/sql_snapshots/claim-*.sqlite.sql show
it."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.sql import Executable

from taskhub.store.claim_shape import (
    ClaimShape,
    Taken,
    best_of,
    claimed_update,
    in_queue_order,
    served_jobs,
    within_limits_together,
)
from taskhub.store.running_limits import within_limits
from taskhub.store.tables import task_table

DIALECT = "sqlite"


@functools.cache
def sqlite_claim(shape: ClaimShape) -> Executable:
    """The claim statement of ``shape``: per kind of claimable task, the first ``limit`` of
    the served jobs' (within their running limits); of one kind and one task, that one
    task; else the best of them, as many together as their running limits let a claim
    take. (``shape.wait_for_locked`` changes nothing: no SQLite claim skips a row.)"""
    task = task_table
    served = served_jobs(shape.check_owner)
    # Only tasks whose submitter and room are within their job's running limits
    # (``rules.running_limits``; a task of an unlimited job is told by its flag).
    with_room = [within_limits(task, DIALECT), *shape.room_conditions(task)]
    kinds = [
        select(task.c.id, task.c.priority, task.c.turn_at)
        .where(*claimable, *with_room, task.c.job_id.in_(served))
        .order_by(*in_queue_order(task))
        .limit(shape.limit)
        for claimable in shape.source.conditions()
    ]
    if len(kinds) == 1 and shape.limit == 1:
        candidates = kinds[0].with_only_columns(task.c.id)
    else:
        heads = within_limits_together(
            best_of([select(*kind.subquery().c) for kind in kinds]), shape.limit
        )
        candidates = select(heads.c.id).order_by(*in_queue_order(heads)).limit(shape.limit)
    return shape.hot(claimed_update(shape, task.c.id.in_(candidates.scalar_subquery())))


def sqlite_taken(answer: Sequence[Any]) -> Taken:
    """What a claim statement's ``answer`` took: its rows (the worker's owner is not read;
    nothing is ever left behind a lock)."""
    # ``all()`` is typed as a ``Sequence`` but gives a list (SQLAlchemy's and
    # ``HotResult``'s alike), which ``claims.claim`` extends.
    return Taken(cast("list[Any]", answer))
