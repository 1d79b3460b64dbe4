"""``taskhub serve`` bounds a websocket message at ``TASKHUB_MAX_SOCKET_MESSAGE_BYTES``
in uvicorn itself (its ``ws_max_size``, 16 MiB unless told): a larger message is refused
as it arrives, close code 1009 ("message too big"), where Engine.IO alone would have read
it whole first and then ended the session with an ordinary close (1000). Counted in bytes,
UTF-8 for text (docs/operations.md, "Limits")."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import websockets
from websockets.asyncio.client import ClientConnection

from tests.support.server import HubServer, running_hub
from tests.support.sockets import assert_problem_ack

MESSAGE_BYTES = 4096
MESSAGE_TOO_BIG = 1009


@pytest.fixture(scope="module")
def bounded_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HubServer]:
    """A hub whose socket messages are bounded at ``MESSAGE_BYTES`` (the bound is the
    server's, not the database's: SQLite only)."""
    env = {"TASKHUB_MAX_SOCKET_MESSAGE_BYTES": str(MESSAGE_BYTES)}
    with running_hub("sqlite", tmp_path_factory.mktemp("bounded"), env=env) as server:
        yield server


async def signed_in(server: HubServer, compression: str | None) -> ClientConnection:
    """A raw Engine.IO websocket session, signed in (``40{token}`` answered ``40{…}``)."""
    url = "ws" + server.base_url.removeprefix("http") + "/socket.io/?EIO=4&transport=websocket"
    ws = await websockets.connect(
        url, proxy=None, open_timeout=10, max_size=None, compression=compression
    )
    opening = await asyncio.wait_for(ws.recv(), 10)
    assert isinstance(opening, str) and opening.startswith("0{"), opening
    await ws.send("40" + json.dumps({"token": server.admin_token}))
    answer = await asyncio.wait_for(ws.recv(), 10)
    assert isinstance(answer, str) and answer.startswith("40{"), answer
    return ws


def room_join(ack_id: int, room_id: str) -> str:
    return f'42{ack_id}["room_join",{{"room_id":"{room_id}"}}]'


async def close_code(ws: ClientConnection) -> int | None:
    """The code the server closed ``ws`` with (every message till then read and dropped)."""
    try:
        async with asyncio.timeout(10):
            while True:
                await ws.recv()
    except websockets.ConnectionClosed:
        pass
    return ws.close_code


@pytest.mark.parametrize("compression", ["deflate", None], ids=["deflate", "uncompressed"])
async def test_a_message_at_the_bound_is_read_and_one_byte_past_it_closes_with_1009(
    bounded_server: HubServer, compression: str | None
) -> None:
    """Exactly ``MESSAGE_BYTES`` is read (answered); one byte more is refused by uvicorn
    (1009), compressed on the wire or not."""
    ws = await signed_in(bounded_server, compression)
    try:
        padding = MESSAGE_BYTES - len(room_join(1, ""))
        within = room_join(1, "a" * padding)
        assert len(within.encode()) == MESSAGE_BYTES
        await ws.send(within)
        answer = await asyncio.wait_for(ws.recv(), 10)
        assert isinstance(answer, str) and answer.startswith("431["), answer
        assert_problem_ack(json.loads(answer[3:])[0], 400, "invalid-room-id")
        await ws.send(room_join(2, "a" * (padding + 1)))
        assert await close_code(ws) == MESSAGE_TOO_BIG
    finally:
        await ws.close()


async def test_text_is_counted_in_its_utf8_bytes(bounded_server: HubServer) -> None:
    """Fewer characters than the bound, more bytes: refused (Engine.IO, counting
    characters, would have read it)."""
    ws = await signed_in(bounded_server, None)
    try:
        message = room_join(1, "é" * (MESSAGE_BYTES // 2))
        assert len(message) < MESSAGE_BYTES < len(message.encode())
        await ws.send(message)
        assert await close_code(ws) == MESSAGE_TOO_BIG
    finally:
        await ws.close()


async def test_a_binary_frame_past_the_bound_closes_with_1009(bounded_server: HubServer) -> None:
    ws = await signed_in(bounded_server, None)
    try:
        await ws.send(b"\x00" * (MESSAGE_BYTES + 1))
        assert await close_code(ws) == MESSAGE_TOO_BIG
    finally:
        await ws.close()
