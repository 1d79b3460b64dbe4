"""What every Socket.IO event handler shares: the acknowledgement wrapper (every event is
answered, errors as problem objects), the readers of an event's fields, and the problems a
join answers."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any
from uuid import UUID

from taskhub.observability.request_id import bound, socket_request_id
from taskhub.rules.errors import DomainError, SocketGone, TooManyRooms, ValidationFailed
from taskhub.store.database import DatabaseUnavailable
from taskhub.transport.http.problems import database_unavailable_body, problem_body

log = logging.getLogger("taskhub.transport.sockets.handlers")
Ack = Callable[[str, Any], Awaitable[dict[str, Any]]]
# The most rooms one socket may be in (``room:…`` from room_join, ``jobs:…`` and
# ``worker:…`` from join_job_room, ``providers:…`` from join_provider_room; not the sid's
# own room). Each costs the server memory for as long as the socket lives (about 0.7 KB
# with a long room id), so without a cap one socket could hold gigabytes. A browser page
# is in one room, a worker in one job room per job it serves plus one per worker: 256 is
# far above either. A join beyond it gets a 429 ``too-many-rooms``; re-joining a room the
# socket is in is free, and leaving frees a place.
MAX_ROOMS_PER_SOCKET = 256


# The answer to a join whose socket went while it was handled (nobody receives it).
SOCKET_GONE = problem_body(
    SocketGone.status, SocketGone.slug, SocketGone.title, "The socket is gone."
)


TOO_MANY_ROOMS = problem_body(
    TooManyRooms.status,
    TooManyRooms.slug,
    TooManyRooms.title,
    f"A socket may be in at most {MAX_ROOMS_PER_SOCKET} rooms: leave one before joining another.",
)


def problem_of(exc: DomainError) -> dict[str, Any]:
    return problem_body(exc.status, exc.slug, exc.title, exc.detail, exc.errors)


def text_field(data: Any, name: str) -> str:
    value = data.get(name) if isinstance(data, dict) else None
    if not isinstance(value, str) or not value:
        raise ValidationFailed(
            f"{name} is required.", errors=[{"loc": ["data", name], "msg": "a string is required"}]
        )
    return value


def uuid_field(data: Any, name: str) -> UUID:
    try:
        return UUID(text_field(data, name))
    except ValueError:
        raise ValidationFailed(
            f"{name} must be a UUID.",
            errors=[{"loc": ["data", name], "msg": "Input should be a valid UUID"}],
        ) from None


def acknowledged(handler: Ack) -> Ack:
    """Every client event gets an answer: an unexpected error becomes a 500 problem (logged,
    no trace sent) instead of a client left waiting for an acknowledgement; a database that
    is unavailable, the same 503 ``database-unavailable`` problem as over HTTP. Log lines
    carry the connection's request id."""

    @functools.wraps(handler)
    async def answer(sid: str, data: Any = None, *extra: Any) -> dict[str, Any]:
        with bound(socket_request_id(sid)):
            try:
                if extra:
                    return problem_of(
                        ValidationFailed(
                            "Send one object as the event's data.",
                            errors=[{"loc": ["data"], "msg": "expected one argument"}],
                        )
                    )
                return await handler(sid, data)
            except DatabaseUnavailable as exc:
                log.warning("socket event %s: database unavailable: %s", handler.__name__, exc)
                return database_unavailable_body(exc)
            except Exception:
                log.exception("socket event %s failed", handler.__name__)
                return problem_body(
                    500,
                    "internal-error",
                    "Internal Server Error",
                    "The event could not be handled.",
                )

    return answer
