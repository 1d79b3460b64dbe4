"""The outbox: what goes through Redis is sent in the background, in order, and never holds
up the caller; a backlog past its limit drops the newest and counts them; at shutdown what
waits is sent (for a while)."""

from __future__ import annotations

import asyncio
import logging

from taskhub.observability import metrics
from taskhub.realtime.outbox import Outbox
from tests.support.waiting import eventually


class Gate:
    """A sender that records what it sent and can be held shut (a stalled Redis)."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.open.set()
        self.sent: list[int] = []

    async def send(self, item: int) -> None:
        await self.open.wait()
        if item < 0:
            raise ConnectionError("Redis went away")
        self.sent.append(item)


async def test_items_go_out_in_the_order_they_were_put() -> None:
    gate = Gate()
    outbox = Outbox("test", gate.send)
    for item in range(50):
        outbox.put(item)
    await outbox.drain(within=5)
    assert gate.sent == list(range(50))


async def test_a_stalled_sender_does_not_hold_up_the_caller_and_catches_up_later() -> None:
    gate = Gate()
    gate.open.clear()
    outbox = Outbox("test", gate.send)
    for item in range(3):
        outbox.put(item)  # returns at once although nothing can be sent
    await eventually(lambda: outbox.waiting == 2, 5, "the sender to take 0 and wait on the gate")
    assert gate.sent == []
    gate.open.set()
    await outbox.drain(within=5)
    assert gate.sent == [0, 1, 2]


async def test_failed_sends_are_logged_once_per_outage_and_the_next_items_still_go(
    caplog,
) -> None:
    caplog.set_level(logging.INFO, logger="taskhub.realtime.outbox")
    gate = Gate()
    outbox = Outbox("test", gate.send)
    for item in (1, -1, -2, -3, 2, -4, 3):
        outbox.put(item)
    await outbox.drain(within=5)
    assert gate.sent == [1, 2, 3]
    assert caplog.text.count("sending failed") == 2  # two outages
    assert caplog.text.count("sending works again") == 2


async def test_past_its_limit_the_newest_items_are_dropped_and_counted() -> None:
    gate = Gate()
    gate.open.clear()
    outbox = Outbox("test-limit", gate.send, limit=3)
    before = metrics.OUTBOX_DROPPED.labels("test-limit")._value.get()
    outbox.put(0)
    await eventually(lambda: outbox.waiting == 0, 5, "the sender to take 0 and wait on the gate")
    for item in range(1, 7):
        outbox.put(item)
    assert metrics.OUTBOX_DROPPED.labels("test-limit")._value.get() - before == 3
    gate.open.set()
    await outbox.drain(within=5)
    assert gate.sent == [0, 1, 2, 3]


async def test_drain_gives_up_after_its_time_and_stops_the_sender() -> None:
    gate = Gate()
    gate.open.clear()
    outbox = Outbox("test", gate.send)
    outbox.put(1)
    await outbox.drain(within=0.1)
    assert gate.sent == [] and outbox.waiting == 0  # the one it held is given up
    assert not outbox.running


async def test_once_drained_it_is_closed_and_later_items_are_dropped_and_counted() -> None:
    """Nothing is left running after shutdown: a put after the drain starts no sender."""
    gate = Gate()
    outbox = Outbox("test-closed", gate.send)
    before = metrics.OUTBOX_DROPPED.labels("test-closed")._value.get()
    outbox.put(1)
    await outbox.drain(within=5)
    outbox.put(2)
    # At once, no waiting: with no sender and nothing queued, nothing can be sent later.
    assert not outbox.running and outbox.waiting == 0
    assert gate.sent == [1]
    assert metrics.OUTBOX_DROPPED.labels("test-closed")._value.get() - before == 1


async def test_past_its_bytes_the_newest_items_are_dropped_and_counted() -> None:
    """Events carry results as big as a request body: the backlog is bounded in bytes too,
    the one being sent included (an item bigger than the bound still goes when nothing
    else waits)."""
    gate = Gate()
    gate.open.clear()
    outbox = Outbox("test-bytes", gate.send, size=lambda item: item, max_bytes=100)
    before = metrics.OUTBOX_DROPPED.labels("test-bytes")._value.get()
    outbox.put(10)
    await eventually(lambda: outbox.waiting == 0, 5, "the sender to take 10 and wait on the gate")
    for item in (60, 30, 20, 1):  # 10 + 60 + 30 fill the 100 bytes
        outbox.put(item)
    assert metrics.OUTBOX_DROPPED.labels("test-bytes")._value.get() - before == 2
    gate.open.set()
    await outbox.drain(within=5)
    assert gate.sent == [10, 60, 30]
    alone = Outbox("test-bytes", gate.send, size=lambda item: item, max_bytes=100)
    alone.put(500)
    await alone.drain(within=5)
    assert gate.sent[-1] == 500


async def test_after_a_failed_send_the_items_of_the_next_moment_are_given_up_untried() -> None:
    """Redis is away: each item would only wait for a failure of its own while the backlog
    behind it grows; one try per ``rest_after_failure`` is enough to see it back. What is
    given up is counted as dropped."""
    tried: list[int] = []

    async def send(item: int) -> None:
        tried.append(item)
        if item < 0:
            raise ConnectionError("Redis went away")

    outbox = Outbox("test-rest", send, rest_after_failure=1.0)
    before = metrics.OUTBOX_DROPPED.labels("test-rest")._value.get()
    for item in (1, -1, 2, 3):
        outbox.put(item)
    await eventually(
        lambda: metrics.OUTBOX_DROPPED.labels("test-rest")._value.get() - before == 2,
        5,
        "2 and 3 given up while the sender rests",
    )
    assert tried == [1, -1] and outbox.waiting == 0
    # The rest ends by the clock alone: no event to wait for instead.
    await asyncio.sleep(1.1)
    outbox.put(4)  # the rest is over: tried again
    await outbox.drain(within=5)
    assert tried == [1, -1, 4]
