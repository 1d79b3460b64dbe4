"""Providers (docs/protocol.md, "Providers"): ``/v1/joblib/rooms/{room_id}/providers…``
and ``/v1/joblib/providers/{provider_id}…``, zndraw-joblib 0.1.7's contract."""

from __future__ import annotations

import asyncio
import re
from datetime import datetime
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response
from starlette.types import Receive

from taskhub.observability import metrics
from taskhub.rules.authorisation import RoomAction
from taskhub.rules.errors import ValidationFailed
from taskhub.rules.events import EventBatch
from taskhub.rules.naming import INTERNAL_ROOM
from taskhub.rules.providers import (
    ERROR_RESULT,
    MAX_PROVIDER_NAME_LENGTH,
    ProviderRecord,
    ProviderTimeout,
    read_wait,
)
from taskhub.runtime import Hub
from taskhub.services import providers as service
from taskhub.transport.http.api import Api, ApiRequest, json_response
from taskhub.transport.http.problems import PROBLEM_MEDIA_TYPE
from taskhub.transport.http.schemas import JsonObject, PageOut, PageQuery, page_of

api = Api()
REQUEST_HASH = re.compile(r"^[0-9a-f]{64}$")


class ProviderRegisterIn(BaseModel):
    # zndraw-joblib's SDK sends the field name ("schema_"), other clients the alias.
    model_config = ConfigDict(populate_by_name=True)

    category: str  # checked by the rules: 400 invalid-category
    name: str = Field(max_length=MAX_PROVIDER_NAME_LENGTH, json_schema_extra={"minLength": 1})
    schema_: JsonObject = Field(default_factory=dict, alias="schema")
    content_type: str = "application/json"
    worker_id: UUID | None = None


class ProviderOut(BaseModel):
    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    id: UUID
    room_id: str
    category: str
    name: str
    full_name: str
    schema_: dict[str, Any] = Field(alias="schema")
    worker_id: UUID | None  # None: an @internal provider (the hub's own)
    created_at: datetime
    content_type: str  # Taskhub: the media type of its reads

    @classmethod
    def of(cls, record: ProviderRecord) -> ProviderOut:
        return cls(
            id=record.id,
            room_id=record.room_id,
            category=record.category,
            name=record.name,
            full_name=record.full_name,
            schema_=record.schema,
            worker_id=record.worker_id,
            created_at=record.created_at,
            content_type=record.content_type,
        )


def _superuser_categories(req: ApiRequest) -> list[str]:
    return req.hub.settings.provider_superuser_categories


@api.route(
    "PUT",
    "/rooms/{room_id:room}/providers",
    status=201,
    body=ProviderRegisterIn,
    response=ProviderOut,
    errors=(400, 403, 404),
    room=RoomAction.REGISTER,
)
async def register_provider(req: ApiRequest) -> Response:
    """Register a provider in a room, or update it (201 new, 200 updated)."""
    body = await req.body(ProviderRegisterIn)
    settings = req.hub.settings
    registration, events = await service.register_provider(
        req.hub.db,
        req.principal,
        req.path("room_id"),
        category=body.category,
        name=body.name,
        schema=body.schema_,
        content_type=body.content_type,
        worker_id=body.worker_id,
        allowed_categories=settings.allowed_provider_categories,
        superuser_categories=settings.provider_superuser_categories,
    )
    await req.hub.publisher.publish(events)
    return json_response(
        ProviderOut.of(registration.provider), 201 if registration.created else 200
    )


@api.route(
    "GET",
    "/rooms/{room_id:room}/providers",
    query=PageQuery,
    response=PageOut[ProviderOut],
    errors=(400,),
    room=RoomAction.READ,
)
async def list_providers(req: ApiRequest) -> Response:
    """The providers visible from the room: its own, @global's and @internal's."""
    page = req.query(PageQuery)
    result = await service.list_providers(
        req.hub.db,
        req.principal,
        req.path("room_id"),
        page.limit,
        page.offset,
        _superuser_categories(req),
    )
    return json_response(page_of(ProviderOut, result))


@api.route(
    "GET",
    "/rooms/{room_id:room}/providers/{full_name:path}/info",
    response=ProviderOut,
    errors=(400, 403, 404),
    room=RoomAction.READ,
)
async def get_provider_info(req: ApiRequest) -> Response:
    """One provider, with its JSON schema, as seen from the room."""
    record = await service.get_provider(
        req.hub.db,
        req.principal,
        req.path("room_id"),
        req.path("full_name"),
        _superuser_categories(req),
    )
    return json_response(ProviderOut.of(record))


