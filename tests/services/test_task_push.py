"""The claim of a task push: for a worker that granted slots, up to that many of its
oldest tasks claimed and started at once (running, with a fresh claim token and a lease),
each announced as going from pending straight to running; the claim's own guards hold."""

from __future__ import annotations

from uuid import uuid4

import pytest
from prometheus_client import REGISTRY

from taskhub.rules.errors import DomainError
from taskhub.rules.events import TaskStatusChanged
from taskhub.rules.records import Principal
from taskhub.rules.states import TaskStatus
from taskhub.services.task_push import claim_pushed
from taskhub.services.users import create_user
from taskhub.store.database import Database
from tests.services.test_waiting_tasks import owner_and_worker, submit


def pushed_so_far() -> float:
    return REGISTRY.get_sample_value("taskhub_worker_shortcuts_total", {"kind": "push"}) or 0.0


async def test_a_push_claims_and_starts_up_to_the_granted_slots(db: Database) -> None:
    owner, worker_id = await owner_and_worker(db)
    submitted = [await submit(db, owner) for _ in range(3)]
    before = pushed_so_far()

    records, events = await claim_pushed(
        db, owner, worker_id, 2, closed=frozenset(), lease_seconds=60
    )

    assert [record.id for record in records] == submitted[:2]  # the oldest first
    assert all(record.status == TaskStatus.RUNNING for record in records)
    assert all(record.worker_id == worker_id and record.started_at for record in records)
    assert len({record.claim_token for record in records}) == 1
    announced = [(e.task.id, e.previous, e.task.status) for e in events]
    assert announced == [(r.id, TaskStatus.PENDING, TaskStatus.RUNNING) for r in records]
    assert all(isinstance(e, TaskStatusChanged) for e in events)
    assert pushed_so_far() - before == 2


async def test_a_push_that_finds_nothing_claims_nothing(db: Database) -> None:
    owner, worker_id = await owner_and_worker(db)
    before = pushed_so_far()
    records, events = await claim_pushed(
        db, owner, worker_id, 5, closed=frozenset(), lease_seconds=60
    )
    assert (records, len(events)) == ([], 0)
    assert pushed_so_far() == before


async def test_a_push_keeps_the_claim_s_guards(db: Database) -> None:
    owner, worker_id = await owner_and_worker(db)
    await submit(db, owner)
    user_id, _ = await create_user(db, "mallory")
    stranger = Principal(id=user_id, name="mallory", is_superuser=False)
    with pytest.raises(DomainError) as refused:
        await claim_pushed(db, stranger, worker_id, 1, closed=frozenset(), lease_seconds=60)
    assert refused.value.status == 403
    with pytest.raises(DomainError) as unknown:
        await claim_pushed(db, owner, uuid4(), 1, closed=frozenset(), lease_seconds=60)
    assert unknown.value.status == 404
