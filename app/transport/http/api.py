"""A thin layer over Starlette routes: authentication, typed parsing of path, query and
body (with size limits), and a record of each endpoint's models for the OpenAPI document."""

from __future__ import annotations

import json
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar
from uuid import UUID

import orjson
from pydantic import BaseModel, ValidationError
from starlette.convertors import Convertor, register_url_convertor
from starlette.requests import Request
from starlette.responses import Response

from taskhub.json_codec import has_long_digit_run, wire_json
from taskhub.rules.authorisation import RoomAction
from taskhub.rules.errors import DomainError, PayloadTooLarge, Unauthorized, ValidationFailed
from taskhub.rules.naming import validate_room_id
from taskhub.runtime import Hub
from taskhub.services.identities import Caller, Identity
from taskhub.transport.credentials import bearer_token

M = TypeVar("M", bound=BaseModel)
JSON_MEDIA_TYPE = "application/json"
# Deeper JSON is refused: what is stored is sent back in answers and events, and encoders
# (pydantic's among them) give up on deep nesting; no real payload comes near this.
MAX_JSON_DEPTH = 64


class RoomIdConvertor(Convertor[str]):
    """``{room_id:room}``: one path segment, the empty one included, so that an empty room
    id gets the naming rules' 400 ``invalid-room-id`` rather than a 404 for the route."""

    regex = "[^/]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("room", RoomIdConvertor())


def json_response(
    content: BaseModel | dict[str, Any],
    status: int = 200,
    headers: dict[str, str] | None = None,
) -> Response:
    """A dict is written as pydantic writes a model (datetimes with ``Z``)."""
    body = (
        content.model_dump_json().encode() if isinstance(content, BaseModel) else dump_body(content)
    )
    return Response(body, status_code=status, media_type=JSON_MEDIA_TYPE, headers=headers)


def parse_body(raw: bytes, model: type[M]) -> M:
    """A request body read into ``model``: JSON, an object, no NUL characters (but in the
    model's ``NUL_REPLACED`` fields), nested at most ``MAX_JSON_DEPTH`` deep (422 else)."""
    try:
        data = read_json(raw) if raw else None
    except (ValueError, RecursionError) as exc:
        raise ValidationFailed(
            "Request body is not valid JSON.",
            errors=[{"loc": ["body"], "msg": f"Invalid JSON: {exc}"}],
        ) from None
    if not isinstance(data, dict):
        raise ValidationFailed(
            "Request body must be a JSON object.",
            errors=[{"loc": ["body"], "msg": "Input should be a JSON object"}],
        )
    if b"\\u0000" in raw:
        _replace_nul(data, getattr(model, "NUL_REPLACED", ()))
    if b"\\u0000" in raw and _has_nul(data):
        raise ValidationFailed(
            "Request body must not contain NUL characters.",
            errors=[{"loc": ["body"], "msg": "NUL characters (\\u0000) are not allowed"}],
        )
    if raw.count(b"{") + raw.count(b"[") > MAX_JSON_DEPTH and nested_deeper_than(
        raw, MAX_JSON_DEPTH
    ):
        raise ValidationFailed(
            f"Request body must not nest objects and arrays more than {MAX_JSON_DEPTH} deep.",
            errors=[{"loc": ["body"], "msg": f"nested deeper than {MAX_JSON_DEPTH} levels"}],
        )
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ValidationFailed("Invalid request body.", errors=_errors(exc, "body")) from None


def dump_body(content: Any) -> bytes:
    """An answer's JSON (``wire_json``: integers beyond 64 bits too, beside a stored
    document's text, ``StoredJSONText``)."""
    return wire_json(content)


def _errors(exc: ValidationError, where: str) -> list[dict[str, Any]]:
    return [
        {"loc": [where, *(str(part) for part in error["loc"])], "msg": error["msg"]}
        for error in exc.errors(include_url=False, include_input=False)
    ]


