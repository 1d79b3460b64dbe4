"""Who may act for a worker: the rule on its own."""

from uuid import uuid4

import pytest

from taskhub.rules.errors import Forbidden, WorkerNotFound
from taskhub.rules.records import Principal
from taskhub.rules.worker_ownership import check_worker, may_act_for

ALICE = Principal(id=uuid4(), name="alice", is_superuser=False)
BOB = Principal(id=uuid4(), name="bob", is_superuser=False)
ROOT = Principal(id=uuid4(), name="root", is_superuser=True)


def test_the_owner_and_a_superuser_may_act_for_a_worker_and_nobody_else() -> None:
    assert may_act_for(ALICE, ALICE.id)
    assert may_act_for(ROOT, ALICE.id)
    assert not may_act_for(BOB, ALICE.id)


def test_a_missing_worker_is_not_found_for_anyone_and_another_users_is_forbidden() -> None:
    worker_id = uuid4()
    check_worker(ALICE, worker_id, ALICE.id)
    check_worker(ROOT, worker_id, ALICE.id)
    with pytest.raises(Forbidden):
        check_worker(BOB, worker_id, ALICE.id)
    for principal in (ALICE, ROOT):
        with pytest.raises(WorkerNotFound):
            check_worker(principal, worker_id, None)
