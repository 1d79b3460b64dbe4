"""The OpenAPI document: valid OpenAPI 3.1, in step with the served routes, and its schemas
describe the bodies the server really sends."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate

from taskhub.main import API_PREFIX, ENDPOINTS, create_app
from taskhub.rules.errors import InvalidRoomId, ValidationFailed
from taskhub.rules.naming import validate_job_name, validate_room_id
from taskhub.transport.http.openapi import build_openapi, openapi_path
from tests.support.api import ApiClient

PROBLEM = "application/problem+json"
# Headers every response may carry, documented once: X-Request-ID in the README, the
# security headers in docs/protocol.md ("Routes outside the API").
UNDOCUMENTED_HEADERS = frozenset(
    {
        "content-type",
        "content-length",
        "x-request-id",
        "content-security-policy",
        "x-content-type-options",
        "x-frame-options",
        "referrer-policy",
    }
)
# A value for each path parameter, to call every operation.
PATH_VALUES = {
    "room_id": "room1",
    "full_name": "room1:modifiers:Rotate",
    "task_id": "00000000-0000-0000-0000-000000000000",
    "worker_id": "00000000-0000-0000-0000-000000000000",
    "provider_id": "00000000-0000-0000-0000-000000000000",
    "kind": "group",
    "subject": "lab",
}


async def fetch_document(http: httpx.AsyncClient) -> dict[str, Any]:
    response = await http.get("/openapi.json")  # no Authorization header
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.json()


def documented_operations(document: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (method.upper(), path)
        for path, item in document["paths"].items()
        for method in item
        if path.startswith("/v1/")
    }


def assert_matches(
    document: dict[str, Any], method: str, path: str, response: httpx.Response
) -> None:
    """``response`` has a documented status, headers, media type and a body valid against
    the documented schema ($refs resolved against the document's components)."""
    operation = document["paths"][API_PREFIX + path][method.lower()]
    documented = operation["responses"].get(str(response.status_code))
    assert documented is not None, (method, path, response.status_code, response.text)
    headers = {name.lower() for name in documented.get("headers", {})}
    sent = set(response.headers.keys()) - UNDOCUMENTED_HEADERS
    assert sent <= headers, (method, path, response.status_code, sent - headers)
    if response.status_code == 204:
        assert "content" not in documented
        assert response.content == b""
        return
    media_type = response.headers["content-type"].split(";")[0]
    assert media_type in documented["content"], (method, path, media_type)
    schema = {
        "allOf": [documented["content"][media_type]["schema"]],
        "components": document["components"],
    }
    jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    ).validate(response.json())


async def test_document_is_valid_openapi_3_1(http: httpx.AsyncClient, settings) -> None:
    document = await fetch_document(http)
    validate(document)  # raises on an invalid document
    assert document["openapi"].startswith("3.1")
    categories = document["components"]["schemas"]["JobRegisterIn"]["properties"]["category"]
    assert categories.pop("enum") == settings.allowed_categories
    assert document == build_openapi(ENDPOINTS, API_PREFIX)


def accepted(rule: Callable[[str], object], value: str) -> bool:
    try:
        rule(value)
    except (InvalidRoomId, ValidationFailed):
        return False
    return True


@pytest.mark.parametrize(
    "room_id",
    ["room1", "lab/7", "@global", "@internal", "Ω room", ".x", "...", "", "@", "a@b", "a:b",
     "@globals", "@other", ".", ".."],
)  # fmt: skip
def test_the_documented_room_id_is_the_naming_rule(room_id: str) -> None:
    operation = build_openapi(ENDPOINTS, API_PREFIX)["paths"][API_PREFIX + "/rooms/{room_id}/jobs"]
    (parameter,) = operation["put"]["parameters"]
    schema = parameter["schema"]
    documented = re.fullmatch(schema["pattern"], room_id) is not None
    documented = documented and schema["minLength"] <= len(room_id) <= schema["maxLength"]
    assert documented == accepted(validate_room_id, room_id)


@pytest.mark.parametrize("name", ["Rotate", "a b", "x" * 128, "", "a:b", ":", "x" * 129])
def test_the_documented_job_name_is_the_naming_rule(name: str) -> None:
    schemas = build_openapi(ENDPOINTS, API_PREFIX)["components"]["schemas"]
    schema = schemas["JobRegisterIn"]["properties"]["name"]
    documented = re.fullmatch(schema["pattern"], name) is not None
    documented = documented and schema["minLength"] <= len(name) <= schema["maxLength"]
    assert documented == accepted(validate_job_name, name)


async def test_the_document_lists_this_hub_s_categories(settings) -> None:
    app = create_app(settings.model_copy(update={"allowed_categories": ["a", "b"]}))
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as http:
        document = await fetch_document(http)
    category = document["components"]["schemas"]["JobRegisterIn"]["properties"]["category"]
    assert category["enum"] == ["a", "b"]


