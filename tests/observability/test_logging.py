"""``TASKHUB_LOG_FORMAT``: text or JSON lines through one handler, uvicorn's own loggers
included, each line carrying the request id."""

from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path

import httpx

from taskhub.observability.logging import JsonFormatter, RequestIdFilter, SecretsFilter, log_config
from taskhub.observability.request_id import bound
from tests.support.server import run_async, running_hub
from tests.support.sockets import SocketProbe


def format_with(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RequestIdFilter())
    handler.setFormatter(formatter)
    handler.handle(record)
    return stream.getvalue().strip()


def record(
    name: str = "app.x", msg: str = "hello %s", args: tuple = ("world",)
) -> logging.LogRecord:
    return logging.LogRecord(name, logging.INFO, __file__, 1, msg, args, None)


def test_json_lines_have_the_documented_fields() -> None:
    with bound("req-1"):
        line = json.loads(format_with(JsonFormatter(), record()))
    assert line["level"] == "INFO"
    assert line["logger"] == "app.x"
    assert line["message"] == "hello world"
    assert line["request_id"] == "req-1"
    assert line["time"].endswith("+00:00")


def test_json_lines_carry_exception_text() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        failed = logging.LogRecord(
            "app.x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info()
        )
    line = json.loads(format_with(JsonFormatter(), failed))
    assert "ValueError: boom" in line["exception"]
    assert line["request_id"] is None


def test_text_lines_carry_the_request_id() -> None:
    text = log_config("text", "info")["formatters"]["taskhub"]
    formatter = logging.Formatter(text["format"], text["datefmt"])
    with bound("req-2"):
        assert "[req-2] hello world" in format_with(formatter, record())
    assert "[-] hello world" in format_with(formatter, record())


def test_tokens_never_reach_a_log_line() -> None:
    """At debug, uvicorn logs headers and WebSocket frames (Socket.IO's CONNECT included)."""
    token = "th_" + "x" * 43
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(SecretsFilter())
    for msg, args in [
        ("< %s: %s", ("authorization", "Bearer admintoken123")),
        ("< TEXT %r [%d bytes]", ('40{"token":"admintoken123"}', 27)),
        ("created %s", (token,)),
        ("Authorization: bearer admintoken123", ()),
    ]:
        handler.handle(record("uvicorn.error", msg, args))
    logged = stream.getvalue()
    assert "admintoken123" not in logged and token not in logged, logged
    assert logged.count("***") == 4, logged
    assert log_config("json", "debug", access_log=True)["handlers"]["stderr"]["filters"] == [
        "request_id",
        "secrets",
    ]


def test_tokens_in_any_argument_or_traceback_never_reach_a_log_line() -> None:
    """uvicorn's websockets logs each frame as ``< %s`` with a ``Frame`` object, not a str."""

    class Frame:
        def __str__(self) -> str:
            return 'TEXT \'40{"token":"admintoken123"}\' [27 bytes]'

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(SecretsFilter())
    handler.setFormatter(JsonFormatter())
    handler.handle(record("uvicorn.error", "< %s", (Frame(),)))
    handler.handle(record("uvicorn.error", "%s %s", ("one argument short",)))
    try:
        raise ValueError("Authorization: Bearer admintoken123")
    except ValueError:
        failed = logging.LogRecord("engineio.server", logging.ERROR, __file__, 1, "x", (), None)
        failed.exc_info = sys.exc_info()
    handler.handle(failed)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert "admintoken123" not in stream.getvalue(), stream.getvalue()
    assert lines[0]["message"] == '< TEXT \'40{"token":"***"}\' [27 bytes]'
    assert "one argument short" in lines[1]["message"]
    assert "ValueError: Authorization: Bearer ***" in lines[2]["exception"]


def test_uvicorn_loggers_write_through_the_same_handler() -> None:
    config = log_config("json", "warning")
    assert config["root"]["handlers"] == ["stderr"]
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        assert config["loggers"][name] == {"handlers": [], "level": "WARNING", "propagate": True}