def _strings(value: Any) -> Iterator[str]:
    """Every string of a decoded JSON value, object keys included."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def _has_nul(value: Any) -> bool:
    """Whether a decoded JSON value holds U+0000 anywhere (PostgreSQL text and jsonb
    reject it, so it is refused on every backend)."""
    return any("\x00" in text for text in _strings(value))


def _replace_nul(data: dict[str, Any], fields: Iterable[str]) -> None:
    """U+0000 becomes U+FFFD in these top-level text fields (a model's ``NUL_REPLACED``:
    text that must be kept rather than refused)."""
    for name in fields:
        value = data.get(name)
        if isinstance(value, str):
            data[name] = value.replace("\x00", "\ufffd")


# What a JSON text's structure shows: quotes, brackets and braces (the rest is deleted).
_NOT_STRUCTURE = bytes(byte for byte in range(256) if byte not in b'"[]{}')
_AS_PARENTHESES = bytes.maketrans(b"[{]}", b"(())")


def nested_deeper_than(raw: bytes, limit: int) -> bool:
    """Whether a JSON text (valid: it was read) nests objects and arrays more than ``limit``
    deep (the top value at depth 1). Read off the text with a few passes of bytes methods:
    walking the decoded value took 60-130 ms for 40,000 3-D points (560 kB) here, on the
    event loop; this 2 ms."""
    # In valid JSON a quote inside a string is escaped, as is a backslash: without the
    # escapes, the quotes left open and close strings in turn.
    text = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    # Two quotes side by side once all but quotes and brackets are gone: a string without
    # brackets, or two strings with nothing but punctuation between them (one string).
    marks = text.translate(None, _NOT_STRUCTURE).replace(b'""', b"")
    brackets = b"".join(marks.split(b'"')[::2]).translate(_AS_PARENTHESES)
    for _ in range(limit):  # each pass takes away the innermost level
        if not brackets:
            return False
        brackets = brackets.replace(b"()", b"")
    return bool(brackets)


class ApiRequest:
    """What a handler sees: the hub, the caller, and typed accessors for its input."""

    __slots__ = ("caller", "hub", "identity", "principal", "request")

    def __init__(self, request: Request, hub: Hub, identity: Identity, caller: Caller) -> None:
        self.request = request
        self.hub = hub
        self.identity = identity
        self.principal = identity.principal
        self.caller = caller

    async def check_room(
        self, room_id: str, action: RoomAction, *, hidden: DomainError | None = None
    ) -> None:
        """The room rules allow the caller ``action`` in ``room_id`` (else their problem;
        ``hidden``: what to answer who may not read a private room, 404 else)."""
        await self.hub.rooms.check(self.principal, room_id, action, self.caller, hidden=hidden)

    async def check_task_room(
        self, task_id: UUID, action: RoomAction, *, others: RoomAction | None = None
    ) -> None:
        """``check_room`` for the room of a task (read only when a policy or a private room
        could refuse); ``others``: what a private room asks on another's task."""
        await self.hub.rooms.check_task(
            self.hub.db, self.principal, task_id, action, self.caller, others=others
        )

    def path(self, name: str) -> str:
        value: str = self.request.path_params[name]
        if "\x00" in value:  # PostgreSQL text cannot hold NUL: refuse it on every backend
            raise ValidationFailed(
                f"{name} must not contain NUL characters.",
                errors=[{"loc": ["path", name], "msg": "NUL characters are not allowed"}],
            )
        return value

    def uuid(self, name: str) -> UUID:
        raw = self.request.path_params[name]
        try:
            return UUID(raw)
        except (ValueError, TypeError):
            raise ValidationFailed(
                f"{name} must be a UUID.",
                errors=[{"loc": ["path", name], "msg": "Input should be a valid UUID"}],
            ) from None

    def query(self, model: type[M]) -> M:
        try:
            return model.model_validate(dict(self.request.query_params))
        except ValidationError as exc:
            raise ValidationFailed(
                "Invalid query parameters.", errors=_errors(exc, "query")
            ) from None

    def header(self, name: str) -> str | None:
        return self.request.headers.get(name)

    async def optional_body(self, model: type[M]) -> M | None:
        """Like ``body``, but an empty body is ``None`` (for bodies that are extensions)."""
        raw = await self._read_limited(self.hub.settings.max_body_bytes)
        return parse_body(raw, model) if raw.strip() else None

    async def body(self, model: type[M]) -> M:
        return parse_body(await self._read_limited(self.hub.settings.max_body_bytes), model)

    async def raw_body(self, limit: int) -> bytes:
        """The body as sent (not JSON: a provider's result), at most ``limit`` bytes (413)."""
        return await self._read_limited(limit)

    async def _read_limited(self, limit: int) -> bytes:
        """The body, counted as it arrives (a declared oversize is refused before the
        handler runs: ``call_authenticated``)."""
        chunks: list[bytes] = []
        size = 0
        async for chunk in self.request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"Request bodies are limited to {limit} bytes.")
            chunks.append(chunk)
        return b"".join(chunks)


