"""The host's refusals as RFC 9457 problem documents (``application/problem+json``), the
shape Taskhub answers in, so a client reads both the same way."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response


class HostProblem(Exception):
    def __init__(self, status: int, slug: str, title: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.slug, self.title, self.detail = status, slug, title, detail

    def body(self) -> dict[str, Any]:
        return {
            "type": f"/problems/{self.slug}",
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
        }


def problem_response(problem: HostProblem) -> JSONResponse:
    return JSONResponse(
        problem.body(), status_code=problem.status, media_type="application/problem+json"
    )


async def host_problem(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, HostProblem)
    return problem_response(exc)


async def invalid_request(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    where = "; ".join(
        f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.errors()
    )
    return problem_response(HostProblem(422, "invalid-request", "Unprocessable Content", where))


Handler = Callable[[Request, Any], Coroutine[Any, Any, Response]]
EXCEPTION_HANDLERS: dict[int | type[Exception], Handler] = {
    HostProblem: host_problem,
    RequestValidationError: invalid_request,
}

ROOM_NOT_FOUND_TITLE = "Not Found"
ROOM_LOCKED_TITLE = "Locked"


def room_not_found(room_id: str) -> HostProblem:
    return HostProblem(
        404,
        "room-not-found",
        ROOM_NOT_FOUND_TITLE,
        f"No room {room_id!r} here: create it first (POST /rooms/{room_id}).",
    )


def room_locked(room_id: str) -> HostProblem:
    return HostProblem(
        423,
        "room-locked",
        ROOM_LOCKED_TITLE,
        f"Room {room_id!r} is locked for editing: send its Lock-Token header.",
    )
