"""``PacketQueue`` (a socket's outgoing packets) behaves as ``asyncio.Queue`` does for what
python-engineio asks of it: FIFO, ``get`` waits and survives a timeout without losing an
item, ``join`` waits for every ``task_done``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskhub.transport.sockets.packet_queue import PacketQueue


async def test_items_come_out_in_order_and_get_waits_for_one() -> None:
    queue: PacketQueue[int] = PacketQueue()
    waiting = asyncio.ensure_future(queue.get())
    await asyncio.sleep(0)
    assert not waiting.done()
    await queue.put(1)
    queue.put_nowait(2)
    assert await waiting == 1
    assert queue.qsize() == 1
    assert queue.get_nowait() == 2
    assert queue.empty()
    with pytest.raises(asyncio.QueueEmpty):
        queue.get_nowait()


async def test_waiting_getters_are_served_first_come_first_served() -> None:
    queue: PacketQueue[str] = PacketQueue()
    first, second = (asyncio.ensure_future(queue.get()) for _ in range(2))
    await asyncio.sleep(0)
    queue.put_nowait("a")
    queue.put_nowait("b")
    assert await first == "a"
    assert await second == "b"


async def test_a_get_that_times_out_loses_no_item() -> None:
    """As engineio's poll does (``wait_for(queue.get(), …)``): the timed-out getter takes
    nothing, the next get has the item."""
    queue: PacketQueue[str] = PacketQueue()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(queue.get(), 0.01)
    queue.put_nowait("a")
    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_a_getter_cancelled_after_its_wake_up_passes_it_on() -> None:
    """Woken, then cancelled before it ran: the item goes to the next getter."""
    queue: PacketQueue[str] = PacketQueue()
    first, second = (asyncio.ensure_future(queue.get()) for _ in range(2))
    await asyncio.sleep(0)
    queue.put_nowait("a")  # wakes the first
    first.cancel()
    assert await asyncio.wait_for(second, 1) == "a"
    assert first.cancelled()


async def test_join_waits_for_every_task_done() -> None:
    queue: PacketQueue[int] = PacketQueue()
    await queue.join()  # nothing unfinished: at once
    queue.put_nowait(1)
    queue.put_nowait(2)
    joined = asyncio.ensure_future(queue.join())
    queue.get_nowait()
    queue.task_done()
    await asyncio.sleep(0)
    assert not joined.done()
    queue.get_nowait()
    queue.task_done()
    await asyncio.wait_for(joined, 1)
    queue.put_nowait(3)  # unfinished again: a new join waits again
    again = asyncio.ensure_future(queue.join())
    await asyncio.sleep(0)
    assert not again.done()
    queue.get_nowait()
    queue.task_done()
    await asyncio.wait_for(again, 1)
    with pytest.raises(ValueError):
        queue.task_done()


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers()),
        st.tuples(st.just("get"), st.none()),
        st.tuples(st.just("done"), st.none()),
    ),
    max_size=40,
)


@given(OPERATIONS)
def test_any_sequence_of_operations_goes_as_with_asyncio_queue(
    operations: list[tuple[str, Any]],
) -> None:
    """Differential: the same puts, gets and task_dones give the same items, errors,
    sizes and ``join`` readiness as ``asyncio.Queue``."""

    async def run(queue: Any) -> list[Any]:
        seen: list[Any] = []
        for name, value in operations:
            try:
                if name == "put":
                    queue.put_nowait(value)
                    seen.append(None)
                elif name == "get":
                    seen.append(queue.get_nowait())
                else:
                    queue.task_done()
                    seen.append(None)
            except (asyncio.QueueEmpty, ValueError) as exc:
                seen.append(type(exc))
            joined = asyncio.ensure_future(queue.join())
            await asyncio.sleep(0)
            seen.append((queue.qsize(), queue.empty(), joined.done()))
            joined.cancel()
        return seen

    async def both() -> tuple[list[Any], list[Any]]:
        return await run(PacketQueue()), await run(asyncio.Queue())

    ours, theirs = asyncio.run(both())
    assert ours == theirs