def read_json(raw: bytes) -> Any:
    """A JSON body, integers exact. Either way refused (``ValueError``), as orjson refuses
    them: NaN and infinities (not JSON), numbers too large for a float (``1e400``), and
    lone surrogates (``"\\ud800"``: not text, and no database stores them);
    ``RecursionError`` for a document nested deeper than the standard library can read."""
    if not has_long_digit_run(raw):  # orjson would read a long integer as a float
        return orjson.loads(raw)
    data = json.loads(raw, parse_constant=_not_json, parse_float=_finite_float)
    _refuse_lone_surrogates(data)
    return data


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not a JSON value")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a number")
    return value


def _refuse_lone_surrogates(value: Any) -> None:
    for text in _strings(value):
        text.encode()  # UnicodeEncodeError (a ValueError) on a lone surrogate


def refuse_declared_oversize(request: Request, limit: int) -> None:
    """413 for a body declared (``Content-Length``) larger than ``limit``, whether or not
    the endpoint reads its body."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and capped_int(declared, limit + 1) > limit:
        raise PayloadTooLarge(f"Request bodies are limited to {limit} bytes.")


def capped_int(digits: str, cap: int) -> int:
    """A string of decimal digits as a number, at most ``cap`` (a string too long to be
    under the cap is not read as a number: Python refuses to convert very long ones)."""
    digits = digits.lstrip("0")
    return cap if len(digits) > len(str(cap)) else min(int(digits or "0"), cap)


Handler = Callable[[ApiRequest], Awaitable[Response]]


@dataclass(frozen=True)
class Endpoint:
    """One REST operation and the models that describe it."""

    method: str
    path: str
    handler: Handler
    summary: str
    status: int = 200
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    response: Any = None
    errors: tuple[int, ...] = ()
    headers: dict[str, str] = field(default_factory=dict)
    # The setting bounding this endpoint's body instead of ``max_body_bytes`` (a provider's
    # result: ``provider_max_result_bytes``).
    body_limit: str | None = None
    # What the request does in the room of its ``room_id`` path parameter, asked of the
    # room policy before the handler runs (every endpoint with a room in its path has one).
    room: RoomAction | None = None

    def max_body(self, settings: Any) -> int:
        """The largest body this endpoint takes (413 beyond)."""
        return int(getattr(settings, self.body_limit or "max_body_bytes"))


async def authenticate(request: Request, hub: Hub) -> tuple[Identity, Caller]:
    """Who sent ``request`` (401 when nobody the hub knows)."""
    token = bearer_token(request.headers.get("authorization"))
    caller = Caller(request, token)
    identity = await hub.identities.identify(caller)
    if identity is None:
        if token is None:
            raise Unauthorized("Missing bearer token (Authorization: Bearer <token>).")
        raise Unauthorized("Invalid or revoked token.")
    return identity, caller


class Api:
    """Collects a module's endpoints."""

    def __init__(self) -> None:
        self.endpoints: list[Endpoint] = []

    def route(self, method: str, path: str, **meta: Any) -> Callable[[Handler], Handler]:
        def register(handler: Handler) -> Handler:
            summary = (handler.__doc__ or handler.__name__).strip().splitlines()[0]
            self.endpoints.append(Endpoint(method, path, handler, summary, **meta))
            return handler

        return register


async def call_authenticated(endpoint: Endpoint, request: Request, hub: Hub) -> Response:
    """Authenticate the caller, refuse a declared oversize body, ask the room policy about
    the endpoint's room, then call the handler."""
    identity, caller = await authenticate(request, hub)
    refuse_declared_oversize(request, endpoint.max_body(hub.settings))
    req = ApiRequest(request, hub, identity, caller)
    if endpoint.room is not None:
        await req.check_room(validate_room_id(req.path("room_id")), endpoint.room)
    return await endpoint.handler(req)
