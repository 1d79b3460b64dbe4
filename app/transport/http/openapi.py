"""The OpenAPI 3.1 document, generated from the ``Endpoint`` records and the pydantic wire
models the handlers use (never written by hand), served at ``GET /openapi.json``."""

from __future__ import annotations

import copy
import re
from collections.abc import Awaitable, Callable, Iterable
from http import HTTPStatus
from importlib import metadata
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode, models_json_schema
from starlette.requests import Request
from starlette.responses import Response

from taskhub.rules.naming import FULL_NAME_PATTERN, MAX_ROOM_ID_LENGTH, ROOM_ID_PATTERN
from taskhub.transport.http.api import JSON_MEDIA_TYPE, Endpoint, json_response
from taskhub.transport.http.problems import PROBLEM_MEDIA_TYPE
from taskhub.transport.http.schemas import ProblemOut

OPENAPI_VERSION = "3.1.0"
REF_TEMPLATE = "#/components/schemas/{model}"
SECURITY_SCHEME = "bearerAuth"
# Every authenticated operation can answer these, whatever its own list says: 413 for a
# body over TASKHUB_MAX_BODY_BYTES, declared (any operation) or read (``api.py``).
# 503: on PostgreSQL any request may meet ``database-unavailable``.
ALWAYS_ERRORS = (401, 413, 422, 503)
# An endpoint with a room door: a private room refuses a non-member 404, a member whose
# role falls short 403.
ROOM_ERRORS = (403, 404)
# Response headers of problems, by status.
_PROBLEM_HEADERS: dict[int, dict[str, str]] = {
    401: {"WWW-Authenticate": "Bearer"},
    429: {"Retry-After": "seconds to wait before submitting again (a per-user limit)"},
    503: {
        "Retry-After": "seconds to wait before trying again (database-unavailable, validation-busy)"
    },
    504: {"Retry-After": "seconds to wait before reading again (provider-timeout)"},
}
# ``{full_name:path}`` (Starlette) → ``full_name`` (OpenAPI).
_PATH_PARAM = re.compile(r"{([A-Za-z_][A-Za-z0-9_]*)(?::[A-Za-z_]+)?}")
# Path parameters the handlers parse as UUIDs (``ApiRequest.uuid``).
_UUID_PARAMS = frozenset({"task_id", "worker_id", "provider_id"})
# Success statuses an endpoint answers besides ``Endpoint.status`` (the record has room for
# one only): PUT of an identical registration is 200, not 201; a submit replayed with the
# same Idempotency-Key is 200, not 202.
_OTHER_SUCCESSES: dict[tuple[str, str], tuple[int, ...]] = {
    ("PUT", "/rooms/{room_id:room}/jobs"): (200,),
    ("POST", "/rooms/{room_id:room}/tasks/{full_name:path}"): (200,),
    ("PUT", "/rooms/{room_id:room}/providers"): (200,),
}
_IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "1 to 255 visible ASCII characters; repeating it repeats the answer.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
}
# Request headers the handlers read.
_HEADER_PARAMETERS: dict[tuple[str, str], tuple[dict[str, Any], ...]] = {
    ("POST", "/rooms/{room_id:room}/tasks/{full_name:path}"): (_IDEMPOTENCY_KEY,),
    ("POST", "/tasks/claim"): (_IDEMPOTENCY_KEY,),
    ("GET", "/tasks/{task_id}"): (
        {
            "name": "Prefer",
            "in": "header",
            "required": False,
            "description": "wait=N: answer when the task ends, or after N seconds.",
            "schema": {"type": "string"},
        },
    ),
}
_PROVIDER_HEADERS: dict[tuple[str, str], tuple[dict[str, Any], ...]] = {
    ("GET", "/rooms/{room_id:room}/providers/{full_name:path}"): (
        {
            "name": "Prefer",
            "in": "header",
            "required": False,
            "description": "wait=N: wait up to N seconds (capped) for the provider's answer.",
            "schema": {"type": "string"},
        },
    ),
    ("POST", "/providers/{provider_id}/results"): (
        {
            "name": "X-Request-Hash",
            "in": "header",
            "required": True,
            "description": "the request_id of the provider_request this answers.",
            "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        },
        {
            "name": "X-Result-Status",
            "in": "header",
            "required": False,
            "description": "error: the body is a problem (the read failed).",
            "schema": {"type": "string", "enum": ["error", "ok"]},
        },
    ),
}
_HEADER_PARAMETERS.update(_PROVIDER_HEADERS)
# Bodies read with ``ApiRequest.optional_body`` (an empty body is allowed).
_OPTIONAL_BODIES = frozenset({("PATCH", "/workers/{worker_id}")})


def openapi_path(path: str) -> str:
    """A Starlette path template in OpenAPI form (converters dropped)."""
    return _PATH_PARAM.sub(lambda m: "{" + m.group(1) + "}", path)


def path_parameters(path: str) -> list[str]:
    return [match.group(1) for match in _PATH_PARAM.finditer(path)]


def _version() -> str:
    try:
        return metadata.version("taskhub")
    except metadata.PackageNotFoundError:  # pragma: no cover - source checkout
        return "0.0.0"


def build_openapi(endpoints: Iterable[Endpoint], prefix: str) -> dict[str, Any]:
    """The document for ``endpoints`` served under ``prefix``."""
    endpoints = list(endpoints)
    wanted: list[tuple[type[BaseModel], JsonSchemaMode]] = [(ProblemOut, "serialization")]
    for ep in endpoints:
        if ep.body is not None:
            wanted.append((ep.body, "validation"))
        if ep.query is not None:
            wanted.append((ep.query, "validation"))
        if ep.response is not None:
            wanted.append((ep.response, "serialization"))
    wanted = list(dict.fromkeys(wanted))
    refs, definitions = models_json_schema(wanted, ref_template=REF_TEMPLATE)
    components: dict[str, Any] = definitions.get("$defs", {})

    def ref(model: type[BaseModel], mode: JsonSchemaMode) -> dict[str, Any]:
        return dict(refs[(model, mode)])

    problem = ref(ProblemOut, "serialization")
    paths: dict[str, dict[str, Any]] = {}
    for ep in endpoints:
        operation: dict[str, Any] = {
            "operationId": ep.handler.__name__,
            "summary": ep.summary,
            "tags": [ep.handler.__module__.rsplit(".", 1)[-1]],
            "security": [{SECURITY_SCHEME: []}],
        }
        description = " ".join((ep.handler.__doc__ or "").split())
        if description and description != ep.summary:
            operation["description"] = description
        parameters = [_path_parameter(name) for name in path_parameters(ep.path)]
        if ep.query is not None:
            parameters.extend(_query_parameters(components, ref(ep.query, "validation")))
        parameters.extend(copy.deepcopy(_HEADER_PARAMETERS.get((ep.method, ep.path), ())))
        if parameters:
            operation["parameters"] = parameters
        if ep.body is not None:
            operation["requestBody"] = {
                "required": (ep.method, ep.path) not in _OPTIONAL_BODIES,
                "content": {JSON_MEDIA_TYPE: {"schema": ref(ep.body, "validation")}},
            }
        operation["responses"] = _responses(ep, ref, problem)
        paths.setdefault(openapi_path(prefix + ep.path), {})[ep.method.lower()] = operation
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Taskhub",
            "version": _version(),
            "description": "Real-time collaborative task hub: rooms, remote workers, tasks.",
        },
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {
                SECURITY_SCHEME: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "An API token: Authorization: Bearer <token>.",
                }
            },
        },
    }


