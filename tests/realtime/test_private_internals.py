"""python-socketio's and python-engineio's private internals that Taskhub overrides or
calls, as the pinned versions have them: those of ``TaskhubRedisManager``
(``app/realtime/redis_clients.py``), and those of the socket admission
(``app/transport/sockets/admission.py``), each session's ``PacketQueue`` and its bound
(``app/transport/sockets/packet_queue.py``, ``bounded_queue.py``) and ``TaskhubApp``
(``app/main.py``). An upgrade that changes one fails here, saying what changed, before
cross-replica events quietly stop or sessions before sign-in (or a slow reader's queue)
go unbounded: re-test that code against the new version, then widen the pin in
pyproject.toml (and ``PINS`` below).

Another python-socketio (or python-engineio) private name used anywhere in ``app/`` is one
more line in ``INTERNALS``; another subclass of one of their classes, one more line in
``SUBCLASSES``. What a signature cannot show (which handlers python-socketio registers,
what Engine.IO calls on a session's queue, what its ASGI driver puts in the environ, how
it reads ``sid``) is checked by running the libraries, over real connections where it
matters."""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import engineio
import engineio.async_server
import engineio.async_socket
import engineio.base_server
import engineio.base_socket
import pytest
import redis.asyncio as redis
import socketio
import websockets
from engineio import packet as eio_packet
from engineio.async_drivers import asgi as asgi_driver
from engineio.async_socket import AsyncSocket
from engineio.base_socket import BaseSocket
from socketio import packet as sio_packet
from socketio.async_pubsub_manager import AsyncPubSubManager
from socketio.base_manager import BaseManager

from taskhub.main import TaskhubApp
from taskhub.observability.request_id import Message, Receive, Scope, Send
from taskhub.realtime import socket_json
from taskhub.realtime.redis_clients import TaskhubRedisManager, redis_options
from taskhub.realtime.room_fanout import RoomFanout, RoomFanoutManager
from taskhub.transport.sockets.admission import (
    BINARY_REFUSED,
    EIO_SID_KEY,
    SocketAdmission,
    _query_sid,
)
from taskhub.transport.sockets.bounded_queue import (
    RESYNC,
    BoundedPacketQueue,
    bounded_packet_queue,
    droppable,
    resync_packet,
)
from taskhub.transport.sockets.packet_queue import PacketQueue
from tests.realtime.hubs import served
from tests.support.private_internals import (
    Internal,
    attribute_calls,
    bare_uses,
    check,
    check_no_shadowing,
    check_pin,
    installed,
)
from tests.support.server import RedisServer
from tests.support.waiting import eventually

# The tested range of each distribution whose internals are below, as pyproject.toml pins it.
PINS = {"python-socketio": ">=5.18.1,<5.19", "python-engineio": ">=4.15.1,<4.16"}

