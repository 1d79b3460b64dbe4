"""The task state machine: exactly the seed's transition matrix; terminal states are final."""

import itertools

import pytest

from taskhub.rules.errors import InvalidTaskTransition
from taskhub.rules.states import (
    TERMINAL_STATUSES,
    TaskStatus,
    check_patch_transition,
    check_transition,
    patch_predecessors,
    predecessors,
)

S = TaskStatus
ALLOWED = {
    (S.PENDING, S.CLAIMED),
    (S.PENDING, S.CANCELLED),
    (S.CLAIMED, S.RUNNING),
    (S.CLAIMED, S.FAILED),
    (S.CLAIMED, S.CANCELLED),
    (S.RUNNING, S.COMPLETED),
    (S.RUNNING, S.FAILED),
    (S.RUNNING, S.CANCELLED),
}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(S, S)))
def test_transition_matrix(current, target):
    if (current, target) in ALLOWED:
        check_transition(current, target)
    else:
        with pytest.raises(InvalidTaskTransition):
            check_transition(current, target)


def test_terminal_states():
    assert {S.COMPLETED, S.FAILED, S.CANCELLED} == TERMINAL_STATUSES


@pytest.mark.parametrize("target", list(S))
def test_predecessors_are_the_matrix_read_backwards(target):
    assert predecessors(target) == {current for current, t in ALLOWED if t == target}


@pytest.mark.parametrize(("current", "target"), list(itertools.product(S, S)))
def test_a_patch_walks_the_matrix_except_into_claimed(current, target):
    if (current, target) in ALLOWED and target != S.CLAIMED:
        check_patch_transition(current, target)
        assert current in patch_predecessors(target)
    else:
        with pytest.raises(InvalidTaskTransition):
            check_patch_transition(current, target)
        assert current not in patch_predecessors(target)
