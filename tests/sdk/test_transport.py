"""The SDK's transport (``taskhub.sdk.transport.HubTransport``, aiohttp under
``httpx.AsyncClient``), against a scripted server on 127.0.0.1: what it writes (what httpx
built, nothing of aiohttp's own), the answers it reads (sized, chunked, until close,
compressed), the connections it keeps, and the httpx exceptions a failure maps to (which
the SDK's retry rule reads)."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
import pytest

from taskhub.sdk.transport import HubTransport

OK = b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{"ok":true}'

# What the server does with one request: the bytes it answers, and whether it then closes.
Script = Callable[[bytes], tuple[bytes, bool]]


@dataclass
class Server:
    url: str
    requests: list[bytes] = field(default_factory=list)
    connections: int = 0
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # a client closed one


@asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[Server]:
    """A server answering every request read off a connection by ``script``."""
    server = Server("")

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                request = head + await reader.readexactly(length)
                server.requests.append(request)
                answer, close = script(request)
                writer.write(answer)
                await writer.drain()
                if close:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            server.ended.set()
        finally:
            writer.close()

    listening = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    server.url = f"http://127.0.0.1:{port}"
    async with listening:
        yield server


def client(server: Server, **options: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.url, transport=HubTransport(), trust_env=False, **options
    )


async def test_a_request_goes_out_as_httpx_built_it() -> None:
    async with scripted(lambda request: (OK, False)) as server, client(server) as http:
        response = await http.post("/v1/x%20y?a=1", json={"n": 1}, headers={"X-Key": "k"})
    assert response.status_code == 200 and response.json() == {"ok": True}
    head, body = server.requests[0].split(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"POST /v1/x%20y?a=1 HTTP/1.1"
    pairs = [line.partition(b":") for line in lines[1:]]
    fields = {name.lower(): value.strip() for name, _, value in pairs}
    assert fields[b"host"] == server.url.removeprefix("http://").encode()
    assert fields[b"x-key"] == b"k"
    assert fields[b"content-length"] == str(len(body)).encode()
    assert body == b'{"n":1}' or body == b'{"n": 1}'


async def test_a_request_carries_httpx_headers_only() -> None:
    async with scripted(lambda request: (OK, False)) as server, client(server) as http:
        built = http.build_request("POST", "/v1", content=b"raw", cookies={"c": "1"})
        await http.send(built)
    head = server.requests[0].split(b"\r\n\r\n")[0]
    sent = [line.partition(b":")[0].lower() for line in head.split(b"\r\n")[1:]]
    assert sorted(sent) == sorted(name.lower() for name, _ in built.headers.raw)


async def test_credentials_in_the_url_stay_out_of_the_request_line() -> None:
    async with scripted(lambda request: (OK, False)) as server:
        url = server.url.replace("http://", "http://user:secret@")
        async with httpx.AsyncClient(transport=HubTransport(), trust_env=False) as http:
            assert (await http.get(url + "/v1")).status_code == 200
    request_line, _, head = server.requests[0].partition(b"\r\n")
    assert request_line == b"GET /v1 HTTP/1.1"
    assert b"authorization: basic " in head.lower()


async def test_requests_in_turn_share_one_connection() -> None:
    async with scripted(lambda request: (OK, False)) as server, client(server) as http:
        for _ in range(3):
            assert (await http.get("/")).json() == {"ok": True}
    assert server.connections == 1 and len(server.requests) == 3


async def test_requests_at_once_each_get_a_connection_kept_for_later() -> None:
    async with scripted(lambda request: (OK, False)) as server, client(server) as http:
        await asyncio.gather(*(http.get("/") for _ in range(3)))
        await asyncio.gather(*(http.get("/") for _ in range(3)))
    assert server.connections == 3 and len(server.requests) == 6


async def test_closing_the_client_closes_its_kept_connections() -> None:
    async with scripted(lambda request: (OK, False)) as server:
        async with client(server) as http:
            await http.get("/")
            assert not server.ended.is_set()
        await asyncio.wait_for(server.ended.wait(), 5)


async def test_a_connection_the_server_closed_is_not_used_again() -> None:
    async with scripted(lambda request: (OK, True)) as server, client(server) as http:
        for _ in range(2):
            assert (await http.get("/")).status_code == 200
            await asyncio.sleep(0.05)  # the close reaches the client
    assert server.connections == 2


async def test_an_answer_marked_connection_close_ends_its_connection() -> None:
    answer = OK.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n", 1)
    async with scripted(lambda request: (answer, False)) as server, client(server) as http:
        await http.get("/")
        await http.get("/")
    assert server.connections == 2


async def test_a_chunked_answer_is_read_whole() -> None:
    chunked = (
        b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'4\r\n{"a"\r\n5;ext=1\r\n:[1,2\r\n2\r\n]}\r\n0\r\nTrailer: x\r\n\r\n'
    )
    async with scripted(lambda request: (chunked, False)) as server, client(server) as http:
        first = await http.get("/")
        second = await http.get("/")
    assert (first.status_code, first.json(), second.json()) == (201, {"a": [1, 2]}, {"a": [1, 2]})
    assert server.connections == 1


async def test_an_answer_without_a_length_is_read_until_the_server_closes() -> None:
    answer = b"HTTP/1.1 200 OK\r\n\r\nall of it"
    async with scripted(lambda request: (answer, True)) as server, client(server) as http:
        assert (await http.get("/")).text == "all of it"
        assert (await http.get("/")).text == "all of it"
    assert server.connections == 2


async def test_no_body_is_read_for_a_204_or_a_head() -> None:
    def script(request: bytes) -> tuple[bytes, bool]:
        if request.startswith(b"HEAD"):
            return b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", False
        return b"HTTP/1.1 204 No Content\r\n\r\n", False

    async with scripted(script) as server, client(server) as http:
        assert (await http.head("/")).content == b""
        assert (await http.delete("/")).status_code == 204
        assert (await http.head("/")).headers["content-length"] == "99"
    assert server.connections == 1


async def test_a_compressed_answer_is_decoded_by_httpx() -> None:
    body = gzip.compress(b'{"big":true}')
    answer = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )
    async with scripted(lambda request: (answer, False)) as server, client(server) as http:
        assert (await http.get("/")).json() == {"big": True}


async def test_an_interim_answer_is_skipped() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" + OK
    async with scripted(lambda request: (answer, False)) as server, client(server) as http:
        assert (await http.get("/")).json() == {"ok": True}


async def test_no_server_is_a_connect_error() -> None:
    async with scripted(lambda request: (OK, False)) as server:
        url = server.url
    async with httpx.AsyncClient(base_url=url, transport=HubTransport()) as http:
        with pytest.raises(httpx.ConnectError):
            await http.get("/")


async def test_a_server_closing_mid_answer_is_a_protocol_error() -> None:
    cut = b'HTTP/1.1 200 OK\r\nContent-Length: 50\r\n\r\n{"partial'
    async with scripted(lambda request: (cut, True)) as server, client(server) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/")


@pytest.mark.parametrize("length", [b"-1", b"ten", b""])
async def test_a_bad_content_length_is_a_protocol_error(length: bytes) -> None:
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %s\r\n\r\n{}" % length
    async with scripted(lambda request: (answer, True)) as server, client(server) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/")


async def test_a_server_closing_without_an_answer_is_a_protocol_error() -> None:
    async with scripted(lambda request: (b"", True)) as server, client(server) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/")


async def test_an_answer_that_is_not_http_is_a_protocol_error() -> None:
    not_http = b"SSH-2.0-OpenSSH\r\n\r\n"
    async with scripted(lambda request: (not_http, True)) as server, client(server) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            await http.get("/")


async def test_a_slow_answer_is_a_read_timeout() -> None:
    async with scripted(lambda request: (b"", False)) as server, client(server) as http:
        with pytest.raises(httpx.ReadTimeout):
            await http.get("/", timeout=0.2)


class Recording(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.urls: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.urls.append(str(request.url))
        return httpx.Response(200, text="fallback")


async def test_https_and_streamed_bodies_go_to_the_fallback() -> None:
    fallback = Recording()
    async with httpx.AsyncClient(transport=HubTransport(fallback)) as http:
        assert (await http.get("https://hub.example/v1")).text == "fallback"

        async def chunks() -> AsyncIterator[bytes]:
            yield b"streamed"

        assert (await http.post("http://127.0.0.1:9/v1", content=chunks())).text == "fallback"
    assert fallback.urls == ["https://hub.example/v1", "http://127.0.0.1:9/v1"]