@api.route(
    "GET",
    "/rooms/{room_id:room}/providers/{full_name:path}",
    errors=(400, 403, 404, 504),
    headers={"Preference-Applied": "wait=N when the answer waited (Prefer: wait=N)"},
    room=RoomAction.READ,
)
async def read_provider(req: ApiRequest) -> Response:
    """Read from a provider: the query parameters are the read's; its cached result at once,
    else wait for the provider's answer (``Prefer: wait=N``)."""
    settings = req.hub.settings
    wait, asked = read_wait(
        req.header("prefer"),
        default=settings.provider_long_poll_default_seconds,
        most=settings.provider_long_poll_max_seconds,
    )
    params = dict(req.request.query_params)  # zndraw-joblib's: the last of repeated names
    stop = asyncio.Event()
    watching = asyncio.ensure_future(_stop_when_gone(req.request.receive, stop))
    try:
        read = await service.read_provider(
            req.hub.db,
            req.hub.provider_results,
            req.principal,
            req.path("room_id"),
            req.path("full_name"),
            params,
            wait=wait,
            inflight_seconds=settings.provider_inflight_ttl_seconds,
            superuser_categories=_superuser_categories(req),
            dispatch=lambda provider, digest, canonical: _dispatch(
                req.hub, provider, digest, canonical
            ),
            stop=stop,
        )
    finally:
        watching.cancel()
    result = read.result
    metrics.provider_read(_outcome(read, stopped=stop.is_set() and not req.hub.draining))
    if result is None:
        if req.hub.draining:
            raise ProviderTimeout(
                f"The hub is shutting down before provider {read.provider.full_name!r} "
                "answered: read again."
            )
        if stop.is_set():  # the client hung up: nobody is there to answer
            return Response(status_code=499)
        raise ProviderTimeout(
            f"Provider {read.provider.full_name!r} did not respond within {wait}s."
        )
    headers = {"Preference-Applied": f"wait={wait}"} if asked and read.waited else None
    if result.problem_status is not None:  # a failed read, replayed
        return Response(
            result.data,
            status_code=result.problem_status,
            media_type=PROBLEM_MEDIA_TYPE,
            headers=headers,
        )
    return Response(result.data, media_type=read.provider.content_type, headers=headers)


def _outcome(read: service.Read, *, stopped: bool) -> str:
    if read.result is None:
        return "abandoned" if stopped else "timeout"
    if read.result.problem_status is not None:
        return "failed"
    return "answered" if read.waited else "cached"


async def _dispatch(hub: Hub, provider: ProviderRecord, digest: str, canonical: str) -> None:
    """Ask for a read's answer: ``provider_request`` to a remote provider's sockets, or the
    hub's executor for an ``@internal`` one."""
    if provider.room_id == INTERNAL_ROOM:
        await hub.internal_providers.dispatch(provider, digest, canonical)
        return
    events: EventBatch = service.request_event(provider, digest, canonical)
    await hub.publisher.publish(events)


async def _stop_when_gone(receive: Receive, stop: asyncio.Event) -> None:
    """Sets ``stop`` once the client has disconnected (a GET has no body to read)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    stop.set()


@api.route("DELETE", "/providers/{provider_id}", status=204, errors=(403, 404))
async def delete_provider(req: ApiRequest) -> Response:
    """Unregister a provider (its owner, or a superuser; never an @internal one)."""
    events = await service.delete_provider(req.hub.db, req.principal, req.uuid("provider_id"))
    await req.hub.publisher.publish(events)
    return Response(status_code=204)


@api.route(
    "POST",
    "/providers/{provider_id}/results",
    status=204,
    errors=(403, 404),
    body_limit="provider_max_result_bytes",
)
async def post_provider_result(req: ApiRequest) -> Response:
    """A provider's answer to the read ``X-Request-Hash``: the body as its readers get it
    (``X-Result-Status: error``: a problem they get instead)."""
    provider_id = req.uuid("provider_id")
    digest = _request_hash(req.header("x-request-hash"))
    failed = _failed(req.header("x-result-status"))
    settings = req.hub.settings
    # Who may post, before the body is read (up to provider_max_result_bytes of it).
    provider = await service.result_poster(req.hub.db, req.principal, provider_id)
    body = await req.raw_body(settings.provider_max_result_bytes)
    events = await service.post_result(
        req.hub.provider_results,
        provider,
        digest,
        body,
        failed=failed,
        ttl=settings.provider_result_ttl_seconds,
    )
    await req.hub.publisher.publish(events)
    return Response(status_code=204)


def _request_hash(value: str | None) -> str:
    if value is None or not REQUEST_HASH.match(value):
        raise ValidationFailed(
            "X-Request-Hash must be the read's request hash (64 lower-case hex digits).",
            errors=[{"loc": ["header", "x-request-hash"], "msg": "a request hash is required"}],
        )
    return value


def _failed(value: str | None) -> bool:
    if value is None or value == "ok":
        return False
    if value == ERROR_RESULT:
        return True
    raise ValidationFailed(
        "X-Result-Status must be 'error' (a failed read) or absent.",
        errors=[{"loc": ["header", "x-result-status"], "msg": "must be 'error' or absent"}],
    )
