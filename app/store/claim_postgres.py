"""The PostgreSQL claim: ``WITH picked AS (<the served jobs' queue heads, locked, SKIP
LOCKED>), claimed AS (UPDATE task … FROM picked RETURNING …) SELECT … FROM (SELECT 1) LEFT
JOIN claimed``, one round trip that also answers with the worker's owner when it claims
nothing; and how ``claims.claim`` reads that answer. docs/performance.md ("The claim")
says why it is built so; tests/store/sql_snapshots/claim-*.postgresql.sql show it."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import (
    CTE,
    ColumnClause,
    Label,
    and_,
    bindparam,
    literal,
    literal_column,
    select,
    true,
)
from sqlalchemy.sql import Executable

from taskhub.store.claim_shape import (
    ClaimFrom,
    ClaimShape,
    Taken,
    best_of,
    claimable_left,
    claimed_update,
    in_queue_order,
    served_jobs,
    within_limits_together,
)
from taskhub.store.running_limits import within_limits
from taskhub.store.tables import task_table, worker_table

DIALECT = "postgresql"
_ROW_ADDRESS: Label[Any] = literal_column(f"{task_table.name}.ctid").label("row_address")
_ROW_ADDRESS_OF_TASK: ColumnClause[Any] = literal_column(f"{task_table.name}.ctid")


@functools.cache
def postgresql_claim(shape: ClaimShape) -> Executable:
    """The claim statement of ``shape``: per served job and kind of claimable task, the
    head of its queue straight off its index (a LATERAL scan that stops after ``limit``
    rows, locked, skipping locked ones unless ``wait_for_locked``); the best heads over all
    jobs, within their running limits, picked in a CTE; the update reaches each picked row
    by its id and address (``ctid``, stable while it is locked). It answers at least one
    row: the claimed ones, or one of NULLs, each with ``worker_owner``; the claim of the
    due waiting tasks also with ``claimable_left``."""
    task = task_table
    served = served_jobs(shape.check_owner).subquery("served")
    # Only tasks whose submitter and room are within their job's running limits
    # (``rules.running_limits``; a task of an unlimited job is told by its index entry).
    with_room = [within_limits(task, DIALECT), *shape.room_conditions(task)]

    def heads_of(claimable: list[Any], name: str) -> Any:
        head = (
            select(task.c.id, task.c.priority, task.c.turn_at, _ROW_ADDRESS)
            .where(*claimable, *with_room, task.c.job_id == served.c.job_id)
            .order_by(*in_queue_order(task))
            .limit(shape.limit)
            .with_for_update(skip_locked=not shape.wait_for_locked)
            .lateral(name)
        )
        return select(*head.c).select_from(served).join(head, true())

    kinds = [heads_of(kind, f"head{n}") for n, kind in enumerate(shape.source.conditions())]
    heads = within_limits_together(best_of(kinds), shape.limit)
    # In a CTE, not ``id IN (subquery)``: the planner may run a subquery again, locking
    # (and claiming) more than ``limit`` rows.
    picked = (
        select(heads.c.id, heads.c.row_address)
        .order_by(*in_queue_order(heads))
        .limit(shape.limit)
        .cte("picked")
    )
    # The picked rows stay locked until the update, so their addresses hold: the update
    # reaches them directly, whatever the planner believes about the table.
    chosen = and_(task.c.id == picked.c.id, picked.c.row_address == _ROW_ADDRESS_OF_TASK)
    rows = claimed_update(shape, chosen).cte("claimed")
    # One round trip also for an empty claim: the claimed rows (or one row of NULLs) with
    # the worker's owner, which says why nothing was claimed.
    one = select(literal(1).label("one")).subquery("one")
    owner = select(worker_table.c.user_id).where(worker_table.c.id == bindparam("worker_id"))
    columns: list[CTE | Label[Any]] = [rows, owner.scalar_subquery().label("worker_owner")]
    if shape.source == ClaimFrom.DUE_WAITING:  # asked only after a short claim of the queue
        columns.append(claimable_left(DIALECT, shape.exclude_rooms).label("claimable_left"))
    return shape.hot(select(*columns).select_from(one.outerjoin(rows, true())))


def postgresql_taken(answer: Sequence[Any]) -> Taken:
    """What a claim statement's ``answer`` took: its rows but the one of NULLs, the
    worker's owner (on every row), and whether a claimable task was left (the due waiting
    tasks' claim alone asks)."""
    first = answer[0]
    return Taken(
        [row for row in answer if row.id is not None],
        owner_read=True,
        worker_owner=first.worker_owner,
        claimable_left=bool(getattr(first, "claimable_left", False)),
    )
