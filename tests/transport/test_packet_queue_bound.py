"""A socket's queue of outgoing packets is bounded (``BoundedPacketQueue``): past the bound
its oldest room events that the client can do without are dropped for one ``resync``
event; acknowledgements, pushes, cancels and control packets are never dropped; past the
hard limit the session ends."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import engineio
import pytest
from engineio import packet as eio_packet
from engineio.async_socket import AsyncSocket
from hypothesis import given
from hypothesis import strategies as st

from taskhub.transport.sockets import bounded_queue
from taskhub.transport.sockets.bounded_queue import (
    DROPPABLE_EVENTS,
    HARD_LIMIT_FACTOR,
    RESYNC,
    BoundedPacketQueue,
    bounded_packet_queue,
    droppable,
)
from tests.support.waiting import eventually

LIMIT = 16
TARGET = LIMIT - LIMIT // 4  # what a pass drops down to


def message(text: str) -> Any:
    """An Engine.IO MESSAGE packet carrying the Socket.IO packet ``text``."""
    return eio_packet.Packet(eio_packet.MESSAGE, text)


def event(name: str, n: int = 0) -> Any:
    """A room event as python-socketio queues it (namespace ``/``, no ack id)."""
    return message(f'2["{name}",{{"n":{n}}}]')


# Packets that are never dropped, whatever comes after them.
KEPT = {
    "connect": message('0{"sid":"s1"}'),
    "disconnect": message("1"),
    "ack": message('31[{"room_id":"r"}]'),
    "task_pushed": event("task_pushed"),
    "task_cancelled": event("task_cancelled"),
    "provider_request": event("provider_request"),
    "event asking for an ack": message('27["task_status_event",{"n":0}]'),
    "event of another namespace": message('2/other,["task_log",{"n":0}]'),
    "event named like a droppable one": event("task_logs"),
    "ping": eio_packet.Packet(eio_packet.PING),
    "noop": eio_packet.Packet(eio_packet.NOOP),
    "close": eio_packet.Packet(eio_packet.CLOSE),
    "binary": eio_packet.Packet(eio_packet.MESSAGE, b"\x00"),
    "writer's end": None,
}


def queue(limit: int = LIMIT) -> BoundedPacketQueue:
    return bounded_packet_queue(None, limit)()


def drain(q: BoundedPacketQueue) -> list[Any]:
    """Everything queued, as the writer takes it (``get_nowait``, ``task_done``)."""
    taken = []
    while not q.empty():
        taken.append(q.get_nowait())
        q.task_done()
    return taken


def resyncs(items: list[Any]) -> list[int]:
    """The ``dropped`` counts of the resync events among ``items``."""
    found = []
    for item in items:
        if isinstance(item, eio_packet.Packet) and str(item.data).startswith(f'2["{RESYNC}",'):
            _name, data = json.loads(item.data[1:])
            found.append(data["dropped"])
    return found


def numbers(items: list[Any]) -> list[int]:
    return [json.loads(item.data[1:])[1]["n"] for item in items if droppable(item)]


@pytest.mark.parametrize("name", DROPPABLE_EVENTS)
def test_the_room_events_a_client_can_do_without_are_droppable(name: str) -> None:
    assert droppable(event(name))


@pytest.mark.parametrize("kind", list(KEPT))
def test_other_packets_are_not_droppable(kind: str) -> None:
    assert not droppable(KEPT[kind])


def test_up_to_the_bound_nothing_is_dropped() -> None:
    q = queue()
    for n in range(LIMIT):
        q.put_nowait(event("task_log", n))
    assert numbers(drain(q)) == list(range(LIMIT))


def test_past_the_bound_the_oldest_room_events_go_and_one_resync_takes_their_place() -> None:
    q = queue()
    q.put_nowait(KEPT["connect"])
    for n in range(LIMIT):
        q.put_nowait(event("task_status_event", n))
    assert q.qsize() <= LIMIT
    taken = drain(q)
    assert taken[0] is KEPT["connect"]
    [dropped] = resyncs(taken[1:2])  # where the first dropped event was
    assert resyncs(taken) == [dropped]
    assert numbers(taken) == list(range(dropped, LIMIT))  # the newest, in order
    assert len(taken) <= TARGET


def test_acknowledgements_pushes_cancels_and_control_packets_are_never_dropped() -> None:
    q = queue(2 * LIMIT)
    published = 0
    for kept in KEPT.values():
        for _ in range(3):
            q.put_nowait(event("jobs_invalidate", published))
            published += 1
        q.put_nowait(kept)
    assert q.qsize() <= 2 * LIMIT
    taken = drain(q)
    assert [item for item in taken if item in KEPT.values()] == list(KEPT.values())
    [dropped] = resyncs(taken)
    assert len(numbers(taken)) + dropped == published


def test_later_drops_add_to_the_pending_resync() -> None:
    """One resync at a time: while it waits, each new drop raises its count; every event
    is either delivered or counted."""
    q = queue()
    for n in range(10 * LIMIT):
        q.put_nowait(event("task_log", n))
        pending = resyncs(list(q._items or ()))
        assert len(pending) == 1 or n < LIMIT
        assert q.qsize() <= LIMIT
    taken = drain(q)
    [dropped] = resyncs(taken)
    assert numbers(taken) == list(range(dropped, 10 * LIMIT))


def test_a_resync_taken_by_the_writer_lets_the_next_drops_queue_a_new_one() -> None:
    q = queue()
    delivered: list[Any] = []
    for n in range(3 * LIMIT):
        q.put_nowait(event("task_log", n))
    while True:  # the writer takes up to the resync
        item = q.get_nowait()
        q.task_done()
        delivered.append(item)
        if resyncs([item]):
            break
    for n in range(3 * LIMIT, 6 * LIMIT):
        q.put_nowait(event("task_log", n))
    delivered += drain(q)
    counts = resyncs(delivered)
    assert len(counts) == 2
    assert len(numbers(delivered)) + sum(counts) == 6 * LIMIT
    assert numbers(delivered) == sorted(numbers(delivered))


async def test_join_counts_what_was_dropped_as_done() -> None:
    """Engine.IO's ``close`` joins the queue: dropped packets must not hold it."""
    q = queue()
    for n in range(5 * LIMIT):
        q.put_nowait(event("task_log", n))
    joined = asyncio.ensure_future(q.join())
    await asyncio.sleep(0)
    assert not joined.done()
    drain(q)
    await asyncio.wait_for(joined, 1)