INTERNALS = [
    Internal(
        socketio.AsyncRedisManager,
        "_publish",
        "(self, data)",
        "python-socketio",
        "TaskhubRedisManager._publish queues each message for other processes in an Outbox "
        "(emit, enter_room, ... call it with a dict)",
    ),
    Internal(
        socketio.AsyncRedisManager,
        "_redis_listen_with_retries",
        "(self)",
        "python-socketio",
        "TaskhubRedisManager replaces the listener (steady retries, dead-subscription pings); "
        "AsyncRedisManager._listen reads its messages",
    ),
    Internal(
        socketio.AsyncRedisManager,
        "_redis_connect",
        "(self)",
        "python-socketio",
        "TaskhubRedisManager._client calls it to make self.redis on first use",
    ),
    Internal(
        socketio.AsyncRedisManager,
        "_listen",
        "(self)",
        "python-socketio",
        "the manager's thread reads _redis_listen_with_retries through it",
    ),
    Internal(
        socketio.AsyncServer,
        "_handle_eio_connect",
        "(self, eio_sid, environ)",
        "python-socketio",
        "SocketAdmission wraps it (sio.eio.handlers['connect']) and calls it with the Engine.IO "
        "sid and the handshake's environ",
    ),
    Internal(
        socketio.AsyncServer,
        "_handle_eio_message",
        "(self, eio_sid, data)",
        "python-socketio",
        "SocketAdmission wraps it (sio.eio.handlers['message']) and calls it with each text "
        "packet it lets through",
    ),
    Internal(
        socketio.AsyncServer,
        "_handle_eio_disconnect",
        "(self, eio_sid, reason)",
        "python-socketio",
        "SocketAdmission wraps it (sio.eio.handlers['disconnect']) and calls it with the sid "
        "and Engine.IO's reason",
    ),
    Internal(
        socketio.packet.Packet,
        "__init__",
        "(self, packet_type=2, data=None, namespace=None, id=None, binary=None, "
        "encoded_packet=None)",
        "python-socketio",
        "SocketAdmission._refuse_binary decodes a binary event's header (sio.packet_class("
        "encoded_packet=...)) and builds its 422 ACK (packet_type, namespace, id, data)",
    ),
    Internal(
        engineio.AsyncServer,
        "create_queue",
        "(self, *args, **kwargs)",
        "python-engineio",
        "create_app replaces it on the instance (sio.eio.create_queue = "
        "bounded_packet_queue(sio.eio, limit), a PacketQueue): each session's outgoing queue",
    ),
    Internal(
        BaseSocket,
        "__init__",
        "(self, server, sid)",
        "python-engineio",
        "it takes each session's queue from server.create_queue(), i.e. a PacketQueue",
    ),
    Internal(
        AsyncSocket,
        "poll",
        "(self)",
        "python-engineio",
        "it reads the PacketQueue: get under wait_for, task_done, get_nowait until "
        "asyncio.QueueEmpty, put_nowait; a None ends it with [] (the websocket's writer then "
        "stops: BoundedPacketQueue queues one past its hard limit)",
    ),
    Internal(
        AsyncSocket,
        "send",
        "(self, pkt)",
        "python-engineio",
        "it puts on the PacketQueue; TaskhubApp._end_socket_polls calls it on each polling "
        "session of sio.eio.sockets (.upgraded, .closed) to end its poll",
    ),
    Internal(
        AsyncSocket,
        "close",
        "(self, wait=True, abort=False, reason=None)",
        "python-engineio",
        "it puts CLOSE on the PacketQueue and joins it; BoundedPacketQueue ends a session "
        "past its hard limit with close(wait=False, abort=True, reason=server.reason."
        "TRANSPORT_ERROR), found in server.sockets by its .queue",
    ),
    Internal(
        engineio.AsyncServer,
        "reason",
        None,
        "python-engineio",
        "BoundedPacketQueue closes a session with reason=server.reason.TRANSPORT_ERROR",
    ),
    Internal(
        eio_packet.Packet,
        "__init__",
        "(self, packet_type=6, data=None, encoded_packet=None)",
        "python-engineio",
        "BoundedPacketQueue reads each queued packet's packet_type and data (a room event: "
        'MESSAGE, text 2["<event>",...) and queues its resync as Packet(MESSAGE, text)',
    ),
    Internal(
        AsyncSocket,
        "_websocket_handler",
        "(self, ws)",
        "python-engineio",
        "its reader ends the session on ASGI websocket.disconnect, which SocketAdmission._close "
        "relies on after closing a websocket through environ['asgi.send']",
    ),
    Internal(
        socketio.AsyncManager,
        "emit",
        "(self, event, data, namespace, room=None, skip_sid=None, callback=None, to=None, "
        "**kwargs)",
        "python-socketio",
        "RoomFanout (app/realtime/room_fanout.py) overrides it, called as the server and "
        "AsyncPubSubManager call it, and hands it what it does not deliver itself",
    ),
    Internal(
        BaseManager,
        "get_participants",
        "(self, namespace, room)",
        "python-socketio",
        "RoomFanout._put_directly iterates the (sid, eio_sid) of a room, a list of rooms or "
        "(None) the namespace, as AsyncManager.emit does",
    ),
    Internal(
        AsyncPubSubManager,
        "_handle_emit",
        "(self, message)",
        "python-socketio",
        "TaskhubRedisManager delivers every event in this process (its own and other "
        "replicas') through it: its super().emit is RoomFanout.emit (the MRO)",
    ),
    Internal(
        socketio.AsyncServer,
        "_send_eio_packet",
        "(self, eio_sid, eio_pkt)",
        "python-socketio",
        "RoomFanout sends through it (as AsyncManager.emit does) to each recipient it leaves "
        "to the library: a session gone, closed, late with its pings, or of another queue",
    ),
    Internal(
        AsyncSocket,
        "check_ping_timeout",
        "(self)",
        "python-engineio",
        "RoomFanout reads the test it makes (last_ping older than server.ping_timeout) and "
        "leaves such a session to send, which closes it",
    ),
    Internal(
        asgi_driver.WebSocket,
        "wait",
        "(self)",
        "python-engineio",
        "it raises OSError on any ASGI event but websocket.receive (websocket.disconnect "
        "after SocketAdmission._close), ending the session",
    ),
]


@pytest.mark.parametrize("distribution", sorted(PINS))
def test_the_pin_is_the_tested_range_and_holds_the_installed_version(distribution: str) -> None:
    check_pin(distribution, PINS[distribution])


@pytest.mark.parametrize("internal", INTERNALS, ids=Internal.label)
def test_a_private_method_relied_on_is_there_as_it_was(internal: Internal) -> None:
    check(internal)


# Taskhub's subclasses of python-socketio's classes, and the private names each means to
# override (the entries above); any other private name of theirs must be new to the library.
SUBCLASSES = [
    (TaskhubRedisManager, {"_publish", "_redis_listen_with_retries"}),
    (RoomFanout, set()),
    (TaskhubApp, set()),
]


