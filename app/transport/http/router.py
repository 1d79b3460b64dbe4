"""The REST API's requests, dispatched straight to their endpoint.

A request of the task cycle costs the hub a few hundred microseconds of its own work;
passing it through Socket.IO's ASGI wrapper, Starlette's two error middlewares, its router
(every route tried in turn) and its endpoint wrapper cost about a fifth as much again.
``ApiRoutes`` matches the API's routes first, by method, with Starlette's own path syntax
and converters, and answers errors with the same problem handlers. Whatever it does not
match exactly — another path, a method a path does not allow (405), a trailing slash to
redirect, a mounted root path — goes on to Starlette as before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

from starlette.convertors import Convertor
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route as StarletteRoute
from starlette.routing import compile_path

from taskhub.observability.request_id import Receive, Scope, Send
from taskhub.runtime import Hub
from taskhub.transport.http.api import Endpoint, call_authenticated
from taskhub.transport.http.problems import EXCEPTION_HANDLERS

Route = tuple[re.Pattern[str], dict[str, Convertor[Any]], Endpoint]


class ApiRoutes:
    """The endpoints under ``prefix``, tried in their order (as Starlette would)."""

    def __init__(self, endpoints: Iterable[Endpoint], prefix: str, hub: Hub) -> None:
        self._hub = hub
        self._by_method: dict[str, list[Route]] = {}
        for endpoint in endpoints:
            regex, _format, convertors = compile_path(prefix + endpoint.path)
            methods = [endpoint.method] + (["HEAD"] if endpoint.method == "GET" else [])
            for method in methods:
                self._by_method.setdefault(method, []).append((regex, convertors, endpoint))

    def match(self, scope: Scope) -> tuple[Endpoint, dict[str, Any]] | None:
        """The endpoint and path parameters of an HTTP request this router answers."""
        if scope["type"] != "http" or scope.get("root_path"):
            return None
        # Matched as sent, each parameter decoded after: a room id may hold a "/" (sent as
        # %2F), which the decoded path could not tell from a separator.
        raw = scope.get("raw_path")  # (some clients' test transports leave the query on it)
        path = raw.partition(b"?")[0].decode("latin-1") if raw else scope["path"]
        for regex, convertors, endpoint in self._by_method.get(scope["method"], ()):
            found = regex.match(path)
            if found is not None:
                params = {
                    name: convertors[name].convert(unquote(value) if raw else value)
                    for name, value in found.groupdict().items()
                }
                return endpoint, params
        return None

    async def handle(
        self,
        matched: tuple[Endpoint, dict[str, Any]],
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        endpoint, params = matched
        scope["path_params"] = params
        request = Request(scope, receive)
        try:
            response = await call_authenticated(endpoint.handler, request, self._hub)
        except Exception as exc:
            response = await _problem(request, exc)
        await response(scope, receive, send)


async def _problem(request: Request, exc: Exception) -> Response:
    """The response of the problem handler registered for the nearest class of ``exc``."""
    for cls in type(exc).__mro__:
        handler = EXCEPTION_HANDLERS.get(cls)
        if handler is not None:
            return await handler(request, exc)
    raise exc  # not an Exception subclass the handlers cover (cannot happen)


def starlette_routes(endpoints: Iterable[Endpoint], prefix: str) -> list[StarletteRoute]:
    """The endpoints as Starlette routes, for what ``ApiRoutes`` passes on: one route per
    path, in the endpoints' order, taking every method of that path, so that a 405 lists
    them all in ``Allow`` (RFC 9110), not only the first endpoint's."""
    by_path: dict[str, dict[str, Any]] = {}
    for endpoint in endpoints:
        by_path.setdefault(endpoint.path, {})[endpoint.method] = endpoint.handler_endpoint

    def by_method(handlers: dict[str, Any]) -> Any:
        async def handle(request: Request) -> Response:
            method = "GET" if request.method == "HEAD" else request.method
            return await handlers[method](request)

        return handle

    return [
        StarletteRoute(prefix + path, by_method(handlers), methods=list(handlers))
        for path, handlers in by_path.items()
    ]
