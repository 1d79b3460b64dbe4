"""Every error is an RFC 9457 problem document: 401, 404, 405, 413, 422, and never a trace."""

import pytest

from taskhub import __version__
from tests.support.api import assert_problem

ENDPOINTS = [
    ("POST", "/workers"),
    ("GET", "/workers"),
    ("PATCH", "/workers/00000000-0000-0000-0000-000000000000"),
    ("DELETE", "/workers/00000000-0000-0000-0000-000000000000"),
    ("PUT", "/rooms/r/jobs"),
    ("GET", "/rooms/r/jobs"),
    ("GET", "/rooms/r/jobs/r:modifiers:X"),
    ("GET", "/rooms/r/jobs/r:modifiers:X/tasks"),
    ("GET", "/rooms/r/workers"),
    ("POST", "/rooms/r/tasks/r:modifiers:X"),
    ("POST", "/tasks/claim"),
    ("GET", "/tasks/00000000-0000-0000-0000-000000000000"),
    ("PATCH", "/tasks/00000000-0000-0000-0000-000000000000"),
    ("GET", "/rooms/r/tasks"),
]


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
async def test_every_endpoint_requires_a_token(anonymous, method, path):
    response = await anonymous.request(method, path, json={})
    assert_problem(response, 401, "unauthorized")
    assert response.headers["www-authenticate"] == "Bearer"


async def test_an_unknown_token_is_refused(http):
    response = await http.get("/v1/joblib/workers", headers={"Authorization": "Bearer th_nope"})
    assert_problem(response, 401, "unauthorized")


async def test_a_token_that_is_not_utf8_text_is_refused_like_an_unknown_one(http):
    """Header bytes outside UTF-8 (here a UTF-8-encoded lone surrogate) are not a token."""
    for token in (b"th_\xed\xa0\x80", b"th_\xff\xfe"):
        headers = {"Authorization": b"Bearer " + token}
        response = await http.get("/v1/joblib/workers", headers=headers)
        assert_problem(response, 401, "unauthorized")


async def test_unknown_route_is_a_problem(alice):
    assert_problem(await alice.get("/no/such/thing"), 404, "not-found")
    assert_problem(await alice.delete("/no/such/thing"), 404, "not-found")


async def test_wrong_method_is_a_problem(alice):
    response = await alice.delete("/tasks/claim")
    assert_problem(response, 405, "method-not-allowed")
    assert "POST" in response.headers["allow"]


async def test_oversized_body_is_refused(alice, settings):
    body = b'{"payload": {"x": "' + b"a" * settings.max_body_bytes + b'"}}'
    response = await alice.post(
        "/rooms/r/tasks/r:modifiers:X", content=body, headers={"content-type": "application/json"}
    )
    assert_problem(response, 413, "payload-too-large")


@pytest.mark.parametrize(("method", "path"), ENDPOINTS)
async def test_every_endpoint_refuses_a_body_declared_too_large(alice, settings, method, path):
    """Also those that read no body (e.g. ``POST /workers``): the limit is the hub's."""
    oversized = b"x" * (settings.max_body_bytes + 1)
    response = await alice.request(method, path, content=oversized)
    assert_problem(response, 413, "payload-too-large")


async def test_a_streamed_body_is_cut_off_at_the_limit(alice, settings):
    async def chunks():  # no Content-Length: the hub counts as it reads
        for _ in range(settings.max_body_bytes // 1000 + 2):
            yield b" " * 1000

    response = await alice.post("/rooms/r/tasks/r:modifiers:X", content=chunks())
    assert_problem(response, 413, "payload-too-large")


@pytest.mark.parametrize("body", [b"{not json", b"[]", b'"text"', b""])
async def test_malformed_body_is_422(alice, body):
    response = await alice.put("/rooms/r/jobs", content=body)
    assert_problem(response, 422, "validation-error")


async def test_schema_invalid_body_lists_the_failing_fields(alice):
    response = await alice.put("/rooms/r/jobs", json={"category": 5, "schema": []})
    problem = assert_problem(response, 422, "validation-error")
    locations = {tuple(error["loc"]) for error in problem["errors"]}
    assert ("body", "name") in locations
    assert ("body", "category") in locations
    assert ("body", "schema") in locations


@pytest.mark.parametrize("path", ["/tasks/not-a-uuid", "/workers/123"], ids=["task", "worker"])
async def test_bad_uuid_in_path_is_422(alice, path):
    method = "GET" if path.startswith("/tasks") else "PATCH"
    problem = assert_problem(await alice.request(method, path), 422, "validation-error")
    assert problem["errors"][0]["loc"][0] == "path"


@pytest.mark.parametrize(
    "query",
    [
        "limit=-1",
        "limit=501",
        "offset=-3",
        "offset=9223372036854775808",
        "limit=abc",
        "status=done",
    ],
)
async def test_bad_pagination_or_filter_is_422(alice, query):
    problem = assert_problem(await alice.get(f"/rooms/r/tasks?{query}"), 422, "validation-error")
    assert problem["errors"][0]["loc"][0] == "query"


async def test_health_endpoints_need_no_token(http):
    assert (await http.get("/healthz")).json() == {"status": "ok", "version": __version__}
    ready = await http.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"]["database"] == "ok"


async def test_readyz_is_not_ready_once_a_graceful_shutdown_begins(app, http):
    await app.begin_shutdown()
    problem = assert_problem(await http.get("/readyz"), 503, "not-ready")
    assert problem["detail"] == "shutting down"
    assert (await http.get("/healthz")).status_code == 200, "alive while it drains"