@pytest.mark.parametrize(
    ("subclass", "intended"), SUBCLASSES, ids=[cls.__name__ for cls, _ in SUBCLASSES]
)
def test_no_private_name_of_a_subclass_replaces_one_of_python_socketio_unawares(
    subclass: type, intended: set[str]
) -> None:
    check_no_shadowing(subclass, intended)


async def test_emit_hands_its_message_to_publish() -> None:
    """The manager's publishes go out only if python-socketio's ``emit`` still sends each
    message for other processes through ``_publish``."""
    published: list[Any] = []

    class Recording(socketio.AsyncRedisManager):
        async def _publish(self, data: Any) -> None:
            published.append(data)

    manager = Recording("redis://127.0.0.1:1/0", write_only=True)
    await manager.emit("task_status", {"id": 1}, room="room:lab", namespace="/")
    assert [(m["method"], m["event"], m["data"], m["room"]) for m in published] == [
        ("emit", "task_status", [{"id": 1}], "room:lab")
    ]
    assert AsyncPubSubManager.emit is socketio.AsyncRedisManager.emit, (
        "python-socketio's Redis manager has an emit of its own: re-read it for _publish"
    )


async def test_listen_reads_the_messages_of_redis_listen_with_retries() -> None:
    """``_listen`` still takes its messages from ``_redis_listen_with_retries`` (bytes of the
    manager's channel, of type ``message``) and hands on their data."""

    class Scripted(socketio.AsyncRedisManager):
        async def _redis_listen_with_retries(self) -> Any:
            yield {"channel": b"other", "type": "message", "data": b"not ours"}
            yield {"channel": b"socketio", "type": "subscribe", "data": 1}
            yield {"channel": b"socketio", "type": "message", "data": b"ours"}

    listening = Scripted("redis://127.0.0.1:1/0", channel="socketio")._listen()
    assert await anext(listening) == b"ours"
    await listening.aclose()


async def test_redis_connect_makes_the_client_the_manager_uses() -> None:
    """``_redis_connect`` still makes ``self.redis`` from the URL and the options, and says
    ``connected`` (no connection is opened before a command)."""
    manager = TaskhubRedisManager(
        "redis://127.0.0.1:1/0", write_only=True, redis_options=redis_options()
    )
    assert manager.connected is False
    client = manager._client()
    try:
        assert manager.connected is True
        assert client is manager.redis
        assert isinstance(client, redis.Redis)
        options = client.connection_pool.connection_kwargs
        assert options["socket_timeout"] == redis_options()["socket_timeout"]
    finally:
        await client.aclose()


@pytest.mark.redis
async def test_an_emit_reaches_another_manager_through_a_real_redis(tmp_path: Path) -> None:
    """The overrides together, as python-socketio runs them: one manager's emit goes
    through its outbox to Redis; another's ``_listen`` (over the overridden listener)
    yields it, decodable by the manager's JSON module."""
    with RedisServer(tmp_path) as server:
        sender = TaskhubRedisManager(server.url, write_only=True, channel="canary")
        receiver = TaskhubRedisManager(server.url, channel="canary")
        listening = receiver._listen()
        first = asyncio.ensure_future(anext(listening))
        try:
            async with redis.Redis.from_url(server.url) as probe:

                async def subscribed() -> bool:
                    return bool((await probe.pubsub_numsub("canary"))[0][1])

                await eventually(subscribed, 10, "the receiver subscribed to its channel")
            await sender.emit("hello", {"n": 1}, room="room:lab", namespace="/")
            message = receiver.json.loads(await asyncio.wait_for(first, 10))
            assert (message["method"], message["event"], message["data"]) == (
                "emit",
                "hello",
                [{"n": 1}],
            )
        finally:
            first.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await first
            await listening.aclose()
            await sender.drain(1.0)
            for manager in (sender, receiver):
                if manager.redis is not None:
                    await manager.redis.aclose()


