"""A payload is validated on the event loop while that stays cheap; a costly one goes to a
thread of its own, where a bounded number may wait, so that it does not stop the process's
other requests for up to seconds."""

import asyncio

import pytest

from taskhub.rules.errors import ValidationBusy, ValidationFailed
from taskhub.validation import payload_checks
from taskhub.validation.payload_checks import PayloadChecks
from taskhub.validation.payloads import validate_payload
from tests.support.costly_payloads import COSTLY, POINTS_SCHEMA, until_checks_waiting
from tests.support.event_loop import assert_served_during, record_spans, watched_loop

SCHEMA = POINTS_SCHEMA
CHEAP = {"points": [[1, 2, 3]]}
VERSION = object()  # the schema's version, by which its compiled validator is kept


async def refusal(checks: PayloadChecks, payload: dict) -> ValidationFailed | None:
    try:
        await checks.check(VERSION, SCHEMA, payload)
    except ValidationFailed as exc:
        return exc
    return None


async def test_a_costly_payload_is_validated_beside_the_event_loop(monkeypatch):
    validations = record_spans(monkeypatch, payload_checks, "errors_in_full")
    async with watched_loop() as turns:
        assert await refusal(PayloadChecks(), COSTLY) is None
    assert_served_during(turns, validations)


@pytest.mark.parametrize(
    "payload",
    [
        {"points": [[1.5, 2.5, 3.5]] * 5_000 + [[1, 2], [1, "x", 3]] + [[0, 0, 0]] * 5_000},
        {"points": [[1, 2]]},
    ],
    ids=["costly", "cheap"],
)
async def test_either_way_a_payload_gets_the_answer_it_would_get_on_the_event_loop(payload):
    with pytest.raises(ValidationFailed) as inline:
        validate_payload(VERSION, SCHEMA, payload)
    refused = await refusal(PayloadChecks(), payload)
    assert refused is not None
    assert (refused.detail, refused.errors) == (inline.value.detail, inline.value.errors)


async def test_a_payload_past_the_deadline_on_the_thread_is_refused_as_too_costly():
    schema = {"patternProperties": {f"^q{i}$": {"type": "integer"} for i in range(900)}}
    with pytest.raises(ValidationFailed) as refused:
        await PayloadChecks().check(object(), schema, {f"k{i}": 1 for i in range(60_000)})
    assert refused.value.errors == [{"loc": ["body", "payload"], "msg": "too costly to validate"}]


async def test_past_the_bound_a_costly_payload_is_refused_and_cheap_ones_go_on():
    checks = PayloadChecks(most_waiting=1)
    first = asyncio.create_task(refusal(checks, COSTLY))
    await until_checks_waiting(checks, 1)
    with pytest.raises(ValidationBusy) as busy:
        await checks.check(VERSION, SCHEMA, COSTLY)
    assert busy.value.status == 503 and busy.value.retry_after == 1
    assert not first.done()
    assert await refusal(checks, CHEAP) is None, "a cheap payload does not wait for the thread"
    assert not first.done()
    assert await first is None
    assert checks.waiting == 0
    assert await refusal(checks, COSTLY) is None, "its turn came: taken again"


async def test_a_payload_counts_against_the_bound_until_the_thread_is_done_with_it():
    """A running validation cannot be stopped: a client that hangs up and submits again does
    not get past the bound."""
    checks = PayloadChecks(most_waiting=1)
    first = asyncio.create_task(refusal(checks, COSTLY))
    await until_checks_waiting(checks, 1)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    with pytest.raises(ValidationBusy):
        await checks.check(VERSION, SCHEMA, COSTLY)
    await until_checks_waiting(checks, 0)
    assert await refusal(checks, COSTLY) is None


async def test_one_user_s_costly_payloads_leave_room_for_everyone_else_s():
    checks = PayloadChecks(most_waiting=8, most_waiting_per_user=1)
    alice, bob = object(), object()
    first = asyncio.create_task(checks.check(VERSION, SCHEMA, COSTLY, alice))
    await until_checks_waiting(checks, 1)
    with pytest.raises(ValidationBusy) as busy:
        await checks.check(VERSION, SCHEMA, COSTLY, alice)
    assert "of your costly payloads" in busy.value.detail
    await checks.check(VERSION, SCHEMA, COSTLY, bob)
    await first
    await checks.check(VERSION, SCHEMA, COSTLY, alice)
    assert checks.waiting == 0


async def test_a_background_task_s_payload_waits_for_its_turn_instead_of_being_refused():
    """``ValidatePayload`` runs in the background: its payload is held anyway."""
    checks = PayloadChecks(most_waiting=1)
    first = asyncio.create_task(refusal(checks, COSTLY))
    await until_checks_waiting(checks, 1)
    assert await checks.errors(VERSION, SCHEMA, COSTLY, bounded=False) == []
    assert await first is None


async def test_the_deadline_on_the_thread_is_the_process_s_setting():
    """``TASKHUB_PAYLOAD_VALIDATION_SECONDS``, with the keyword applications that go with it
    (500,000 a second)."""
    checks = PayloadChecks()
    checks.deadline_seconds = 0.05
    refused = await refusal(checks, COSTLY)
    assert refused is not None
    assert refused.errors == [{"loc": ["body", "payload"], "msg": "too costly to validate"}]
    assert "25,000 steps or 0.05 seconds" in refused.detail
    checks.deadline_seconds = 5.0
    assert await refusal(checks, COSTLY) is None


class SharesSeen:
    """Each time a payload goes to the thread: how many of ``user``'s are there then."""

    def __init__(self, checks: PayloadChecks, user: object) -> None:
        self.checks, self.user, self.seen = checks, user, []

    def queued(self) -> None:
        self.seen.append(self.checks.waiting_of(self.user))

    def finished(self) -> None:
        pass

    def refused(self) -> None:
        pass


async def test_one_user_s_background_payloads_hold_no_more_than_the_user_s_share():
    """``ValidatePayload``'s flood of costly payloads waits in its user's queue: at most the
    user's bound of them at the thread, while another user's costly submits get in and the
    flooding user's own costly submits are the ones refused."""
    checks = PayloadChecks(most_waiting=3, most_waiting_per_user=1)
    alice, bob = object(), object()
    shares = SharesSeen(checks, alice)
    checks.observe(shares)
    flood = [
        asyncio.create_task(checks.errors(VERSION, SCHEMA, COSTLY, alice, bounded=False))
        for _ in range(4)
    ]
    await until_checks_waiting(checks, 1)
    with pytest.raises(ValidationBusy) as busy:
        await checks.check(VERSION, SCHEMA, COSTLY, alice)
    assert "of your costly payloads" in busy.value.detail
    assert not all(task.done() for task in flood)
    await checks.check(VERSION, SCHEMA, COSTLY, bob)  # not refused: alice holds only her share
    assert [await task for task in flood] == [[]] * 4
    assert len(shares.seen) == 5  # alice's four and bob's one went to the thread
    assert max(shares.seen) == 1, shares.seen
    assert checks.waiting == 0


async def test_a_background_payload_given_up_while_waiting_passes_the_user_s_turn_on():
    checks = PayloadChecks(most_waiting_per_user=1)
    alice = object()
    first, second, third = (
        asyncio.create_task(checks.errors(VERSION, SCHEMA, COSTLY, alice, bounded=False))
        for _ in range(3)
    )
    await until_checks_waiting(checks, 1)
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second
    assert await first == [] and await third == []
    assert checks.waiting == 0
