"""Hostile input for every documented operation, sent as an authenticated user: the hub never
answers 5xx, every 4xx is a problem document, and a rejected request changes nothing."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from taskhub.main import API_PREFIX, ENDPOINTS
from taskhub.store.tables import Job, Task, Worker, WorkerJobLink
from taskhub.transport.http.api import MAX_JSON_DEPTH
from taskhub.transport.http.openapi import build_openapi
from tests.support.api import ApiClient
from tests.support.properties import examples

DOCUMENT = build_openapi(ENDPOINTS, API_PREFIX)
OPERATIONS = [
    (method.upper(), path, operation)
    for path, item in DOCUMENT["paths"].items()
    for method, operation in item.items()
]
# State a rejected request must leave alone (users and tokens are not touched by the API).
STATE_TABLES = (Worker, Job, WorkerJobLink, Task)
ROOM, JOB = "room1", "room1:modifiers:Rotate"

HOSTILE_TEXT = st.one_of(
    st.text(max_size=40),
    st.text(alphabet="@:%/?#&=. \\", max_size=12),
    st.sampled_from(
        ["", "@", ":", "%3A", "%2F", "@global", "@internal", "@global:x", "a:b", "..", "%"]
    ),
    st.sampled_from(["\u0000", "\ud7ff", "\U0001f600", "Ω≈ç√", "\u202e", "\ufeff"]),
    st.integers(min_value=300, max_value=5000).map(lambda n: "x" * n),
    st.integers(min_value=10, max_value=300).map(lambda n: "@:" * n),
)
JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    HOSTILE_TEXT,
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
FIELD_NAMES = st.sampled_from(
    [
        "category",
        "name",
        "schema",
        "schema_",
        "worker_id",
        "payload",
        "max_tasks",
        "status",
        "error",
        "claim_token",
        "result",
        "progress",
        "progress_message",
        "tasks",
    ]
)
STATUSES = st.sampled_from(
    ["pending", "claimed", "running", "completed", "failed", "cancelled", "PENDING", ""]
)


def path_values(known: dict[str, str]) -> dict[str, st.SearchStrategy[str]]:
    """Per path parameter: mostly hostile, sometimes a real value (so deeper code runs)."""
    return {
        "room_id": st.one_of(st.sampled_from([ROOM, "@global", "@internal"]), HOSTILE_TEXT),
        "full_name": st.one_of(
            st.sampled_from([JOB, "@global:modifiers:x", "@internal:analysis:y", "a/b:c:d"]),
            HOSTILE_TEXT,
        ),
        "task_id": st.one_of(st.just(known["task_id"]), st.uuids().map(str), HOSTILE_TEXT),
        "worker_id": st.one_of(st.just(known["worker_id"]), st.uuids().map(str), HOSTILE_TEXT),
        "provider_id": st.one_of(st.uuids().map(str), HOSTILE_TEXT),
        "kind": st.one_of(st.sampled_from(["user", "group"]), HOSTILE_TEXT),
        "subject": st.one_of(st.uuids().map(str), st.just("physics"), HOSTILE_TEXT),
    }


def bodies(known: dict[str, str]) -> st.SearchStrategy[tuple[str, Any]]:
    """("json", value) or ("raw", bytes): random JSON, near-miss objects, and non-JSON."""
    near_values = st.one_of(
        JSON_VALUES, STATUSES, st.sampled_from([known["worker_id"], known["task_id"]])
    )
    return st.one_of(
        st.tuples(st.just("json"), JSON_VALUES),
        st.tuples(st.just("json"), st.dictionaries(FIELD_NAMES, near_values, max_size=5)),
        st.tuples(st.just("raw"), st.binary(max_size=200)),
        st.tuples(
            st.just("raw"),
            st.sampled_from([b"", b"{", b"[]", b"null", b"\xff\xfe", b'{"a":1}' * 2, b"1e999"]),
        ),
    )


QUERIES = st.dictionaries(
    st.one_of(st.sampled_from(["limit", "offset", "status"]), st.text(max_size=8)),
    st.one_of(
        HOSTILE_TEXT,
        STATUSES,
        st.integers(min_value=-(2**70), max_value=2**70).map(str),
    ),
    max_size=4,
)


def encode_segment(value: str, how: str) -> str:
    if how == "quote-all":
        return quote(value, safe="")
    if how == "keep-@:%":
        return quote(value, safe="@:%")
    return quote(value, safe="@:/")


async def snapshot(app: Any) -> dict[str, list[str]]:
    async with app.hub.db.read() as conn:
        state = {}
        for model in STATE_TABLES:
            rows = (await conn.execute(select(model.__table__))).all()  # type: ignore[attr-defined]
            state[model.__tablename__] = sorted(repr(tuple(row)) for row in rows)
        return state


async def seed(alice: ApiClient) -> dict[str, str]:
    worker = (await alice.post("/workers")).json()
    await alice.register(ROOM, worker_id=worker["id"])
    task = await alice.submit(JOB, ROOM)
    return {"worker_id": worker["id"], "task_id": task["id"]}


def assert_problem(response: httpx.Response) -> None:
    assert response.headers["content-type"].startswith("application/problem+json"), (
        response.status_code,
        response.text,
    )
    problem = response.json()
    for key, kind in (("type", str), ("title", str), ("status", int), ("detail", str)):
        assert isinstance(problem.get(key), kind), problem
    assert problem["status"] == response.status_code
    assert "Traceback" not in response.text


@pytest.fixture
async def known(alice: ApiClient) -> dict[str, str]:
    """A worker, a job and a pending task of alice's, so real ids can be drawn too."""
    return await seed(alice)