async def test_room_fanout_queues_the_packet_the_library_s_emit_sends_each_recipient() -> None:
    """``RoomFanout`` (app/realtime/room_fanout.py) builds a room event's Engine.IO packet as
    ``AsyncManager.emit`` does (``sio.packet_class``, encoded once), which sends that one
    packet to every recipient through ``_send_eio_packet``; it reads the server's
    ``eio.sockets``, ``ping_timeout`` and ``logger`` and each session's ``queue``,
    ``closed`` and ``last_ping``; a session whose pings are late is closed by ``send``
    (``check_ping_timeout``), nothing queued (not even its CLOSE: the same check refuses
    it)."""
    manager = RoomFanoutManager()
    sio = socketio.AsyncServer(async_mode="asgi", json=socket_json, client_manager=manager)
    sio.eio.create_queue = manager.direct_queue = bounded_packet_queue(sio.eio, 1000)
    sessions = {}
    for eio_sid in ("a", "b"):
        sessions[eio_sid] = sio.eio.sockets[eio_sid] = AsyncSocket(sio.eio, eio_sid)
        sid = await manager.pre_connect(eio_sid, "/")
        await manager.connect(sid, "/")
        await manager.enter_room(sid, "/", "room:lab")
    sent: list[tuple[str, Any]] = []

    async def send_eio_packet(eio_sid: str, packet: Any) -> None:
        sent.append((eio_sid, packet))

    sio._send_eio_packet = send_eio_packet
    await socketio.AsyncManager.emit(manager, "task_log", {"n": 1}, "/", room="room:lab")
    text = '2["task_log",{"n":1}]'
    assert sorted(sid for sid, _ in sent) == ["a", "b"] and sent[0][1] is sent[1][1], (
        f"{installed(SOCKETIO)}: AsyncManager.emit now sends a room event as {sent}, not one "
        "packet to each recipient through _send_eio_packet: re-read it before RoomFanout "
        "stands in for it."
    )
    assert (sent[0][1].packet_type, sent[0][1].data) == (eio_packet.MESSAGE, text)
    assert isinstance(sio.eio.ping_timeout, int | float) and sio.eio.logger is not None
    await manager.emit("task_log", {"n": 1}, "/", room="room:lab")
    assert len(sent) == 2, "RoomFanout left an open session to the library's path"
    for session in sessions.values():
        assert session.closed is False and isinstance(session.last_ping, float)
        assert session.queue.qsize() == 1
        queued = session.queue.get_nowait()
        assert (queued.packet_type, queued.data) == (eio_packet.MESSAGE, text)
    late = sessions["b"]
    late.last_ping = late.last_ping - sio.eio.ping_timeout - 1
    await late.send(eio_packet.Packet(eio_packet.MESSAGE, text))
    assert late.closed and late.queue.qsize() == 0, (
        f"{installed(ENGINEIO)}: a session whose last_ping is older than ping_timeout is no "
        "longer closed by send (check_ping_timeout): RoomFanout leaves such sessions to it."
    )


# -- the socket admission's and PacketQueue's internals, run ------------------------------

SOCKETIO = "python-socketio"
ENGINEIO = "python-engineio"
# Where the code relying on them is.
ADMISSION = "app/transport/sockets/admission.py"
# The Engine.IO events python-socketio hears, and its handler of each (SocketAdmission
# wraps the three).
ENGINEIO_HANDLERS = {
    "connect": "_handle_eio_connect",
    "message": "_handle_eio_message",
    "disconnect": "_handle_eio_disconnect",
}
# python-engineio's server side, where a session's queue is made and used.
ENGINEIO_SERVER_MODULES = [
    engineio.base_server,
    engineio.async_server,
    engineio.base_socket,
    engineio.async_socket,
]


def test_python_socketio_hears_engineio_through_the_handlers_admission_wraps() -> None:
    """``SocketAdmission`` takes python-socketio's three Engine.IO handlers from
    ``sio.eio.handlers`` and puts its own in their place with ``eio.on``."""
    sio = socketio.AsyncServer(async_mode="asgi")
    for event, name in ENGINEIO_HANDLERS.items():
        found = sio.eio.handlers.get(event)
        assert found == getattr(sio, name), (
            f"{installed(SOCKETIO)} with {installed(ENGINEIO)}: sio.eio.handlers[{event!r}] is "
            f"{found!r}, not python-socketio's {name}. SocketAdmission ({ADMISSION}) wraps "
            "what it finds there (the sign-in timeout, the per-address cap and the binary "
            "refusal hang on it): re-read how python-socketio hears Engine.IO's events."
        )
    admission = SocketAdmission(sio, connect_timeout=60, max_per_address=1)
    wrappers = {
        "connect": admission._connected,
        "message": admission._message,
        "disconnect": admission._disconnected,
    }
    for event, wrapper in wrappers.items():
        assert sio.eio.handlers.get(event) == wrapper, (
            f"{installed(ENGINEIO)}: eio.on({event!r}, handler) no longer makes the handler "
            f"the one in eio.handlers[{event!r}]: SocketAdmission ({ADMISSION}) is bypassed."
        )


def test_engineio_calls_on_a_session_s_queue_only_what_packet_queue_implements() -> None:
    """python-engineio makes each session's queue with ``create_queue()`` (a bounded
    ``PacketQueue`` in Taskhub): every method it calls on one must be one it has."""
    implemented = {
        name
        for name in dir(BoundedPacketQueue)
        if not name.startswith("_") and callable(getattr(BoundedPacketQueue, name))
    }
    called: dict[str, list[str]] = {}
    for module in ENGINEIO_SERVER_MODULES:
        for name, places in attribute_calls(module, "queue").items():
            called.setdefault(name, []).extend(places)
    assert {"get", "put"} <= set(called), (
        f"{installed(ENGINEIO)}: no session.queue.get/put found in its server's source "
        f"({sorted(called)}): re-read how a session queues its packets before trusting "
        "PacketQueue (app/transport/sockets/packet_queue.py) with them."
    )
    missing = {name: places for name, places in called.items() if name not in implemented}
    assert not missing, (
        f"{installed(ENGINEIO)} now calls queue.{', queue.'.join(sorted(missing))}() on each "
        f"session's queue ({missing}), which PacketQueue (app/transport/sockets/"
        "packet_queue.py; create_app sets sio.eio.create_queue = bounded_packet_queue(...)) "
        "does not "
        "implement: add it with asyncio.Queue's semantics, or drop the create_queue override."
    )
    uses = [use for module in ENGINEIO_SERVER_MODULES for use in bare_uses(module, "queue")]
    assert [use.split(": ", 1)[1] for use in uses] == ["self.queue = self.server.create_queue()"], (
        f"{installed(ENGINEIO)} uses a session's queue otherwise than by calling its methods "
        f"({uses}): BaseSocket no longer takes it from create_queue() alone, or passes it on. "
        "Re-read it before trusting PacketQueue with it."
    )


