"""The zndraw-joblib 0.1.7 reference server of ``python -m benchmarks.scenarios.providers``:
its own router (providers included) in a minimal FastAPI host, as ZnDraw hosts it — a
Socket.IO server wrapped by zndraw-socketio for its events, ``join_provider_room`` /
``leave_provider_room`` entering and leaving ``providers:{name}`` (zndraw-joblib leaves both
to its host, which checks nothing), and ZnDraw's own ``RedisResultBackend`` (one pub/sub
subscription and one GET per waiting reader), ported here as it is. Every request is one
superuser's (no token check). SQLite at ``BENCH_REFERENCE_DATABASE_URL``, Redis at
``BENCH_REDIS_URL`` under the prefix ``BENCH_REDIS_PREFIX``.

    python -m benchmarks.apps.provider_reference --port PORT

Never imports Taskhub (zndraw-joblib's models and Taskhub's share SQLModel's metadata).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

LOCALHOST = "127.0.0.1"
NOTIFY_PREFIX = "notify:"


class RedisResultBackend:
    """ZnDraw's ``zndraw.result_backends.RedisResultBackend`` (its production backend for
    provider results), as it is: results with a TTL, SET NX in-flight locks, and a wait
    that subscribes to the key's channel, then checks the cache, then waits."""

    def __init__(self, redis: Any, key_prefix: str = "") -> None:
        self._redis = redis
        self._key_prefix = key_prefix

    def _namespaced_key(self, key: str) -> str:
        return f"{self._key_prefix}:{key}" if self._key_prefix else key

    async def store(self, key: str, data: bytes, ttl: int) -> None:
        await self._redis.set(self._namespaced_key(key), data, ex=ttl)

    async def get(self, key: str) -> bytes | None:
        value: bytes | None = await self._redis.get(self._namespaced_key(key))
        return value

    async def delete(self, key: str) -> None:
        await self._redis.delete(self._namespaced_key(key))

    async def acquire_inflight(self, key: str, ttl: int) -> bool:
        return bool(await self._redis.set(self._namespaced_key(key), b"1", nx=True, ex=ttl))

    async def release_inflight(self, key: str) -> None:
        await self._redis.delete(self._namespaced_key(key))

    async def wait_for_key(self, key: str, timeout: float) -> bytes | None:  # noqa: ASYNC109
        return await _pubsub_wait(
            self._redis.pubsub, self.get, key, self._namespaced_key(key), timeout
        )

    async def notify_key(self, key: str) -> None:
        await self._redis.publish(f"{NOTIFY_PREFIX}{self._namespaced_key(key)}", b"1")


async def _pubsub_wait(
    pubsub_factory: Callable[[], Any],
    get_fn: Callable[[str], Awaitable[bytes | None]],
    bare_key: str,
    channel_key: str,
    timeout: float,  # noqa: ASYNC109
) -> bytes | None:
    loop = asyncio.get_running_loop()
    async with pubsub_factory() as pubsub:
        await pubsub.subscribe(f"{NOTIFY_PREFIX}{channel_key}")
        cached = await get_fn(bare_key)
        if cached is not None:
            return cached
        deadline = loop.time() + timeout
        while (remaining := deadline - loop.time()) > 0:
            message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=remaining)
            if message is not None:
                return await get_fn(bare_key)
        return None


def reference_app() -> Any:
    import redis.asyncio as aioredis
    import socketio
    from fastapi import FastAPI
    from sqlalchemy.ext.asyncio import async_sessionmaker
    from starlette.responses import PlainTextResponse
    from zndraw_auth import Base, User, current_active_user, current_superuser
    from zndraw_auth.db import create_engine_for_url
    from zndraw_auth.users import current_user_scoped_session
    from zndraw_joblib.dependencies import get_result_backend
    from zndraw_joblib.exceptions import ProblemException, problem_exception_handler
    from zndraw_joblib.router import router
    from zndraw_joblib.settings import JobLibSettings
    from zndraw_socketio import AsyncServerWrapper

    url = os.environ["BENCH_REFERENCE_DATABASE_URL"]
    redis_client = aioredis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    backend = RedisResultBackend(redis_client, os.environ.get("BENCH_REDIS_PREFIX", ""))
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

    sio = socketio.AsyncServer(async_mode="asgi", cors_allowed_origins=[])
    tsio = AsyncServerWrapper(sio)

    @sio.on("join_provider_room")
    async def join_provider_room(sid: str, data: Any) -> None:
        await sio.enter_room(sid, f"providers:{data['provider_name']}")

    @sio.on("leave_provider_room")
    async def leave_provider_room(sid: str, data: Any) -> None:
        await sio.leave_room(sid, f"providers:{data['provider_name']}")

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
        app.state.tsio = tsio
        yield
        await engine.dispose()
        await redis_client.aclose()

    app = FastAPI(lifespan=lifespan)
    app.include_router(router)
    app.add_exception_handler(ProblemException, problem_exception_handler)
    for dependency in (current_active_user, current_superuser, current_user_scoped_session):
        app.dependency_overrides[dependency] = the_user
    app.dependency_overrides[get_result_backend] = lambda: backend
    app.add_api_route("/healthz", lambda: PlainTextResponse("ok"), methods=["GET"])
    return socketio.ASGIApp(sio, other_asgi_app=app)


def main(argv: list[str] | None = None) -> int:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    uvicorn.run(
        reference_app(),
        host=LOCALHOST,
        port=args.port,
        log_level=args.log_level,
        access_log=False,
        lifespan="on",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