def _path_parameter(name: str) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string", **_PATH_PARAM_RULES.get(name, {})}
    if name in _UUID_PARAMS:
        schema["format"] = "uuid"
    return {"name": name, "in": "path", "required": True, "schema": schema}


# The naming rules (``app/rules/naming.py``) of the path parameters that have them.
_PATH_PARAM_RULES: dict[str, dict[str, Any]] = {
    "room_id": {"minLength": 1, "maxLength": MAX_ROOM_ID_LENGTH, "pattern": ROOM_ID_PATTERN},
    "full_name": {"pattern": FULL_NAME_PATTERN},
}


def _with_categories(document: dict[str, Any], categories: list[str]) -> dict[str, Any]:
    """``document`` with a job's ``category`` listing this hub's allowed categories."""
    schemas = document["components"]["schemas"]
    schemas["JobRegisterIn"]["properties"]["category"]["enum"] = list(categories)
    return document


def _query_parameters(components: dict[str, Any], query_ref: dict[str, Any]) -> list[Any]:
    name = query_ref["$ref"].rsplit("/", 1)[-1]
    model_schema = components[name]
    required = set(model_schema.get("required", ()))
    return [
        {
            "name": field,
            "in": "query",
            "required": field in required,
            "schema": copy.deepcopy(schema),
        }
        for field, schema in model_schema.get("properties", {}).items()
    ]