async def _poll(session: Any) -> list[Any]:
    """``session.poll()``, failing with what changed if Engine.IO's poll lets the
    ``asyncio.QueueEmpty`` of ``PacketQueue.get_nowait`` through."""
    try:
        return list(await session.poll())
    except asyncio.QueueEmpty:
        pytest.fail(
            f"{installed(ENGINEIO)}: AsyncSocket.poll no longer ends its batch on "
            "asyncio.QueueEmpty, the exception PacketQueue.get_nowait raises "
            "(app/transport/sockets/packet_queue.py): raise what poll expects."
        )


async def test_a_session_queues_its_packets_on_what_create_queue_makes() -> None:
    """As ``create_app`` sets it up: a session of the server gets a bounded
    ``PacketQueue``, and Engine.IO's ``send``, ``poll`` and ``close`` (which joins the
    queue) work on it."""
    eio = engineio.AsyncServer(async_mode="asgi")
    eio.create_queue = bounded_packet_queue(eio, 1000)
    session = AsyncSocket(eio, "canary")
    assert isinstance(session.queue, BoundedPacketQueue), (
        f"{installed(ENGINEIO)}: a session's queue is a {type(session.queue).__name__}, not "
        "what server.create_queue() makes: create_app's sio.eio.create_queue = "
        "bounded_packet_queue(...) (app/main.py) no longer takes effect."
    )
    for data in ("a", "b"):
        await session.send(eio_packet.Packet(eio_packet.MESSAGE, data))
    assert [p.data for p in await _poll(session)] == ["a", "b"]
    closing = asyncio.ensure_future(session.close(wait=True))
    assert [p.packet_type for p in await _poll(session)] == [eio_packet.CLOSE]
    await asyncio.wait_for(closing, 5)  # close's join saw the CLOSE packet's task_done
    assert session.closed


async def test_a_session_past_the_bound_s_hard_limit_ends_through_engineio() -> None:
    """``BoundedPacketQueue`` past its hard limit: it queues ``None`` (Engine.IO's poll then
    answers ``[]``, which ends a websocket's writer) and finds the session in
    ``server.sockets`` by its ``queue`` to ``close(wait=False, abort=True, reason=
    server.reason.TRANSPORT_ERROR)``: the disconnect handler runs, no CLOSE is queued."""
    eio = engineio.AsyncServer(async_mode="asgi")
    eio.create_queue = bounded_packet_queue(eio, 16)
    ended: list[tuple[str, Any]] = []

    async def disconnect(sid: str, reason: Any) -> None:
        ended.append((sid, reason))

    eio.on("disconnect", disconnect)
    session = AsyncSocket(eio, "canary")
    eio.sockets["canary"] = session
    ack = eio_packet.Packet(eio_packet.MESSAGE, "31[{}]")
    for _ in range(4 * 16 + 1):
        await session.send(ack)
    where = "app/transport/sockets/bounded_queue.py"
    await eventually(
        lambda: ended,
        5,
        f"{installed(ENGINEIO)}: the session whose queue overflowed closed through "
        f"server.sockets[sid].close(...) and its disconnect handler ran ({where})",
    )
    assert ended == [("canary", eio.reason.TRANSPORT_ERROR)] and session.closed, (
        f"{installed(ENGINEIO)}: close(wait=False, abort=True, reason=...) gave {ended}, "
        f"closed={session.closed}: BoundedPacketQueue ({where}) ends a session by it."
    )
    assert await _poll(session) == [], (
        f"{installed(ENGINEIO)}: AsyncSocket.poll no longer answers [] to a None in the "
        f"queue: the writer of a session BoundedPacketQueue ended ({where}) would go on."
    )


