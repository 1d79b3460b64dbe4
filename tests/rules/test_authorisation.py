"""Who may write a task: the rule on its own."""

from uuid import uuid4

import pytest

from taskhub.rules.authorisation import (
    Role,
    check_claim,
    check_update,
    claim_roles,
    may_claim,
    may_update,
    update_roles,
    update_unrestricted,
)
from taskhub.rules.errors import Forbidden, WorkerNotFound
from taskhub.rules.records import Principal
from taskhub.rules.states import TaskStatus

ALICE = Principal(id=uuid4(), name="alice", is_superuser=False)
BOB = Principal(id=uuid4(), name="bob", is_superuser=False)
ROOT = Principal(id=uuid4(), name="root", is_superuser=True)
UPDATES = [*TaskStatus, None]


def test_the_submitter_may_only_cancel() -> None:
    assert update_roles(TaskStatus.CANCELLED) == (Role.WORKER_OWNER, Role.SUBMITTER)
    for target in UPDATES:
        if target != TaskStatus.CANCELLED:
            assert update_roles(target) == (Role.WORKER_OWNER,)
    assert claim_roles() == (Role.WORKER_OWNER,)


@pytest.mark.parametrize("target", UPDATES)
def test_the_owner_of_the_worker_holding_the_task_may_update_it(target) -> None:
    assert may_update(ALICE, target, worker_owner=ALICE.id, submitted_by=BOB.id)
    assert not may_update(BOB, target, worker_owner=ALICE.id, submitted_by=None)


@pytest.mark.parametrize("target", UPDATES)
def test_the_submitter_may_cancel_and_nothing_else(target) -> None:
    allowed = may_update(ALICE, target, worker_owner=None, submitted_by=ALICE.id)
    assert allowed == (target == TaskStatus.CANCELLED)
    assert may_update(ALICE, target, worker_owner=BOB.id, submitted_by=ALICE.id) == allowed


@pytest.mark.parametrize("target", UPDATES)
def test_a_superuser_may_update_any_task(target) -> None:
    assert may_update(ROOT, target, worker_owner=None, submitted_by=None)
    check_update(ROOT, target, worker_owner=ALICE.id, submitted_by=BOB.id)


@pytest.mark.parametrize("target", UPDATES)
def test_a_private_rooms_maintainer_may_cancel_anyones_task_there_and_nothing_else(
    target,
) -> None:
    facts = {"worker_owner": ALICE.id, "submitted_by": ALICE.id}
    allowed = may_update(BOB, target, maintains_room=True, **facts)
    assert allowed == (target == TaskStatus.CANCELLED)
    assert update_unrestricted(BOB, target, maintains_room=True) == allowed
    assert not may_update(BOB, target, **facts)


def test_a_refused_update_is_forbidden() -> None:
    with pytest.raises(Forbidden):
        check_update(BOB, TaskStatus.COMPLETED, worker_owner=ALICE.id, submitted_by=BOB.id)
    check_update(BOB, TaskStatus.CANCELLED, worker_owner=ALICE.id, submitted_by=BOB.id)


def test_a_task_without_a_worker_has_no_worker_owner_to_match() -> None:
    assert not may_update(ALICE, TaskStatus.RUNNING, worker_owner=None, submitted_by=None)


def test_claims_are_for_the_workers_owner_or_a_superuser() -> None:
    worker = uuid4()
    assert may_claim(ALICE, ALICE.id) and may_claim(ROOT, ALICE.id)
    assert not may_claim(BOB, ALICE.id)
    check_claim(ALICE, worker, ALICE.id)
    check_claim(ROOT, worker, ALICE.id)
    with pytest.raises(Forbidden):
        check_claim(BOB, worker, ALICE.id)


@pytest.mark.parametrize("principal", [ALICE, ROOT])
def test_nobody_claims_for_a_worker_that_does_not_exist(principal) -> None:
    assert not may_claim(principal, None)
    with pytest.raises(WorkerNotFound):
        check_claim(principal, uuid4(), None)
