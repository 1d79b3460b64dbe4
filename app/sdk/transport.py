"""The SDK's transport for ``httpx.AsyncClient``: plain-HTTP requests go through one
``aiohttp.ClientSession`` (llhttp's C parser, keep-alive connection pooling) instead of
httpcore's layers (h11's state machine, anyio's cancel scopes, a pool built for HTTP/2 and
proxies).

httpx still builds every request and reads every response (headers, cookies, content
decoding, timeouts as ``httpx.Timeout`` says); aiohttp only carries the bytes, so its own
cookie jar, content decoding, redirects and default headers are off, and its only timeouts
are the request's own. A request it does not take (``https://``, a body of unknown length)
goes to httpx's own transport, and proxies from the environment are mounted by httpx
around it as ever.

Failures map to httpx's exceptions, which the SDK's retry rule reads (``http.py``): no
connection (``ConnectError``, ``ConnectTimeout``: never sent), a send or read that failed
(``WriteError``, ``ReadError``, ``ReadTimeout``), a server that closed or answered
something that is not HTTP/1.1 (``RemoteProtocolError``).
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp
import httpx
from yarl import URL  # aiohttp's URL type; ``encoded=True`` keeps httpx's quoting

MAX_CONNECTIONS = 16  # connections at once per host and port; more requests wait (pool)
# Headers aiohttp adds of its own accord: httpx already set those a request should carry.
_NOT_AUTOMATIC = ("Accept", "Accept-Encoding", "User-Agent", "Content-Type")


class HubTransport(httpx.AsyncBaseTransport):
    """Plain-HTTP requests over an aiohttp session; the rest by ``fallback``."""

    def __init__(self, fallback: httpx.AsyncBaseTransport | None = None) -> None:
        self._fallback = fallback or httpx.AsyncHTTPTransport()
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        """The session, made at the first request (it belongs to the running loop)."""
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=MAX_CONNECTIONS),
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(),
                auto_decompress=False,
                skip_auto_headers=_NOT_AUTOMATIC,
            )
        return self._session

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.scheme != "http" or not isinstance(request.stream, httpx.ByteStream):
            return await self._fallback.handle_async_request(request)
        url = request.url
        if url.userinfo:  # httpx sent it as an Authorization header; aiohttp takes one only
            url = url.copy_with(userinfo=b"")
        sent = False
        try:
            async with self._client().request(
                request.method,
                URL(str(url), encoded=True),
                headers=request.headers.multi_items(),
                data=request.content or None,
                allow_redirects=False,
                timeout=_timeout(request.extensions.get("timeout", {})),
            ) as answer:
                sent = True
                content = await answer.read()
        except aiohttp.ClientError as exc:
            raise _mapped(exc, sent) from exc
        except TimeoutError as exc:  # none expected: every aiohttp timeout is a ClientError
            raise (httpx.ReadTimeout if sent else httpx.ConnectTimeout)(str(exc)) from exc
        return httpx.Response(
            answer.status,
            headers=answer.raw_headers,
            stream=httpx.ByteStream(content),
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": (answer.reason or "").encode("latin-1"),
            },
        )

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self._fallback.aclose()


def _timeout(timeouts: Mapping[str, float | None]) -> aiohttp.ClientTimeout:
    """httpx's per-request timeouts as aiohttp's: a connection from the pool (waiting for one
    plus connecting) in ``pool`` + ``connect``, a connection made in ``connect``, each read
    of the answer in ``read``. aiohttp has no write timeout (a request is written whole into
    the socket's buffer)."""
    connect, pool = timeouts.get("connect"), timeouts.get("pool")
    return aiohttp.ClientTimeout(
        connect=None if connect is None or pool is None else connect + pool,
        sock_connect=connect,
        sock_read=timeouts.get("read"),
    )


def _mapped(exc: aiohttp.ClientError, sent: bool) -> httpx.TransportError:
    """The httpx exception for aiohttp's ``exc``; ``sent``: the answer's head had come."""
    message = str(exc) or type(exc).__name__
    if isinstance(exc, aiohttp.ClientConnectorError):
        return httpx.ConnectError(message)
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return httpx.ConnectTimeout(message)
    if isinstance(exc, aiohttp.ServerTimeoutError):
        return httpx.ReadTimeout(message)
    if isinstance(exc, (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError)):
        return httpx.RemoteProtocolError(message)
    if isinstance(exc, aiohttp.ClientResponseError):  # not an HTTP/1.1 answer
        return httpx.RemoteProtocolError(message)
    if isinstance(exc, aiohttp.ClientConnectionResetError) and not sent:
        return httpx.WriteError(message)
    if isinstance(exc, (aiohttp.ClientOSError, aiohttp.ClientConnectionResetError)):
        return httpx.ReadError(message)
    return httpx.RemoteProtocolError(message)