async def test_operations_are_secured_and_list_their_errors(http: httpx.AsyncClient) -> None:
    document = await fetch_document(http)
    schemes = document["components"]["securitySchemes"]
    ((scheme_name, scheme),) = schemes.items()
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for endpoint in ENDPOINTS:
        path = openapi_path(API_PREFIX + endpoint.path)
        operation = document["paths"][path][endpoint.method.lower()]
        assert operation["security"] == [{scheme_name: []}]
        statuses = {int(status) for status in operation["responses"]}
        always = {401, 413, 422, 503}
        # A room door: a private room answers who may not read it 404, who may not act 403.
        rooms = {403, 404} if endpoint.room is not None else set()
        assert statuses - {200} == {endpoint.status, *endpoint.errors, *always, *rooms} - {200}
        for status in {*endpoint.errors, *always, *rooms}:
            content = operation["responses"][str(status)]["content"]
            assert content == {PROBLEM: {"schema": {"$ref": "#/components/schemas/ProblemOut"}}}
        path_params = {p["name"] for p in operation.get("parameters", ()) if p["in"] == "path"}
        assert path_params == {name.strip("{}") for name in path.split("/") if "{" in name}
        if endpoint.body is not None:
            assert "requestBody" in operation
        if endpoint.query is not None:
            query = {p["name"] for p in operation["parameters"] if p["in"] == "query"}
            assert query == set(endpoint.query.model_fields)


async def test_the_request_headers_each_handler_reads_are_documented(
    http: httpx.AsyncClient,
) -> None:
    document = await fetch_document(http)
    read_by_handlers = {}
    for endpoint in ENDPOINTS:
        source = inspect.getsource(endpoint.handler)
        read = {name.lower() for name in re.findall(r'req\.header\("([^"]+)"\)', source)}
        path = openapi_path(API_PREFIX + endpoint.path)
        operation = document["paths"][path][endpoint.method.lower()]
        documented = {
            p["name"].lower() for p in operation.get("parameters", ()) if p["in"] == "header"
        }
        assert documented == read, f"{endpoint.method} {endpoint.path}"
        if read:
            read_by_handlers[(endpoint.method, endpoint.path)] = read
    assert read_by_handlers[("POST", "/tasks/claim")] == {"idempotency-key"}
    assert read_by_handlers[("GET", "/tasks/{task_id}")] == {"prefer"}


async def test_every_served_route_is_documented_and_vice_versa(
    app: Any, http: httpx.AsyncClient
) -> None:
    document = await fetch_document(http)
    served = {(method, openapi_path(path)) for method, path in app.api.operations()}
    assert served
    assert "{full_name}" in "".join(path for _, path in served)
    assert not any(":path}" in path for path in document["paths"])
    assert served == documented_operations(document)
    assert documented_operations(document) == {
        (ep.method, openapi_path(API_PREFIX + ep.path)) for ep in ENDPOINTS
    }


