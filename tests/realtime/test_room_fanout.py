"""A room event reaches its sockets in one loop, not a task apiece (``RoomFanout``): every
watcher gets each event once and in order, on one replica and from another through Redis;
a participant whose session is gone or late with its pings is left to python-socketio
(which warns of the one and closes the other) without keeping the event from the rest;
``skip_sid`` holds; an emit awaiting an acknowledgement goes python-socketio's way."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import redis.asyncio as redis

from taskhub.main import create_app
from taskhub.realtime.room_fanout import RoomFanoutManager
from taskhub.realtime.socket_sink import SocketSink
from taskhub.rules.events import TaskStatusChanged
from taskhub.settings import Settings
from tests.conftest import Users
from tests.realtime.hubs import hub_database, hub_settings, new_user, replicas, served
from tests.support.databases import REDIS_URL
from tests.support.names import unique
from tests.support.records import a_task_record
from tests.support.sockets import SocketProbe
from tests.support.waiting import eventually

EVENTS = 20


@asynccontextmanager
async def watchers(base_url: str, token: str, count: int, room_id: str) -> AsyncIterator[list[Any]]:
    """``count`` sockets signed in with ``token``, each in ``room:{room_id}``."""
    async with AsyncExitStack() as stack:
        probes = []
        for n in range(count):
            probe = await stack.enter_async_context(SocketProbe(f"{room_id}-{n}"))
            await probe.connect(base_url, token)
            await probe.room_join(room_id)
            probes.append(probe)
        yield probes


def per_recipient_sends(sio: Any) -> list[str]:
    """The Engine.IO sids python-socketio's own per-recipient path sends to from now on
    (``_send_eio_packet``, still sending)."""
    sends: list[str] = []
    send = sio._send_eio_packet

    async def recording(eio_sid: str, packet: Any) -> None:
        sends.append(eio_sid)
        await send(eio_sid, packet)

    sio._send_eio_packet = recording
    return sends


async def ticks_until_end(probe: SocketProbe) -> list[Any]:
    """The ``tick`` payloads ``probe`` got before the ``end`` event (waited for)."""
    end = await probe.wait_for("end")
    return [data for event, data in probe.between(0, end.index) if event == "tick"]


async def test_every_watcher_of_a_room_gets_each_event_once_and_in_order(
    settings: Settings, tokens: Users
) -> None:
    app = create_app(settings)
    room, elsewhere = unique("fanout"), unique("other")
    async with (
        served(app) as url,
        watchers(url, tokens.alice, 3, room) as probes,
        watchers(url, tokens.alice, 1, elsewhere) as (outsider,),
    ):
        sends = per_recipient_sends(app.sio)
        for n in range(EVENTS):
            await app.sio.emit("tick", {"n": n}, room=f"room:{room}")
        for each in (room, elsewhere):
            await app.sio.emit("end", {}, room=f"room:{each}")
        for probe in probes:
            assert await ticks_until_end(probe) == [{"n": n} for n in range(EVENTS)]
        assert await ticks_until_end(outsider) == []
        assert sends == [], "open sessions were sent to one task apiece"


async def test_a_gone_or_late_participant_does_not_keep_the_event_from_the_others(
    settings: Settings, tokens: Users
) -> None:
    """A participant whose Engine.IO session is gone is skipped (python-socketio warns);
    one whose pings are late is closed (its disconnect runs), as python-socketio's own emit
    closes it."""
    app = create_app(settings)
    room = unique("fanout")
    async with served(app) as url, watchers(url, tokens.alice, 3, room) as (first, late, last):
        sio = app.sio
        await sio.manager.enter_room("ghost", "/", f"room:{room}", eio_sid="gone")
        session = sio.eio.sockets[late.client.sid]
        session.last_ping = (session.last_ping or 0) - sio.eio.ping_timeout - 1
        sends = per_recipient_sends(sio)
        for n in range(EVENTS):
            await sio.emit("tick", {"n": n}, room=f"room:{room}")
        await sio.emit("end", {}, room=f"room:{room}")
        for probe in (first, last):
            assert await ticks_until_end(probe) == [{"n": n} for n in range(EVENTS)]
        in_room = {eio_sid for _, eio_sid in sio.manager.get_participants("/", f"room:{room}")}
        assert session.closed and late.client.sid not in in_room
        assert late.named("tick") == []
        assert set(sends) == {"gone", late.client.sid}
        assert sends.count(late.client.sid) == 1, "the closed session was sent to again"


async def test_the_skipped_socket_does_not_get_the_event(settings: Settings, tokens: Users) -> None:
    app = create_app(settings)
    room = unique("fanout")
    async with served(app) as url, watchers(url, tokens.alice, 3, room) as (skipped, *others):
        for n in range(3):
            await app.sio.emit(
                "tick", {"n": n}, room=f"room:{room}", skip_sid=skipped.client.get_sid("/")
            )
        await app.sio.emit("end", {}, room=f"room:{room}")
        assert await ticks_until_end(skipped) == []
        for probe in others:
            assert await ticks_until_end(probe) == [{"n": n} for n in range(3)]


async def test_an_emit_awaiting_an_acknowledgement_gets_it(
    settings: Settings, tokens: Users
) -> None:
    app = create_app(settings)
    async with served(app) as url, watchers(url, tokens.alice, 1, unique("fanout")) as (probe,):
        probe.client.on("ask", lambda data: data["n"] + 1)
        answered: asyncio.Future[tuple[Any, ...]] = asyncio.get_running_loop().create_future()
        await app.sio.emit(
            "ask",
            {"n": 1},
            to=probe.client.get_sid("/"),
            callback=lambda *args: answered.set_result(args),
        )
        assert await asyncio.wait_for(answered, 10) == (2,)


async def test_watchers_on_both_replicas_get_each_event_once_and_in_order() -> None:
    """The other replica delivers what it hears through Redis in one loop too."""
    room = unique("fanout")
    async with hub_database() as (database_url, namespace):
        settings = hub_settings(database_url, REDIS_URL, namespace, grace=5)
        token = await new_user(settings, "alice")
        async with (
            replicas(settings, settings) as (here, there),
            watchers(here.base_url, token, 2, room) as near,
            watchers(there.base_url, token, 2, room) as far,
        ):
            async with redis.Redis.from_url(REDIS_URL) as probe:

                async def both_listen() -> bool:
                    [(_, count)] = await probe.pubsub_numsub(settings.socket_channel)
                    return bool(count >= 2)

                await eventually(both_listen, 10, "both replicas listen to the channel")
            sends = per_recipient_sends(there.app.sio)
            for n in range(EVENTS):
                await here.app.sio.emit("tick", {"n": n}, room=f"room:{room}")
            await here.app.sio.emit("end", {}, room=f"room:{room}")
            for watcher in near + far:
                assert await ticks_until_end(watcher) == [{"n": n} for n in range(EVENTS)]
            assert sends == [], "the other replica sent to one task apiece"


class SingleReplica:
    """A server of one replica as ``SocketSink`` sees it (its ``manager``), recording the
    rooms it is asked to send to."""

    def __init__(self) -> None:
        self.manager = RoomFanoutManager()
        self.rooms: list[str | None] = []

    async def emit(self, event: str, data: Any, *, room: str | None = None) -> None:
        self.rooms.append(room)


async def test_a_single_replica_builds_no_event_for_a_room_nobody_watches() -> None:
    server = SingleReplica()
    await SocketSink(server)([TaskStatusChanged(a_task_record())])
    assert server.rooms == []