def _responses(
    ep: Endpoint,
    ref: Callable[[type[BaseModel], JsonSchemaMode], dict[str, Any]],
    problem: dict[str, Any],
) -> dict[str, Any]:
    success: dict[str, Any] = {"description": HTTPStatus(ep.status).phrase}
    if ep.response is not None and ep.status != 204:
        success["content"] = {JSON_MEDIA_TYPE: {"schema": ref(ep.response, "serialization")}}
    if ep.headers:
        success["headers"] = _headers(ep.headers)
    links = _LINKS.get(ep.handler.__name__)
    if links is not None:
        success["links"] = copy.deepcopy(links)
    responses: dict[str, Any] = {str(ep.status): success}
    for status in _OTHER_SUCCESSES.get((ep.method, ep.path), ()):
        responses[str(status)] = {**success, "description": HTTPStatus(status).phrase}
    responses = dict(sorted(responses.items()))
    room_errors = ROOM_ERRORS if ep.room is not None else ()
    for status in sorted({*ep.errors, *ALWAYS_ERRORS, *room_errors}):
        responses[str(status)] = {
            "description": HTTPStatus(status).phrase,
            "content": {PROBLEM_MEDIA_TYPE: {"schema": dict(problem)}},
        }
        if status in _PROBLEM_HEADERS:
            responses[str(status)]["headers"] = _headers(_PROBLEM_HEADERS[status])
    return responses


def _link(operation: str, **parameters: str) -> dict[str, Any]:
    return {"operationId": operation, "parameters": parameters}


_TASK_LINKS = {
    "GetTask": _link("get_task", task_id="$response.body#/id"),
    "UpdateTask": _link("update_task", task_id="$response.body#/id"),
}
_JOB_LINKS = {
    "GetJob": _link(
        "get_job", room_id="$request.path.room_id", full_name="$response.body#/full_name"
    ),
    "SubmitTask": _link(
        "submit_task", room_id="$request.path.room_id", full_name="$response.body#/full_name"
    ),
    "ListJobTasks": _link(
        "list_job_tasks", room_id="$request.path.room_id", full_name="$response.body#/full_name"
    ),
    "Heartbeat": _link("heartbeat", worker_id="$response.body#/worker_id"),
}
_WORKER_LINKS = {
    "Heartbeat": _link("heartbeat", worker_id="$response.body#/id"),
    "DeleteWorker": _link("delete_worker", worker_id="$response.body#/id"),
}
# What a success answer lets a client do next, by operation (OpenAPI links: for tools that
# follow them, such as clients generated from this document or stateful API testing).
_LINKS: dict[str, dict[str, Any]] = {
    "submit_task": _TASK_LINKS,
    "register_job": _JOB_LINKS,
    "create_worker": _WORKER_LINKS,
    "claim_task": {
        "GetTask": _link("get_task", task_id="$response.body#/task/id"),
        "UpdateTask": _link("update_task", task_id="$response.body#/task/id"),
    },
}


def _headers(described: dict[str, str]) -> dict[str, Any]:
    return {
        header: {"description": description, "schema": {"type": "string"}}
        for header, description in described.items()
    }


def openapi_endpoint(
    endpoints: Iterable[Endpoint], prefix: str, categories: list[str] | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint serving the document (built once, on first use); with
    ``categories``, the hub's allowed categories (``TASKHUB_ALLOWED_CATEGORIES``) as the
    ones a job may have."""
    endpoints = list(endpoints)
    cache: dict[str, Any] = {}

    async def openapi_json(_request: Request) -> Response:
        if "document" not in cache:
            document = build_openapi(endpoints, prefix)
            if categories is not None:
                document = _with_categories(document, categories)
            cache["document"] = document
        return json_response(cache["document"])

    return openapi_json
