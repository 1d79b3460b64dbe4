"""The servers of ``python -m benchmarks sdk``, each behind a request counter: Taskhub (as
``taskhub serve`` builds it, settings from the environment), the zndraw-joblib 0.1.7
reference server (its own router in a minimal FastAPI host, every request as one
superuser, on the SQLite file ``BENCH_REFERENCE_DATABASE_URL``), or the in-memory ceiling
app.

    python -m benchmarks.apps.sdk_servers taskhub|reference|ceiling --port PORT

The counter is plain ASGI in front of the app: it counts HTTP requests by kind (claim, task
PATCH, submit, heartbeat …) and answers ``GET /bench/requests`` with the counts so far, so
requests per task are counted at the hub, whatever client sent them. zndraw-joblib and
Taskhub each claim the name ``task`` in SQLModel's metadata: this module imports only the
one app it serves.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

LOCALHOST = "127.0.0.1"
COUNTS_PATH = "/bench/requests"
PREFIX = "/v1/joblib"


def request_kind(method: str, path: str) -> str:
    """What a request is, for the counts."""
    if path.startswith("/socket.io"):
        return "socketio"
    if not path.startswith(PREFIX):
        return f"{method} other"
    rest = path[len(PREFIX) :]
    if rest == "/tasks/claim":
        return "claim"
    if rest.startswith("/tasks/"):
        return "task_patch" if method == "PATCH" else f"task_{method.lower()}"
    if rest.startswith("/rooms/") and "/tasks" in rest:
        return "submit" if method == "POST" else "listing"
    if rest.startswith("/workers"):
        return "heartbeat" if method == "PATCH" else f"worker_{method.lower()}"
    return f"{method} other"


class Counting:
    """ASGI middleware counting HTTP requests by ``request_kind``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.counts: Counter[str] = Counter()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            if scope["path"] == COUNTS_PATH:
                await self._answer(send)
                return
            self.counts[request_kind(scope["method"], scope["path"])] += 1
        await self.app(scope, receive, send)

    async def _answer(self, send: Any) -> None:
        body = json.dumps(dict(self.counts)).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def taskhub_app() -> Any:
    from taskhub.main import create_app
    from taskhub.settings import Settings

    return create_app(Settings(), drain_on_signals=True, freeze_start_up=True)


def ceiling_app() -> Any:
    from benchmarks.apps.ceiling import app

    return app


def reference_app() -> Any:
    """zndraw-joblib's router in a minimal host: one superuser for every request (no token
    check, so the hub's own cost is the router's), no Socket.IO (its workers poll)."""
    from fastapi import FastAPI
    from sqlalchemy.ext.asyncio import async_sessionmaker
    from starlette.responses import PlainTextResponse
    from zndraw_auth import Base, User, current_active_user, current_superuser
    from zndraw_auth.db import create_engine_for_url
    from zndraw_auth.users import current_user_scoped_session
    from zndraw_joblib.exceptions import ProblemException, problem_exception_handler
    from zndraw_joblib.router import router
    from zndraw_joblib.settings import JobLibSettings

    url = os.environ["BENCH_REFERENCE_DATABASE_URL"]
    user_id = uuid.UUID(int=1)

    def the_user() -> Any:
        return User(
            id=user_id,
            email="bench@example.com",
            hashed_password="-",
            is_active=True,
            is_superuser=True,
            is_verified=True,
        )

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        engine = create_engine_for_url(url)
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        maker = async_sessionmaker(engine, expire_on_commit=False)
        async with maker() as session:
            session.add(the_user())
            await session.commit()
        app.state.engine = engine
        app.state.session_maker = maker
        app.state.joblib_settings = JobLibSettings()
        yield
        await engine.dispose()

    app = FastAPI(lifespan=lifespan)
    app.include_router(router)
    app.add_exception_handler(ProblemException, problem_exception_handler)
    for dependency in (current_active_user, current_superuser, current_user_scoped_session):
        app.dependency_overrides[dependency] = the_user
    app.add_api_route("/healthz", lambda: PlainTextResponse("ok"), methods=["GET"])
    return app


APPS = {"taskhub": taskhub_app, "reference": reference_app, "ceiling": ceiling_app}


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("app", choices=sorted(APPS))
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    app = Counting(APPS[args.app]())
    uvicorn.run(app, host=LOCALHOST, port=args.port, log_level=args.log_level, access_log=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
