"""Log set-up for ``taskhub serve``: one handler on stderr for the application's and
uvicorn's loggers, in text or JSON lines (``TASKHUB_LOG_FORMAT``), each line carrying the
request id of the request or socket it was written for."""

from __future__ import annotations

import json
import logging
import logging.config
import re
from datetime import UTC, datetime
from typing import Any, Literal

from taskhub.observability.request_id import current_request_id

LogFormat = Literal["text", "json"]
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s] %(message)s"
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")
# python-socketio's and python-engineio's loggers (``create_app`` hands the ``.server`` ones
# to its server); their ``info`` lines are one per packet, so they show from ``debug`` on.
SOCKETIO_LOGGERS = ("socketio", "socketio.server", "engineio", "engineio.server")


class RequestIdFilter(logging.Filter):
    """Adds ``record.request_id`` (``-`` outside a request) without dropping anything."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = current_request_id.get() or "-"
        return True


_SECRETS = (
    (re.compile(r"(?i)\b(bearer)\s+[^\s\"',;]+"), r"\1 ***"),  # an Authorization header
    (re.compile(r'("token"\s*:\s*")[^"]*"'), r'\1***"'),  # Socket.IO's CONNECT auth
    (re.compile(r"\bth_[A-Za-z0-9_-]{16,}"), "th_***"),  # a token of Taskhub's own form
)


def redact(text: str) -> str:
    """``text`` with bearer tokens replaced by ``***``."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


_TRACEBACKS = logging.Formatter()  # formats exception text before it is redacted


class SecretsFilter(logging.Filter):
    """Redacts tokens from every record (at debug, uvicorn logs request headers and
    WebSocket frames, Socket.IO's CONNECT with its auth among them): its message as
    formatted (an argument may be any object, e.g. a websockets ``Frame``), its exception
    and stack text."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):  # keeps uvicorn's access fields (JSON) in place
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        try:
            message, broken = record.getMessage(), False
        except Exception:  # arguments that do not fit the message: both, as text
            message, broken = f"{record.msg} (arguments: {record.args!r})", True
        redacted = redact(message)
        if broken or redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = _TRACEBACKS.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


class WebSocketLinesFilter(logging.Filter):
    """Drops uvicorn's lines about each WebSocket connection (its handshake, accepted or
    refused, and its opening and closing, logged by uvicorn and the ``websockets`` library
    on ``uvicorn.error`` at ``info``): they are the access log of sockets, and follow
    ``TASKHUB_ACCESS_LOG`` like the access log of requests (without it, a page
    reconnecting often wrote most of the log)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name != "uvicorn.error" or record.levelno != logging.INFO:
            return True
        message = record.msg
        return not (
            isinstance(message, str)
            and (message.startswith('%s - "WebSocket %s"') or message in _WEBSOCKET_LINES)
        )


_WEBSOCKET_LINES = frozenset({"connection open", "connection closed"})


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC, ISO 8601), level, logger, message, request_id
    (null outside a request), and exception text when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        request_id = getattr(record, "request_id", None)
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": None if request_id in (None, "-") else request_id,
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple):
            line.update(_access_fields(record.args))
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:  # as SecretsFilter left it
            line["exception"] = record.exc_text
        if record.stack_info:
            line["stack"] = self.formatStack(record.stack_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def _access_fields(args: tuple[Any, ...]) -> dict[str, Any]:
    """uvicorn's access record args: client, method, path, HTTP version, status."""
    if len(args) != 5:
        return {}
    client, method, path, _version, status = args
    return {"client": client, "method": method, "path": path, "status": status}


def log_config(log_format: LogFormat, level: str, access_log: bool = False) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for the whole process, uvicorn included (uvicorn
    applies it in every worker process); ``access_log`` keeps the per-connection lines of
    WebSockets (``WebSocketLinesFilter``)."""
    formatter: dict[str, Any] = (
        {"()": JsonFormatter}
        if log_format == "json"
        else {"format": TEXT_FORMAT, "datefmt": "%Y-%m-%dT%H:%M:%S%z"}
    )
    level = level.upper()
    socketio_level = "WARNING" if level == "INFO" else level
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {
            "request_id": {"()": RequestIdFilter},
            "secrets": {"()": SecretsFilter},
            "websocket_lines": {"()": WebSocketLinesFilter},
        },
        "formatters": {"taskhub": formatter},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "taskhub",
                "filters": [
                    *([] if access_log else ["websocket_lines"]),
                    "request_id",
                    "secrets",
                ],
            }
        },
        "root": {"handlers": ["stderr"], "level": level},
        "loggers": {
            # uvicorn's and Socket.IO's loggers write through the root handler (no handlers
            # of their own: this also drops any stderr handler python-socketio or
            # python-engineio added to its default logger).
            **{
                name: {"handlers": [], "level": level, "propagate": True}
                for name in UVICORN_LOGGERS
            },
            **{
                name: {"handlers": [], "level": socketio_level, "propagate": True}
                for name in SOCKETIO_LOGGERS
            },
        },
    }


def configure_logging(log_format: LogFormat, level: str, access_log: bool = False) -> None:
    logging.config.dictConfig(log_config(log_format, level, access_log))