async def test_a_room_event_is_queued_as_the_packet_the_bound_reads() -> None:
    """Over a real connection: python-socketio queues a room event as one Engine.IO
    MESSAGE whose text is ``2["<event>",…`` (namespace ``/``), which ``BoundedPacketQueue``
    tells by its start; an acknowledgement and CONNECT's answer are not taken for one; the
    resync it queues reaches a python-socketio client as the event ``resync``."""
    queued: list[Any] = []

    class Recording(BoundedPacketQueue):
        __slots__ = ()

        def put_nowait(self, item: Any) -> None:
            queued.append(item)
            super().put_nowait(item)

    wired = Wired.create()
    wired.sio.eio.create_queue = Recording
    resyncs: list[Any] = []
    try:
        async with served(wired) as base_url:
            client = socketio.AsyncClient(reconnection=False)

            async def on_resync(data: Any) -> None:
                resyncs.append(data)

            client.on(RESYNC, on_resync)
            await client.connect(base_url, transports=["websocket"], wait_timeout=10)
            try:
                [(sid, _environ)] = wired.connects
                await wired.sio.enter_room(sid, "room:canary")
                await wired.sio.emit("task_log", {"n": 1}, room="room:canary")
                assert await client.call("echo", {"n": 2}, timeout=10) == {"n": 2}
                texts = {
                    item.data[:1]: item
                    for item in queued
                    if isinstance(item, eio_packet.Packet)
                    and item.packet_type == eio_packet.MESSAGE
                    and isinstance(item.data, str)
                }
                event = texts.get("2")
                assert event is not None and event.data == '2["task_log",{"n":1}]', (
                    f"{installed(SOCKETIO)} with {installed(ENGINEIO)}: a room event was "
                    f"queued as {[vars(item) for item in queued]}, not Packet(MESSAGE, "
                    "'2[\"task_log\",...]'): BoundedPacketQueue (app/transport/sockets/"
                    "bounded_queue.py) would never drop a room event."
                )
                assert droppable(event)
                assert not droppable(texts["3"]) and not droppable(texts["0"])
                [session] = wired.sio.eio.sockets.values()
                await session.send(resync_packet(3))
                await eventually(lambda: resyncs, 10, "the client heard the resync")
                assert resyncs == [{"dropped": 3}]
            finally:
                await client.disconnect()
    finally:
        await wired.close()


async def test_the_asgi_driver_s_environ_holds_the_connection_s_scope_and_send() -> None:
    """``SocketAdmission`` reads the gate's entry from ``environ["asgi.scope"]`` (the very
    scope, not a copy), closes a websocket through ``environ["asgi.send"]``, and pops
    ``environ["wsgi.input"]``; ``SocketHandlers`` reads ``HTTP_AUTHORIZATION``."""
    scope: Scope = {
        "type": "websocket",
        "path": "/socket.io/",
        "query_string": b"EIO=4&transport=websocket",
        "headers": [(b"authorization", b"Bearer canary")],
        "client": ("203.0.113.9", 5000),
    }

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    async def send(_message: Message) -> None:
        return None

    environ = await asgi_driver.translate_request(scope, receive, send)
    found = {
        "asgi.scope": environ.get("asgi.scope") is scope,
        "asgi.send": environ.get("asgi.send") is send,
        "wsgi.input": callable(getattr(environ.get("wsgi.input"), "read", None)),
        "HTTP_AUTHORIZATION": environ.get("HTTP_AUTHORIZATION") == "Bearer canary",
    }
    assert all(found.values()), (
        f"{installed(ENGINEIO)}: engineio.async_drivers.asgi.translate_request's environ "
        f"changed ({found}: False is a key that is gone or no longer the connection's own). "
        f"SocketAdmission._connected, _close and signed_out ({ADMISSION}) and "
        "SocketHandlers._connect (app/transport/sockets/handlers.py) read these keys."
    )


@pytest.mark.parametrize(
    "query",
    [
        b"transport=polling&sid=abc",
        b"sid=a%2Bb",
        b"sid=a+b",
        b"sid=%ff",
        b"sid=x&sid=y",
        b"sid=&sid=z",
        b"sid=abc;x=1",
        b"sid=",
        b"SID=abc",
        b"transport=polling",
        b"sid=\xff",
    ],
)
async def test_the_gate_reads_sid_as_engineio_reads_it(query: bytes) -> None:
    """The handshake gate tells a handshake (no ``sid``: counted, capped) from a request of
    a session by the ``sid`` query parameter; Engine.IO must read the same ``sid``, else a
    handshake could pass the gate uncounted. Engine.IO's reading shows in its answer to an
    unknown session (400 "Invalid session <sid>"); a request without ``sid`` and without
    ``EIO=4`` it refuses for its version."""
    sio = socketio.AsyncServer(async_mode="asgi")
    scope: Scope = {
        "type": "http",
        "method": "GET",
        "path": "/socket.io/",
        "query_string": query,
        "headers": [],
        "client": ("127.0.0.1", 5000),
    }
    answer = json.loads((await _asgi_request(sio.handle_request, scope))[1]["body"])
    engineio_sid = answer.removeprefix("Invalid session ") if "Invalid session" in answer else None
    if engineio_sid is None:
        assert "unsupported version" in answer, answer
    assert _query_sid(scope) == engineio_sid, (
        f"{installed(ENGINEIO)}: AsyncServer.handle_request reads sid {engineio_sid!r} from "
        f"the query {query!r}, where the gate of SocketAdmission ({ADMISSION}, _query_sid) reads "
        f"{_query_sid(scope)!r}: read it as Engine.IO now does."
    )


