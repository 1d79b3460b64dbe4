"""A socket that stops reading cannot make the hub buffer without bound (a real server,
both backends, a raw websocket client): while 10,000 room events are published, the
queue of its session never holds more than ``TASKHUB_SOCKET_QUEUE_LIMIT`` packets; once
it reads again, a ``resync`` comes right after what the connection's buffers held, ahead
of the newest events, and every event is either delivered, in order, or counted in a
resync."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import websockets
from websockets.asyncio.client import ClientConnection

from taskhub.main import TaskhubApp, create_app
from taskhub.rules.events import EventBatch, TaskLogged
from taskhub.settings import Settings
from tests.conftest import Users
from tests.realtime.hubs import served

LIMIT = 64  # the bound, small: the hub's buffers fill in seconds
EVENTS = 10_000
ROOM = "slow"
# Events of a few KiB: the kernel's buffers (megabytes) hold only a part of them.
MESSAGE = "x" * 2048
# A small receive window: what the client does not read stays with the hub.
RECEIVE_BUFFER = 4096


def logged(n: int) -> EventBatch:
    """One ``task_log`` event to the room's sockets, its line numbered ``n``."""
    line = {
        "id": n,
        "attempt": 1,
        "at": datetime.now(UTC),
        "level": "info",
        "logger": "slow",
        "message": MESSAGE,
        "dropped": 0,
    }
    batch = EventBatch()
    batch.add(TaskLogged(task_id="t", room_id=ROOM, lines=(line,)))
    return batch


async def expect(ws: ClientConnection, prefix: str) -> str:
    text = await asyncio.wait_for(ws.recv(), 10)
    assert isinstance(text, str) and text.startswith(prefix), text
    return text


@asynccontextmanager
async def slow_reader(base_url: str, token: str) -> AsyncIterator[ClientConnection]:
    """A raw Socket.IO client on a websocket, signed in and in ``room:{ROOM}``, with a
    small receive buffer and no compression (so that what it does not read backs up)."""
    address = urlsplit(base_url)
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER)
    raw.setblocking(False)
    await asyncio.get_running_loop().sock_connect(raw, (address.hostname, address.port))
    url = f"ws://{address.netloc}/socket.io/?EIO=4&transport=websocket"
    async with websockets.connect(
        url, sock=raw, proxy=None, compression=None, max_queue=1, open_timeout=10
    ) as ws:
        await expect(ws, "0{")  # Engine.IO's opening
        await ws.send("40" + json.dumps({"token": token}))
        await expect(ws, "40{")
        await ws.send(f'421["room_join",{{"room_id":"{ROOM}"}}]')
        await expect(ws, f'431[{{"room_id":"{ROOM}"}}]')
        yield ws


async def read_until(ws: ClientConnection, sentinel: str) -> list[tuple[str, Any]]:
    """The events read before the packet ``sentinel`` (answering Engine.IO's pings)."""
    events: list[tuple[str, Any]] = []
    while True:
        text = await asyncio.wait_for(ws.recv(), 10)
        assert isinstance(text, str), text
        if text == "2":
            await ws.send("3")
        elif text.startswith(sentinel):
            return events
        else:
            assert text.startswith("42["), text
            name, data = json.loads(text[2:])
            events.append((name, data))


def session_queue(app: TaskhubApp) -> Any:
    [session] = app.sio.eio.sockets.values()
    return session.queue


async def test_a_socket_that_stops_reading_keeps_a_bounded_queue_and_gets_a_resync(
    settings: Settings, tokens: Users
) -> None:
    app = create_app(settings.model_copy(update={"socket_queue_limit": LIMIT}))
    async with served(app) as base_url, slow_reader(base_url, tokens.alice) as ws:
        queue = session_queue(app)
        most = 0
        for n in range(EVENTS):  # the client reads nothing meanwhile
            await app.hub.publisher.publish(logged(n))
            most = max(most, queue.qsize())
            assert queue.qsize() <= LIMIT
        assert most >= LIMIT - LIMIT // 4, "the client's reading never fell behind"
        # An acknowledgement queued behind everything: the end of what to read.
        await ws.send(f'429["room_join",{{"room_id":"{ROOM}"}}]')
        received = await read_until(ws, f'439[{{"room_id":"{ROOM}"}}]')
    names = [name for name, _ in received]
    assert set(names) == {"task_log", "resync"}
    delivered = [data["lines"][0]["id"] for name, data in received if name == "task_log"]
    dropped = [data["dropped"] for name, data in received if name == "resync"]
    assert delivered == sorted(delivered)
    assert len(delivered) + sum(dropped) == EVENTS
    assert all(count > 0 for count in dropped)
    # The oldest were dropped: before the first resync comes what the connection's buffers
    # held already, from the first event on; after the last one, the newest, at most what
    # the queue holds.
    first, last = names.index("resync"), len(names) - 1 - names[::-1].index("resync")
    before = [data["lines"][0]["id"] for _, data in received[:first]]
    after = [data["lines"][0]["id"] for _, data in received[last + 1 :]]
    assert before == list(range(len(before)))
    assert after == list(range(EVENTS - len(after), EVENTS))
    assert 0 < len(after) <= LIMIT