@pytest.mark.parametrize(
    ("method", "path", "operation"),
    OPERATIONS,
    ids=[operation["operationId"] for _, _, operation in OPERATIONS],
)
@settings(
    max_examples=examples(80),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
async def test_hostile_input_is_rejected_cleanly(
    app: Any,
    http: httpx.AsyncClient,
    alice: ApiClient,
    known: dict[str, str],
    method: str,
    path: str,
    operation: Any,
    data: st.DataObject,
) -> None:
    # The fixtures live across examples on purpose: state accumulates, as on a real hub.
    strategies = path_values(known)
    names = [p["name"] for p in operation.get("parameters", ()) if p["in"] == "path"]
    segments = data.draw(st.fixed_dictionaries({name: strategies[name] for name in names}))
    encoding = data.draw(st.sampled_from(["quote-all", "keep-@:%", "keep-@:/"]))
    body_strategy = bodies(known)
    if "requestBody" not in operation:
        body_strategy = st.none() | body_strategy
    body = data.draw(body_strategy)
    query = data.draw(QUERIES)

    url = path
    for name, value in segments.items():
        url = url.replace("{" + name + "}", encode_segment(value, encoding))
    kwargs: dict[str, Any] = {"params": query, "headers": alice.headers}
    if body is not None:
        kind, value = body
        kwargs["json" if kind == "json" else "content"] = value
    before = await snapshot(app)
    response = await http.request(method, url, **kwargs)
    assert response.status_code < 500, (method, url, response.status_code, response.text)
    if response.status_code >= 400:
        assert_problem(response)
        assert await snapshot(app) == before, (method, url, response.status_code)


NUL_CASES = [
    ("GET", "/rooms/a%00b/tasks", None),
    ("GET", "/rooms/a%00b/workers", None),
    ("GET", "/rooms/a%00b/jobs", None),
    ("GET", f"/rooms/{ROOM}/jobs/{ROOM}:modifiers:x%00/tasks", None),
    ("GET", f"/rooms/{ROOM}/jobs/{ROOM}:modifiers:x%00", None),
    ("PUT", "/rooms/a%00b/jobs", {"category": "modifiers", "name": "x", "schema": {}}),
    ("PUT", f"/rooms/{ROOM}/jobs", {"category": "modifiers", "name": "x\u0000", "schema": {}}),
    ("PUT", f"/rooms/{ROOM}/jobs", {"category": "modifiers", "name": "x", "schema": {"\u0000": 1}}),
    ("POST", f"/rooms/{ROOM}/tasks/{JOB}", {"payload": {"text": "a\u0000b"}}),
    ("POST", f"/rooms/a%00b/tasks/{JOB}", {"payload": {}}),
]


@pytest.mark.parametrize(("method", "path", "body"), NUL_CASES)
async def test_nul_characters_are_a_422_not_a_500(
    app: Any, alice: ApiClient, known: dict[str, str], method: str, path: str, body: Any
) -> None:
    """Found by the fuzzer: PostgreSQL rejects U+0000 in text and jsonb (it was a 500)."""
    before = await snapshot(app)
    response = await alice.request(method, path, json=body)
    assert response.status_code == 422, response.text
    assert_problem(response)
    assert await snapshot(app) == before


@pytest.mark.parametrize(
    "body",
    [
        {"status": "completed", "result": {"text": "a\u0000b"}},
        {"progress": 0.5, "progress_message": "a\u0000b"},
        {"status": "failed", "error": "kept", "progress_message": "a\u0000b"},
    ],
)
async def test_nul_in_a_task_update_is_a_422(
    alice: ApiClient, known: dict[str, str], body: dict[str, Any]
) -> None:
    """(Only a failure report's ``error`` is kept, its NUL replaced: ``test_tasks.py``.)"""
    response = await alice.patch(f"/tasks/{known['task_id']}", json=body)
    assert response.status_code == 422, response.text
    assert_problem(response)


def nested(levels: int) -> Any:
    """``levels`` objects, each inside the one before."""
    value: Any = 1
    for _ in range(levels):
        value = {"a": value}
    return value


# The body object is the first level: a payload, schema or result adds its own below it.
TOO_DEEP = nested(MAX_JSON_DEPTH)
DEEP_CASES = [
    ("POST", f"/rooms/{ROOM}/tasks/{JOB}", {"payload": TOO_DEEP}),
    ("POST", f"/rooms/{ROOM}/tasks/{JOB}", {"payload": {"list": [[[TOO_DEEP]]]}}),
    ("PUT", f"/rooms/{ROOM}/jobs", {"category": "modifiers", "name": "x", "schema": TOO_DEEP}),
]


@pytest.mark.parametrize(("method", "path", "body"), DEEP_CASES)
async def test_json_nested_too_deep_is_a_422(
    app: Any, alice: ApiClient, known: dict[str, str], method: str, path: str, body: Any
) -> None:
    """Found by an audit: a payload 256 levels deep was stored, then every answer that
    carried it (the submit's own, lists, the claim) was a 500."""
    before = await snapshot(app)
    response = await alice.request(method, path, json=body)
    assert response.status_code == 422, response.text
    assert_problem(response)
    assert await snapshot(app) == before


async def test_a_result_nested_too_deep_is_a_422(alice: ApiClient, known: dict[str, str]) -> None:
    claimed = await alice.claim(known["worker_id"])
    await alice.transition(claimed["id"], "running")
    response = await alice.patch(
        f"/tasks/{claimed['id']}", json={"status": "completed", "result": TOO_DEEP}
    )
    assert response.status_code == 422, response.text
    assert (await alice.task(claimed["id"]))["status"] == "running"


async def test_json_as_deep_as_allowed_goes_everywhere(
    alice: ApiClient, known: dict[str, str]
) -> None:
    deepest = nested(MAX_JSON_DEPTH - 1)
    response = await alice.post(f"/rooms/{ROOM}/tasks/{JOB}", json={"payload": deepest})
    assert response.status_code == 202, response.text
    listed = (await alice.get(f"/rooms/{ROOM}/tasks")).json()["items"]
    assert deepest in [task["payload"] for task in listed]
    while (claimed := await alice.claim(known["worker_id"]))["payload"] != deepest:
        await alice.transition(claimed["id"], "cancelled")
    await alice.transition(claimed["id"], "running")
    done = await alice.transition(claimed["id"], "completed", result=deepest)
    assert done.status_code == 200 and done.json()["result"] == deepest