@pytest.mark.parametrize(
    "path",
    ["/socket.io", "/socket.io/", "/socket.io/x", "/socket.iox", "/socket.io.js", "/v1/socket.io/"],
)
async def test_the_gate_owns_what_the_asgi_app_routes_to_engineio(path: str) -> None:
    """``TaskhubApp`` hands Engine.IO's requests (``SocketAdmission.owns``) to the gate, the
    rest to ``socketio.ASGIApp``: both must draw the line where the ASGI app does."""
    sio = socketio.AsyncServer(async_mode="asgi")
    admission = SocketAdmission(sio, connect_timeout=60, max_per_address=1)
    elsewhere: list[Scope] = []

    async def other(scope: Scope, _receive: Receive, send: Send) -> None:
        elsewhere.append(scope)
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    app = socketio.ASGIApp(sio, other_asgi_app=other)  # as TaskhubApp (the default path)
    scope: Scope = {"type": "http", "method": "GET", "path": path, "query_string": b""}
    scope["headers"] = []
    await _asgi_request(app, scope)
    to_engineio = not elsewhere
    assert admission.owns(scope) == to_engineio, (
        f"{installed(SOCKETIO)}: its ASGIApp routes {path} "
        f"{'to Engine.IO' if to_engineio else 'elsewhere'}, where SocketAdmission.owns "
        f"({ADMISSION}; the gate TaskhubApp puts in front of Engine.IO, app/main.py) says "
        "otherwise."
    )


def test_the_packet_class_reads_a_binary_event_header_and_writes_the_refusal() -> None:
    """``SocketAdmission._refuse_binary``: ``sio.packet_class`` decodes a binary event's
    header (its attachments never read) and encodes the 422 acknowledgement as text."""
    sio = socketio.AsyncServer(async_mode="asgi", json=socket_json)
    header = sio.packet_class(encoded_packet='51-7["upload",{"_placeholder":true,"num":0}]')
    decoded = (header.packet_type, header.id, header.namespace)
    ack = sio.packet_class(sio_packet.ACK, namespace=None, id=7, data=[BINARY_REFUSED]).encode()
    written = ack.startswith("37[") and json.loads(ack[2:]) == [BINARY_REFUSED]
    assert decoded == (sio_packet.BINARY_EVENT, 7, None) and written, (
        f"{installed(SOCKETIO)}: sio.packet_class now reads '51-7[...]' as {decoded} "
        f"(packet_type, id, namespace) and writes the ACK as {ack!r}. "
        f"SocketAdmission._refuse_binary ({ADMISSION}) answers a binary event with them: "
        "adapt it."
    )


async def _asgi_request(app: Any, scope: Scope) -> list[Message]:
    """What ``app`` sends for an HTTP request of ``scope`` with an empty body."""
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


@dataclass(eq=False)
class Wired:
    """A Socket.IO server wired as ``create_app`` wires Taskhub's (each session's queue a
    bounded ``PacketQueue``, ``SocketAdmission`` wrapping the Engine.IO handlers and gating
    Engine.IO's requests), recording what reaches each layer; an ASGI app."""

    sio: socketio.AsyncServer
    admission: SocketAdmission
    engine: socketio.ASGIApp
    # Each request's scope and send, as the ASGI server gave them.
    requests: list[tuple[Scope, Send]] = field(default_factory=list)
    # Engine.IO's connect events: (eio sid, environ, whether it had "wsgi.input" then).
    handshakes: list[tuple[str, dict[str, Any], bool]] = field(default_factory=list)
    # python-socketio's connect handler calls: (sid, environ).
    connects: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    disconnects: list[str] = field(default_factory=list)  # Engine.IO sids

    @classmethod
    def create(cls) -> Wired:
        sio = socketio.AsyncServer(async_mode="asgi", json=socket_json)
        sio.eio.create_queue = bounded_packet_queue(sio.eio, 1000)
        admission = SocketAdmission(sio, connect_timeout=60, max_per_address=10)
        wired = cls(sio, admission, socketio.ASGIApp(sio))
        admitted_connect = sio.eio.handlers["connect"]
        admitted_disconnect = sio.eio.handlers["disconnect"]

        async def eio_connect(eio_sid: str, environ: dict[str, Any]) -> Any:
            wired.handshakes.append((eio_sid, environ, "wsgi.input" in environ))
            return await admitted_connect(eio_sid, environ)

        async def eio_disconnect(eio_sid: str, reason: Any = None) -> Any:
            try:
                return await admitted_disconnect(eio_sid, reason)
            finally:
                wired.disconnects.append(eio_sid)

        async def connect(sid: str, environ: dict[str, Any], _auth: Any = None) -> None:
            wired.connects.append((sid, environ))
            wired.admission.signed_in(environ)  # as SocketHandlers does

        async def echo(_sid: str, data: Any) -> Any:
            return data

        sio.eio.on("connect", eio_connect)
        sio.eio.on("disconnect", eio_disconnect)
        sio.on("connect", connect)
        sio.on("echo", echo)
        return wired

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.admission.owns(scope):
            self.requests.append((scope, send))
            await self.admission(scope, receive, send, self.engine)
        else:
            await self.engine(scope, receive, send)  # the lifespan

    async def close(self) -> None:
        self.admission.stop()
        await self.sio.shutdown()


