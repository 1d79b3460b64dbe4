"""``X-Request-ID``: taken when well formed, generated otherwise, echoed on every response
(problems included) and carried by the log lines written while the request is handled."""

from __future__ import annotations

import io
import json
import logging
import re
from collections.abc import Iterator

import httpx
import pytest

from taskhub.observability.logging import JsonFormatter, RequestIdFilter
from taskhub.observability.request_id import accepted_request_id
from taskhub.services import task_reads

GENERATED = re.compile(r"[0-9a-f]{32}")


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The root logger also writes JSON lines (as ``taskhub serve`` does) into a buffer."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield stream
    finally:
        root.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


async def test_a_well_formed_incoming_id_is_echoed(http: httpx.AsyncClient) -> None:
    response = await http.get("/healthz", headers={"X-Request-ID": "edge-7f3a:retry.2_b"})
    assert response.headers["x-request-id"] == "edge-7f3a:retry.2_b"


async def test_an_id_is_generated_when_none_is_sent(http: httpx.AsyncClient) -> None:
    first, second = await http.get("/healthz"), await http.get("/healthz")
    assert GENERATED.fullmatch(first.headers["x-request-id"])
    assert first.headers["x-request-id"] != second.headers["x-request-id"]


@pytest.mark.parametrize(
    "incoming",
    ["", "has space", "semi;colon", "x" * 129, "naïve", "a\tb", "<script>", "a/b"],
)
async def test_a_malformed_incoming_id_is_replaced(http: httpx.AsyncClient, incoming) -> None:
    response = await http.get("/healthz", headers={"X-Request-ID": incoming.encode()})
    echoed = response.headers["x-request-id"]
    assert echoed != incoming
    assert GENERATED.fullmatch(echoed)


def test_accepted_ids_are_bounded_and_safe() -> None:
    assert accepted_request_id("a" * 128) == "a" * 128
    assert GENERATED.fullmatch(accepted_request_id("a" * 129))
    assert GENERATED.fullmatch(accepted_request_id(None))
    assert GENERATED.fullmatch(accepted_request_id("x\r\nSet-Cookie: a=b"))


async def test_problem_responses_carry_the_id(anonymous, http: httpx.AsyncClient) -> None:
    unauthorized = await anonymous.get("/workers", headers={"X-Request-ID": "req-401"})
    assert unauthorized.status_code == 401
    assert unauthorized.headers["x-request-id"] == "req-401"
    missing = await http.get("/no/such/route", headers={"X-Request-ID": "req-404"})
    assert missing.status_code == 404
    assert missing.headers["x-request-id"] == "req-404"


async def test_log_lines_of_a_failing_request_carry_its_id(
    app, tokens, json_log: io.StringIO, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_args: object, **_kwargs: object) -> None:
        raise RuntimeError("database on fire")

    monkeypatch.setattr(task_reads, "get_task", broken)
    # Starlette answers the 500, then re-raises for the server to log; take the answer.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://hub.test") as client:
        response = await client.get(
            "/v1/joblib/tasks/00000000-0000-0000-0000-000000000001",
            headers={"X-Request-ID": "req-500", "Authorization": f"Bearer {tokens.alice}"},
        )
    assert response.status_code == 500
    assert response.headers["x-request-id"] == "req-500"  # outside Starlette's error handler
    assert "database on fire" not in response.text
    errors = [line for line in lines(json_log) if line["level"] == "ERROR"]
    assert errors, json_log.getvalue()
    line = errors[0]
    assert line["request_id"] == "req-500"
    assert line["logger"] == "taskhub.transport.http.problems"
    assert "database on fire" in str(line["exception"])
    assert {"time", "level", "logger", "message", "request_id"} <= set(line)


async def test_log_lines_outside_requests_have_no_id(json_log: io.StringIO) -> None:
    logging.getLogger("taskhub.test").warning("between requests")
    (line,) = [line for line in lines(json_log) if line["logger"] == "taskhub.test"]
    assert line["request_id"] is None
    assert line["message"] == "between requests"


async def test_socket_handler_log_lines_carry_the_connection_id(app, json_log, monkeypatch) -> None:
    """A failing Socket.IO event is logged with ``sio-<sid>`` (here: its session cannot be
    read)."""

    async def broken(_sid: str) -> None:
        raise RuntimeError("the session store is broken")

    monkeypatch.setattr(app.sockets, "session_of", broken)
    handler = app.sio.handlers["/"]["join_job_room"]
    worker_id = "0192f0c4-0000-7000-8000-000000000001"
    ack = await handler("s1d-x", {"job_name": "lab:modifiers:R", "worker_id": worker_id})
    assert ack["status"] == 500
    (line,) = [line for line in lines(json_log) if line["level"] == "ERROR"]
    assert line["request_id"] == "sio-s1d-x"
    assert line["logger"] == "taskhub.transport.sockets.handlers"