async def test_documented_schemas_match_real_responses(
    http: httpx.AsyncClient, alice: ApiClient, bob: ApiClient, anonymous: ApiClient
) -> None:
    document = await fetch_document(http)
    room, job = "room1", "room1:modifiers:Rotate"

    async def check(client: ApiClient, method: str, path: str, actual: str, **kw: Any) -> Any:
        response = await client.request(method, actual, **kw)
        assert_matches(document, method, path, response)
        return response.json() if response.content else None

    worker = await check(alice, "POST", "/workers", "/workers")
    wid = worker["id"]
    await check(alice, "GET", "/workers", "/workers")
    await check(alice, "PATCH", "/workers/{worker_id}", f"/workers/{wid}")
    await check(alice, "PATCH", "/workers/{worker_id}", f"/workers/{wid}", json={"tasks": []})
    body = {"category": "modifiers", "name": "Rotate", "schema": {}, "worker_id": wid}
    await check(alice, "PUT", "/rooms/{room_id}/jobs", f"/rooms/{room}/jobs", json=body)
    await check(alice, "PUT", "/rooms/{room_id}/jobs", f"/rooms/{room}/jobs", json=body)
    await check(alice, "GET", "/rooms/{room_id}/jobs", f"/rooms/{room}/jobs")
    await check(alice, "GET", "/rooms/{room_id}/jobs/{full_name}", f"/rooms/{room}/jobs/{job}")
    await check(alice, "GET", "/rooms/{room_id}/workers", f"/rooms/{room}/workers")
    submit = "/rooms/{room_id}/tasks/{full_name}"
    task = await check(alice, "POST", submit, f"/rooms/{room}/tasks/{job}", json={"payload": {}})
    await check(alice, "GET", "/tasks/{task_id}", f"/tasks/{task['id']}")
    waited = {"Prefer": "wait=1"}  # a long-poll that times out: Preference-Applied
    await check(alice, "GET", "/tasks/{task_id}", f"/tasks/{task['id']}", headers=waited)
    await check(alice, "GET", "/rooms/{room_id}/tasks", f"/rooms/{room}/tasks")
    await check(
        alice,
        "GET",
        "/rooms/{room_id}/jobs/{full_name}/tasks",
        f"/rooms/{room}/jobs/{job}/tasks",
        params={"status": "pending"},
    )
    claimed = await check(alice, "POST", "/tasks/claim", "/tasks/claim", json={"worker_id": wid})
    token = claimed["task"]["claim_token"]
    await check(alice, "POST", "/tasks/claim", "/tasks/claim", json={"worker_id": wid})
    await check(
        alice, "POST", "/tasks/claim", "/tasks/claim", json={"worker_id": wid, "max_tasks": 5}
    )
    update = "/tasks/{task_id}"
    tid = task["id"]
    await check(alice, "PATCH", update, f"/tasks/{tid}", json={"status": "running"})
    await check(alice, "PATCH", update, f"/tasks/{tid}", json={"progress": 0.5})
    await check(
        alice,
        "PATCH",
        update,
        f"/tasks/{tid}",
        json={"status": "completed", "claim_token": token, "result": {"ok": [1, 2]}},
    )
    await check(alice, "GET", "/tasks/{task_id}", f"/tasks/{tid}")

    # Errors: problem documents valid against ProblemOut, with documented statuses.
    await check(anonymous, "GET", "/workers", "/workers")  # 401
    await check(alice, "GET", "/tasks/{task_id}", "/tasks/not-a-uuid")  # 422
    await check(alice, "PATCH", update, f"/tasks/{tid}", json={"status": "running"})  # 409
    await check(bob, "PATCH", "/workers/{worker_id}", f"/workers/{wid}")  # 403
    await check(alice, "PUT", "/rooms/{room_id}/jobs", "/rooms/a@b/jobs", json=body)  # 400
    missing = "room1:modifiers:Missing"
    await check(alice, "POST", submit, f"/rooms/{room}/tasks/{missing}", json={})  # 404
    await check(alice, "POST", submit, f"/rooms/{room}/tasks/{job}", content=b"[")  # 422
    await check(alice, "DELETE", "/workers/{worker_id}", f"/workers/{wid}")  # 204
    await check(alice, "DELETE", "/workers/{worker_id}", f"/workers/{wid}")  # 404


async def test_every_operation_documents_the_413_it_answers_to_an_oversized_body(
    app: Any, http: httpx.AsyncClient, alice: ApiClient
) -> None:
    """Any operation refuses a body over TASKHUB_MAX_BODY_BYTES (or its own bound: a
    provider's result), even one that reads none."""
    document = await fetch_document(http)
    for endpoint in ENDPOINTS:
        oversized = b"{" + b" " * endpoint.max_body(app.hub.settings) + b"}"
        path = openapi_path(endpoint.path)
        actual = path.format(**PATH_VALUES)
        headers = {"Content-Type": "application/json"}
        response = await alice.request(endpoint.method, actual, content=oversized, headers=headers)
        assert response.status_code == 413, (endpoint.method, path, response.text)
        assert_matches(document, endpoint.method, path, response)


def test_links_lead_to_operations_with_every_path_parameter_they_need() -> None:
    """A link names an operation of the document, gives each of its path parameters, and
    reads them from a property the linking answer really has."""
    document = build_openapi(ENDPOINTS, API_PREFIX)
    operations = {
        operation["operationId"]: (path, operation)
        for path, item in document["paths"].items()
        for operation in item.values()
    }
    schemas = document["components"]["schemas"]
    linked = set()
    for path, item in document["paths"].items():
        for operation in item.values():
            for status, response in operation["responses"].items():
                for link in response.get("links", {}).values():
                    linked.add(operation["operationId"])
                    target_path, _target = operations[link["operationId"]]
                    needed = set(re.findall(r"{(\w+)}", target_path))
                    assert set(link["parameters"]) == needed, (path, status, link)
                    answer = response["content"]["application/json"]["schema"]["$ref"]
                    for expression in link["parameters"].values():
                        if expression.startswith("$request.path."):
                            assert "{" + expression.removeprefix("$request.path.") + "}" in path
                            continue
                        pointer = expression.removeprefix("$response.body#/").split("/")
                        schema = schemas[answer.rsplit("/", 1)[-1]]
                        for key in pointer:
                            schema = schema["properties"][key]
                            options = [schema, *schema.get("anyOf", [])]
                            refs = [option["$ref"] for option in options if "$ref" in option]
                            if refs:
                                schema = schemas[refs[0].rsplit("/", 1)[-1]]
    assert linked == {"submit_task", "register_job", "create_worker", "claim_task"}
