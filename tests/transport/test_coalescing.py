"""Each answer leaves in one socket write: uvicorn's protocol, as ``taskhub serve`` runs it,
on a transport that records what reaches the socket."""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.config import Config
from uvicorn.server import ServerState

from taskhub.transport.http.coalescing import (
    PROTOCOL,
    CoalescingHttpToolsProtocol,
    CoalescingTransport,
)


class SocketTransport(asyncio.Transport):
    """What the socket is given: one entry per write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []
        self.closed = False
        self.aborted = False

    def write(self, data: Any) -> None:
        assert not self.closed, "written after close"
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.aborted = self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 50000)}.get(
            name, default
        )

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def json_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    body = b'{"ok":true}'
    headers = [(b"content-type", b"application/json"), (b"content-length", b"11")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def streaming_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    for chunk in (b"first", b"second"):
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await asyncio.sleep(0.01)
    await send({"type": "http.response.body", "body": b""})


def served(app: Any) -> tuple[CoalescingHttpToolsProtocol, SocketTransport]:
    config = Config(app=app, http=PROTOCOL, lifespan="off", log_level="warning")
    config.load()
    assert config.http_protocol_class is CoalescingHttpToolsProtocol
    protocol = CoalescingHttpToolsProtocol(config=config, server_state=ServerState(), app_state={})
    transport = SocketTransport()
    protocol.connection_made(transport)
    return protocol, transport


async def until(condition: Any) -> None:
    """Let the loop run until ``condition`` holds (the protocol's task answers meanwhile)."""
    async with asyncio.timeout(5):
        while not condition():  # noqa: ASYNC110 (what is awaited is a fake socket's state)
            await asyncio.sleep(0.001)


async def test_an_answer_head_and_body_leave_in_one_write() -> None:
    protocol, transport = served(json_app)
    request = b"GET /v1/joblib/workers HTTP/1.1\r\nhost: hub\r\n\r\n"
    for turn in (1, 2):  # and again on the same kept-alive connection
        protocol.data_received(request)
        await until(lambda turn=turn: len(transport.writes) >= turn)
        await asyncio.sleep(0.01)  # nothing more follows
        assert len(transport.writes) == turn
        answer = transport.writes[-1]
        assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
        assert answer.endswith(b'\r\n\r\n{"ok":true}')
    protocol.connection_lost(None)


async def test_a_streamed_answer_is_not_held_back_between_its_chunks() -> None:
    protocol, transport = served(streaming_app)
    protocol.data_received(b"GET /stream HTTP/1.1\r\nhost: hub\r\n\r\n")
    await until(lambda: any(b"first" in write for write in transport.writes))
    assert not any(b"second" in write for write in transport.writes)  # not yet produced
    await until(lambda: b"".join(transport.writes).endswith(b"0\r\n\r\n"))
    sent = b"".join(transport.writes)
    assert sent.index(b"first") < sent.index(b"second")
    protocol.connection_lost(None)


def coalescing() -> tuple[SocketTransport, CoalescingTransport]:
    """A socket and the coalescing transport in front of it."""
    socket = SocketTransport()
    return socket, CoalescingTransport(socket, asyncio.get_running_loop())


async def test_writes_of_one_turn_are_sent_together_in_order() -> None:
    socket, transport = coalescing()
    transport.write(b"head ")
    transport.writelines([b"body", memoryview(b" end")])
    assert socket.writes == []
    assert transport.get_write_buffer_size() == len(b"head body end")
    await asyncio.sleep(0)
    assert socket.writes == [b"head body end"]


async def test_closing_sends_what_was_written_first() -> None:
    socket, transport = coalescing()
    transport.write(b"last words")
    transport.close()
    assert socket.writes == [b"last words"] and socket.closed
    await asyncio.sleep(0)  # the scheduled send finds nothing left
    assert socket.writes == [b"last words"]


async def test_aborting_drops_what_was_not_sent() -> None:
    socket, transport = coalescing()
    transport.write(b"never sent")
    transport.abort()
    await asyncio.sleep(0)
    assert socket.writes == [] and socket.aborted


async def test_nothing_is_written_to_a_connection_that_is_closing() -> None:
    socket, transport = coalescing()
    transport.write(b"too late")
    socket.closed = True  # the peer went away meanwhile
    await asyncio.sleep(0)
    assert socket.writes == []
