"""A fair job's turns (start-time fair queueing): each share continues after its own last
queued turn, a share with none queued joins at the head, and claims taking the lowest turn
then hand tasks out round-robin over the shares."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import uuid4

from hypothesis import example, given
from hypothesis import strategies as st

from taskhub.rules.fair_share import TURN_STEP, ClaimOrder, SubmitterClass, next_turn, share_key

T0 = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def test_an_empty_queue_gives_the_submission_time():
    assert next_turn(T0, head=None, last=None) == T0


def test_a_share_with_tasks_queued_continues_after_its_last():
    assert next_turn(T0 + timedelta(seconds=9), head=T0, last=T0 + timedelta(seconds=2)) == (
        T0 + timedelta(seconds=2) + TURN_STEP
    )


def test_a_share_with_nothing_queued_joins_at_the_head():
    late = T0 + timedelta(minutes=5)
    assert next_turn(late, head=T0, last=None) == T0


def test_shares_are_submitters_or_rooms_and_none_in_fifo():
    user = uuid4()
    assert share_key(ClaimOrder.FAIR_BY_SUBMITTER, user, "room1") == str(user)
    assert share_key(ClaimOrder.FAIR_BY_ROOM, user, "room1") == "room1"
    assert share_key(ClaimOrder.FIFO, user, "room1") is None
    assert not ClaimOrder.FIFO.is_fair and ClaimOrder.FAIR_BY_ROOM.is_fair


@dataclass
class Queued:
    turn: datetime
    seq: int  # stands for the time-ordered id
    share: str


class Queue:
    """A fair job's queue as the database keeps it: submits take turns by ``next_turn``,
    claims take the lowest ``(turn, id)``."""

    def __init__(self) -> None:
        self.tasks: list[Queued] = []
        self.seq = 0

    def submit(self, share: str, at: datetime) -> None:
        head = min((t.turn for t in self.tasks), default=None)
        last = max((t.turn for t in self.tasks if t.share == share), default=None)
        self.seq += 1
        self.tasks.append(Queued(next_turn(at, head, last), self.seq, share))

    def claim(self) -> str:
        first = min(self.tasks, key=lambda t: (t.turn, t.seq))
        self.tasks.remove(first)
        return first.share


def test_one_users_burst_does_not_hold_back_anothers_single_task():
    """A's burst holds turns a ``TURN_STEP`` apart, far past the time B submits at (1,000
    turns span a second): by its submit time, B's task would wait behind about 500 of A's;
    it goes right after the head instead."""
    queue = Queue()
    for n in range(1_000):
        queue.submit("A", T0 + n * timedelta(microseconds=100))
    for _ in range(3):
        assert queue.claim() == "A"
    queue.submit("B", T0 + timedelta(seconds=0.5))
    assert [queue.claim() for _ in range(2)] == ["A", "B"]


@given(
    st.lists(st.sampled_from("ABCD"), min_size=1, max_size=60),
    st.lists(st.integers(min_value=0, max_value=3), min_size=1, max_size=60),
)
# C joins at the head's turn, which A's task claimed next already held; then A's next
# task and C's second share a turn and go by age: A, C, A, A while both wait.
@example(submits=list("AAACAAAC"), claims_between=[0, 0, 2, 1, 0, 0, 0, 3])
def test_backlogged_shares_are_served_round_robin(submits, claims_between):
    """Whatever the submits and claims interleave, over any run of claims during which a
    set of shares all kept tasks queued, no share of that set got more than two tasks more
    than another (``rules/fair_share``: one for the round a share joins in, one as equal
    turns go by age): round-robin, give or take those."""
    queue = Queue()
    at = T0
    served: list[tuple[str, frozenset[str]]] = []  # who got it, who was waiting then
    for share, claims in zip(submits, claims_between, strict=False):
        at += timedelta(milliseconds=1)
        queue.submit(share, at)
        for _ in range(claims):
            if queue.tasks:
                waiting = frozenset(t.share for t in queue.tasks)
                served.append((queue.claim(), waiting))
    for start in range(len(served)):
        for end in range(start + 1, len(served) + 1):
            window = served[start:end]
            always = frozenset.intersection(*(waiting for _, waiting in window))
            counts = Counter(share for share, _ in window if share in always)
            if len(always) > 1:
                got = [counts.get(share, 0) for share in always]
                assert max(got) - min(got) <= 2, (window, counts)


def test_a_fair_jobs_submitter_is_classed_by_whether_its_tasks_were_queued_already():
    assert SubmitterClass.of("alice", backlogged=True) is SubmitterClass.BACKLOGGED
    assert SubmitterClass.of("alice", backlogged=False) is SubmitterClass.OCCASIONAL
    assert SubmitterClass.of(None, backlogged=False) is SubmitterClass.UNCLASSED