TRANSPORTS = {
    "websocket": ["websocket"],
    "polling": ["polling"],
    "upgrade": ["polling", "websocket"],
}


@pytest.mark.parametrize("transports", list(TRANSPORTS.values()), ids=list(TRANSPORTS))
async def test_the_handshake_environ_reaches_socketio_s_connect_handler_itself(
    transports: list[str],
) -> None:
    """Over a real connection: Engine.IO's connect event gets an environ holding the
    request's own scope and send (and ``wsgi.input``, which the admission pops);
    python-socketio hands that same dict to its connect handler and keeps it for
    ``get_environ``; the session's queue is a ``PacketQueue`` that carries an event, its
    ack and the server's CLOSE; ``upgraded``/``closed`` say what
    ``TaskhubApp._end_socket_polls`` reads."""
    wired = Wired.create()
    try:
        async with served(wired) as base_url:
            client = socketio.AsyncClient(reconnection=False)
            await client.connect(base_url, transports=transports, wait_timeout=10)
            try:
                assert await client.call("echo", {"n": 1}, timeout=10) == {"n": 1}
                [(eio_sid, environ, had_input)] = wired.handshakes
                [(sid, connected_with)] = wired.connects
                assert connected_with is environ and wired.sio.get_environ(sid) is environ, (
                    f"{installed(SOCKETIO)}: its connect handler (or get_environ) no longer "
                    "gets the environ Engine.IO's connect event had. SocketHandlers hands it "
                    f"to SocketAdmission.signed_in/signed_out ({ADMISSION}), which find the "
                    f"session by the {EIO_SID_KEY!r} put there at the handshake: no session "
                    "would ever count as signed in."
                )
                assert environ[EIO_SID_KEY] == eio_sid
                assert had_input and "wsgi.input" not in environ
                scope = environ["asgi.scope"]
                channels = [send for each, send in wired.requests if each is scope]
                assert channels == [environ["asgi.send"]], (
                    f"{installed(ENGINEIO)}: the handshake's environ no longer holds its "
                    f"request's own ASGI scope and send: SocketAdmission ({ADMISSION}) finds "
                    "the gate's entry in that scope and closes a websocket through that send."
                )
                session = wired.sio.eio.sockets[eio_sid]
                assert isinstance(session.queue, PacketQueue)
                if transports[-1] == "websocket":
                    await eventually(lambda: session.upgraded, 10, "the session on its websocket")
                else:
                    assert session.upgraded is False
                assert session.closed is False
                # As SocketAdmission._close ends a polling session: Engine.IO's CLOSE packet
                # through the queue, which the close joins until the client's poll took it.
                await asyncio.wait_for(wired.sio.eio.disconnect(eio_sid), 10)
                assert wired.disconnects == [eio_sid] and not wired.sio.eio.sockets
                await eventually(lambda: not client.connected, 10, "the client told of it")
            finally:
                await client.disconnect()
    finally:
        await wired.close()


async def test_engineio_ends_a_websocket_session_on_asgi_websocket_disconnect() -> None:
    """``SocketAdmission._close`` ends a session that never signed in by sending
    ``websocket.close`` through ``environ["asgi.send"]``: the session must then end (its
    disconnect event, its entry gone), by Engine.IO's reader taking the ASGI server's
    ``websocket.disconnect`` for the end of the websocket."""
    wired = Wired.create()
    try:
        async with served(wired) as base_url:
            url = "ws" + base_url.removeprefix("http") + "/socket.io/?EIO=4&transport=websocket"
            async with websockets.connect(url, proxy=None, open_timeout=10) as ws:
                opening = await asyncio.wait_for(ws.recv(), 10)
                assert isinstance(opening, str) and opening.startswith("0{"), opening
                eio_sid = json.loads(opening[1:])["sid"]
                [(handshake_sid, environ, _)] = wired.handshakes
                assert handshake_sid == eio_sid
                close = {"type": "websocket.close", "code": 1008, "reason": "canary"}
                await environ["asgi.send"](close)
                with pytest.raises(websockets.ConnectionClosed):
                    async with asyncio.timeout(10):
                        while True:
                            await ws.recv()
                assert ws.close_code == 1008
            await eventually(
                lambda: wired.disconnects == [eio_sid] and eio_sid not in wired.sio.eio.sockets,
                10,
                f"{installed(ENGINEIO)}: the session of a websocket closed through "
                f"environ['asgi.send'] ended (its reader ended on websocket.disconnect). "
                f"SocketAdmission._close ({ADMISSION}) relies on it to end sessions that "
                "never sign in",
            )
    finally:
        await wired.close()
