"""The REST API's one router: every request under the API prefix is answered here.

Each request goes straight to its endpoint, matched by method with Starlette's own path
syntax and converters (no pass through Socket.IO's ASGI wrapper, Starlette's middlewares
and its router, which tries every route in turn). What matches no endpoint is answered
here too, with the same problem handlers: 405 with every method of the path in ``Allow``
(RFC 9110), a redirect for a trailing slash, 404 for an unknown path. Paths outside the
prefix (Socket.IO, the page, health, metrics) go on to Starlette.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote

from starlette.convertors import Convertor
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
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
        self._prefix = prefix
        self._by_method: dict[str, list[Route]] = {}
        self._paths: list[tuple[re.Pattern[str], list[str]]] = []
        allowed: dict[str, list[str]] = {}
        for endpoint in endpoints:
            regex, _format, convertors = compile_path(prefix + endpoint.path)
            methods = [endpoint.method] + (["HEAD"] if endpoint.method == "GET" else [])
            for method in methods:
                self._by_method.setdefault(method, []).append((regex, convertors, endpoint))
            if endpoint.path not in allowed:
                allowed[endpoint.path] = []
                self._paths.append((regex, allowed[endpoint.path]))
            allowed[endpoint.path].extend(methods)

    def operations(self) -> set[tuple[str, str]]:
        """(method, path) of every endpoint this router answers (HEAD aside: every GET
        answers it), paths in Starlette's syntax."""
        return {
            (method, self._prefix + endpoint.path)
            for method, routes in self._by_method.items()
            if method != "HEAD"
            for _regex, _convertors, endpoint in routes
        }

    def owns(self, scope: Scope) -> bool:
        """Whether ``scope`` is an HTTP request under the API prefix (this router's)."""
        if scope["type"] != "http":
            return False
        path = _route_path(scope)
        return path == self._prefix or path.startswith(self._prefix + "/")

    def match(self, scope: Scope) -> tuple[Endpoint, dict[str, Any]] | None:
        """The endpoint and path parameters of an HTTP request, if one matches."""
        path, raw = _request_path(scope)
        for regex, convertors, endpoint in self._by_method.get(scope["method"], ()):
            found = regex.match(path)
            if found is not None:
                params = {
                    name: convertors[name].convert(unquote(value) if raw else value)
                    for name, value in found.groupdict().items()
                }
                return endpoint, params
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        matched = self.match(scope)
        if matched is not None:
            await self.handle(matched, scope, receive, send)
            return
        request = Request(scope, receive)
        path, _raw = _request_path(scope)
        methods = self._methods_of(path)
        if methods:
            miss = HTTPException(405, headers={"Allow": ", ".join(methods)})
        elif path.endswith("/") and self._methods_of(path.rstrip("/")):
            url = request.url
            location = url.replace(path=url.path.rstrip("/"))
            await RedirectResponse(str(location))(scope, receive, send)
            return
        else:
            miss = HTTPException(404)
        response = await _problem(request, miss)
        await response(scope, receive, send)

    def _methods_of(self, path: str) -> list[str]:
        for regex, methods in self._paths:
            if regex.match(path):
                return methods
        return []

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
            response = await call_authenticated(endpoint, request, self._hub)
        except Exception as exc:
            response = await _problem(request, exc)
        await response(scope, receive, send)


def _route_path(scope: Scope) -> str:
    """The request's path below the app's root path (as Starlette routes it)."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("", "/"):
        return path[len(root) :]
    return path


def _request_path(scope: Scope) -> tuple[str, bool]:
    """The path to match and whether it is the raw one: matched as sent, each parameter
    decoded after, for a room id may hold a "/" (sent as %2F), which the decoded path
    could not tell from a separator."""
    raw = scope.get("raw_path")  # (some clients' test transports leave the query on it)
    if not raw:
        return _route_path(scope), False
    path = raw.partition(b"?")[0].decode("latin-1")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("", "/"):
        path = path[len(root) :]
    return path, True


async def _problem(request: Request, exc: Exception) -> Response:
    """The response of the problem handler registered for the nearest class of ``exc``."""
    for cls in type(exc).__mro__:
        handler = EXCEPTION_HANDLERS.get(cls)
        if handler is not None:
            return await handler(request, exc)
    raise exc  # not an Exception subclass the handlers cover (cannot happen)
