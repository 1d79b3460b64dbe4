"""The ASGI application: REST routes, problem handlers, health, the room page."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from sqlalchemy import text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from app.domain.services.users import ensure_admin_token
from app.persistence.migrations import check_schema_current
from app.runtime import Hub
from app.settings import Settings
from app.transport.http import jobs, tasks, workers
from app.transport.http.problems import EXCEPTION_HANDLERS, problem_response

API_PREFIX = "/v1/joblib"
STATIC_DIR = Path(__file__).resolve().parent.parent / "static"
# Order matters: ".../jobs/{full_name}/tasks" must be tried before ".../jobs/{full_name}".
ENDPOINTS = [*tasks.api.endpoints, *jobs.api.endpoints, *workers.api.endpoints]


async def healthz(_request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def room_page(_request: Request) -> Response:
    return FileResponse(STATIC_DIR / "index.html")


async def readyz(request: Request) -> Response:
    hub: Hub = request.app.state.hub
    try:
        async with hub.db.read() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as exc:
        return problem_response(
            503, "not-ready", "Service Unavailable", f"database unreachable: {type(exc).__name__}"
        )
    return JSONResponse({"status": "ready", "checks": {"database": "ok"}})


def create_app(settings: Settings | None = None) -> Starlette:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        hub = Hub.create(settings)
        try:
            await check_schema_current(hub.db)
            if settings.admin_token:
                await ensure_admin_token(hub.db, settings.admin_token)
            app.state.hub = hub
            yield
        finally:
            await hub.close()

    api_routes = [
        Route(API_PREFIX + ep.path, ep.handler_endpoint, methods=[ep.method]) for ep in ENDPOINTS
    ]
    routes = [
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        *api_routes,
        Route("/", room_page, methods=["GET"]),
        Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
    ]
    return Starlette(routes=routes, exception_handlers=EXCEPTION_HANDLERS, lifespan=lifespan)
