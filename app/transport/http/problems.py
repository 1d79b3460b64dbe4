"""RFC 9457 problem details for every error, including the framework's own 404/405 and
unexpected 500s (which never leak a stack trace)."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from taskhub.rules.errors import (
    BadRequest,
    DomainError,
    Forbidden,
    MethodNotAllowed,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
)
from taskhub.store.database import DatabaseUnavailable

log = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"
# The framework's own error statuses, answered with the slug and title of the rules' error
# of that status; any other as ``http-error``.
FRAMEWORK_ERRORS: dict[int, type[DomainError]] = {
    error.status: error
    for error in (
        BadRequest,
        Unauthorized,
        Forbidden,
        NotFound,
        MethodNotAllowed,
        PayloadTooLarge,
        DomainError,
    )
}
DATABASE_UNAVAILABLE = "database-unavailable"
# When a client may try again after ``DatabaseUnavailable`` (a hint: the wait that timed
# out already lasted seconds).
DATABASE_RETRY_AFTER_SECONDS = 1


def problem_body(
    status: int, slug: str, title: str, detail: str, errors: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": f"/v1/problems/{slug}",
        "title": title,
        "status": status,
        "detail": detail,
    }
    if errors is not None:
        body["errors"] = errors
    return body


def problem_response(
    status: int,
    slug: str,
    title: str,
    detail: str,
    *,
    errors: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    return Response(
        orjson.dumps(problem_body(status, slug, title, detail, errors)),
        status_code=status,
        media_type=PROBLEM_MEDIA_TYPE,
        headers=headers,
    )


async def domain_error_handler(_request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DomainError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    if exc.retry_after is not None:
        headers = {"Retry-After": str(exc.retry_after)}
    return problem_response(
        exc.status, exc.slug, exc.title, exc.detail, errors=exc.errors, headers=headers
    )


async def http_error_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error = FRAMEWORK_ERRORS.get(exc.status_code)
    slug, title = (error.slug, error.title) if error is not None else ("http-error", "HTTP error")
    detail = exc.detail if exc.status_code != 404 else f"No route for {request.url.path}."
    if exc.status_code == 405:
        detail = f"{request.method} is not allowed on {request.url.path}."
    headers = dict(exc.headers) if exc.headers is not None else None
    return problem_response(exc.status_code, slug, title, str(detail), headers=headers)


async def client_gone_handler(request: Request, _exc: Exception) -> Response:
    """The client hung up while its request body was read: nobody is there to answer, and
    nothing went wrong here (not an internal error to log)."""
    log.debug("client disconnected during %s %s", request.method, request.url.path)
    return Response(status_code=499)


def database_unavailable_body(exc: DatabaseUnavailable) -> dict[str, Any]:
    """The 503 problem of ``exc`` (its detail says what timed out or went; no trace). The
    request did not take effect, or the client cannot know: it repeats it (a submit with
    its ``Idempotency-Key``, a claim with its key)."""
    return problem_body(503, DATABASE_UNAVAILABLE, "Service Unavailable", exc.detail)


async def database_unavailable_handler(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, DatabaseUnavailable)
    log.warning(
        "database unavailable on %s %s: %s (%s)",
        request.method,
        request.url.path,
        exc.detail,
        type(exc.__cause__).__name__,
    )
    return problem_response(
        503,
        DATABASE_UNAVAILABLE,
        "Service Unavailable",
        exc.detail,
        headers={"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)},
    )


async def unexpected_error_handler(request: Request, exc: Exception) -> Response:
    log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return problem_response(
        DomainError.status,
        DomainError.slug,
        DomainError.title,
        "The server failed to handle the request.",
    )


EXCEPTION_HANDLERS = {
    DomainError: domain_error_handler,
    HTTPException: http_error_handler,
    ClientDisconnect: client_gone_handler,
    DatabaseUnavailable: database_unavailable_handler,
    Exception: unexpected_error_handler,
}