def test_a_slow_socket_s_drops_cost_a_few_looks_per_packet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Amortized: each pass over the queue frees a quarter of the bound (or, with nothing
    to drop, is not repeated before a quarter more came), never a pass per packet."""
    looks = 0
    real = bounded_queue.droppable

    def counted(item: Any) -> bool:
        nonlocal looks
        looks += 1
        return real(item)

    monkeypatch.setattr(bounded_queue, "droppable", counted)
    limit, puts = 400, 20_000
    q = queue(limit)
    for n in range(puts):
        q.put_nowait(event("task_log", n))
    assert looks <= 2 * puts
    looks = 0
    q = queue(limit)
    for _ in range(HARD_LIMIT_FACTOR * limit):  # only undroppable ones, up to the hard limit
        q.put_nowait(KEPT["ack"])
    passes = (HARD_LIMIT_FACTOR - 1) * 4 + 1  # one a quarter of the bound, from the bound on
    assert looks <= passes * HARD_LIMIT_FACTOR * limit
    assert q.qsize() == HARD_LIMIT_FACTOR * limit


async def test_past_the_hard_limit_the_session_is_ended_without_a_close_packet() -> None:
    """Four times the bound of undroppable packets: they go, the writer gets its end
    (``None``), and the session is closed as a transport error (its disconnect runs; no
    CLOSE packet, after which a client would not reconnect)."""
    eio = engineio.AsyncServer(async_mode="asgi")
    eio.create_queue = bounded_packet_queue(eio, LIMIT)
    ended: list[tuple[str, Any]] = []

    async def disconnect(sid: str, reason: Any) -> None:
        ended.append((sid, reason))

    eio.on("disconnect", disconnect)
    session = AsyncSocket(eio, "slow")
    eio.sockets["slow"] = session
    for _ in range(HARD_LIMIT_FACTOR * LIMIT):
        await session.send(KEPT["ack"])
    assert not ended and session.queue.qsize() == HARD_LIMIT_FACTOR * LIMIT
    await session.send(KEPT["ack"])
    assert list(session.queue._items or ()) == [None]
    await eventually(lambda: ended, 5, "the session ended")
    assert ended == [("slow", eio.reason.TRANSPORT_ERROR)]
    assert session.closed
    assert await session.poll() == []  # the websocket's writer stops
    await asyncio.wait_for(session.queue.join(), 1)


OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("room event"), st.sampled_from(DROPPABLE_EVENTS)),
        st.tuples(st.just("kept"), st.sampled_from(["ack", "task_pushed", "ping", "connect"])),
        st.tuples(st.just("take"), st.integers(1, 8)),
    ),
    max_size=300,
)


@given(OPERATIONS)
def test_any_mix_delivers_or_counts_every_event_and_keeps_every_other_packet(
    operations: list[tuple[str, Any]],
) -> None:
    """Whatever the mix of room events, other packets and the writer's takes: every other
    packet comes out, in order; the room events that come out are in order, and those
    that do not are counted by the resyncs; at most one resync waits at a time; with few
    undroppable packets waiting, the queue stays within its bound."""
    q = queue()
    put_kept: list[Any] = []
    events = 0
    taken: list[Any] = []
    for kind, value in operations:
        if kind == "room event":
            q.put_nowait(event(value, events))
            events += 1
        elif kind == "kept":
            kept = message(f'31[{{"k":{len(put_kept)}}}]') if value == "ack" else KEPT[value]
            q.put_nowait(kept)
            put_kept.append(kept)
        else:
            for _ in range(min(value, q.qsize())):
                taken.append(q.get_nowait())
                q.task_done()
        waiting = list(q._items or ())
        assert len(resyncs(waiting)) <= 1
        undroppable = sum(1 for item in waiting if not droppable(item))
        if undroppable < TARGET:
            assert len(waiting) <= LIMIT
    taken += drain(q)
    assert [item for item in taken if any(item is kept for kept in put_kept)] == put_kept
    assert numbers(taken) == sorted(numbers(taken))
    assert len(numbers(taken)) + sum(resyncs(taken)) == events