def test_socketio_loggers_write_through_the_same_handler_per_packet_lines_from_debug() -> None:
    """No handler of python-socketio's or python-engineio's own (one would bypass the
    format and the secrets filter); their ``info`` lines (one a packet) only at debug."""
    for level, expected in (("debug", "DEBUG"), ("info", "WARNING"), ("error", "ERROR")):
        loggers = log_config("json", level)["loggers"]
        for name in ("socketio", "socketio.server", "engineio", "engineio.server"):
            assert loggers[name] == {"handlers": [], "level": expected, "propagate": True}


def test_a_debug_server_never_logs_a_socket_token(tmp_path: Path) -> None:
    """At debug uvicorn logs every websocket frame, Socket.IO's CONNECT with its auth."""
    with running_hub("sqlite", tmp_path, env={"TASKHUB_LOG_LEVEL": "debug"}) as server:
        token = server.create_user("bob")

        async def connect() -> None:
            async with SocketProbe("bob") as probe:
                await probe.connect(server.base_url, token)
                await probe.room_join("lab")

        run_async(connect())
        server.stop()
        output = server.output()
    assert '40{"token":"***"}' in output, output  # the CONNECT frame was logged, redacted
    assert token not in output


def test_websocket_connection_lines_follow_the_access_log(tmp_path: Path) -> None:
    """uvicorn writes a WebSocket's handshake, opening and closing at ``info``: the access
    log of sockets, kept only with ``TASKHUB_ACCESS_LOG`` (without it a page reconnecting
    often wrote most of the log). Other ``info`` lines of uvicorn stay."""
    outputs = {}
    for access_log in ("false", "true"):
        env = {"TASKHUB_LOG_LEVEL": "info", "TASKHUB_ACCESS_LOG": access_log}
        with running_hub("sqlite", tmp_path / access_log, env=env) as server:
            token = server.create_user("bob")

            async def connect(url: str = server.base_url, token: str = token) -> None:
                async with SocketProbe("bob") as probe:
                    await probe.connect(url, token)
                    await probe.room_join("lab")

            run_async(connect())
            server.stop()
            outputs[access_log] = server.output()
    for access_log, output in outputs.items():
        assert "Application startup complete" in output, output
        kept = access_log == "true"
        assert ('"WebSocket /socket.io/' in output) is kept, output
        assert ("connection open" in output) is kept, output


def test_a_json_server_writes_only_json_lines_with_request_ids(tmp_path: Path) -> None:
    env = {
        "TASKHUB_LOG_FORMAT": "json",
        "TASKHUB_LOG_LEVEL": "info",
        "TASKHUB_ACCESS_LOG": "true",
    }
    with running_hub("sqlite", tmp_path, env=env) as server:
        with httpx.Client(base_url=server.base_url, timeout=10, trust_env=False) as client:
            sent = client.get("/healthz", headers={"X-Request-ID": "probe-42"})
            generated = client.get("/v1/joblib/workers")  # a 401 problem, no id sent
            # engineio logs this error itself: through the JSON handler, not one of its own
            bad_transport = client.get("/socket.io/", params={"EIO": "4", "transport": "x"})
        assert bad_transport.status_code == 400
        assert sent.headers["x-request-id"] == "probe-42"
        assert generated.status_code == 401
        generated_id = generated.headers["x-request-id"]
        server.stop()
        output = server.output()

    # stdout's start-up banner is plain text; everything logged is one JSON object a line.
    logged = [
        line
        for line in output.splitlines()
        if line.strip() and not line.startswith(("Taskhub listening", "  "))
    ]
    parsed = [json.loads(line) for line in logged]
    assert all({"time", "level", "logger", "message", "request_id"} <= set(p) for p in parsed)
    loggers = {p["logger"] for p in parsed}
    assert "uvicorn.error" in loggers, output  # "Started server process", "Shutting down"
    assert any(
        p["logger"] == "engineio.server" and "Invalid transport" in p["message"] for p in parsed
    ), output
    access = [p for p in parsed if p["logger"] == "uvicorn.access"]
    by_id = {p["request_id"]: p for p in access}
    assert by_id["probe-42"]["path"] == "/healthz"
    assert by_id["probe-42"]["status"] == 200
    assert by_id[generated_id]["status"] == 401
