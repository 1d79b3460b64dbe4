"""The scenarios' HTTP client of the hub's REST API: one keep-alive connection per client
(as separate worker processes would have), a request that fails on an error status, and
the job and workers most scenarios register."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import httpx
from sqlalchemy.exc import SQLAlchemyError

from benchmarks.harness.targets import Target, TargetError

API = "/v1/joblib"
JOB = {"category": "modifiers", "name": "Bench", "schema": {}}
REQUEST_TIMEOUT_SECONDS = 30.0
HEARTBEAT_SECONDS = 10.0


class BenchError(RuntimeError):
    """A request answered with an unexpected status."""


# What ends one target's run as error lines, the other targets still running.
RUN_FAILURES = (TargetError, BenchError, httpx.HTTPError, SQLAlchemyError, OSError)


def new_client(target: Target) -> httpx.AsyncClient:
    """A client with a single keep-alive connection: each submitter and worker has its own,
    as separate worker processes would."""
    return httpx.AsyncClient(
        base_url=target.base_url,
        headers={"Authorization": f"Bearer {target.token}"},
        limits=httpx.Limits(max_connections=1, max_keepalive_connections=1),
        timeout=REQUEST_TIMEOUT_SECONDS,
        trust_env=False,
    )


async def call(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[Any, float]:
    """One request; returns the decoded JSON body (None if empty) and the seconds it took."""
    start = time.perf_counter()
    response = await client.request(method, path, json=body)
    elapsed = time.perf_counter() - start
    if response.is_error:
        raise BenchError(f"{method} {path} -> {response.status_code}: {response.text[:300]}")
    return (response.json() if response.content else None), elapsed


async def register_workers(client: httpx.AsyncClient, room: str, count: int) -> list[str]:
    """Register the job ``count`` times without a worker id: each call creates a worker."""
    worker_ids = []
    for _ in range(count):
        job, _elapsed = await call(client, "PUT", f"{API}/rooms/{room}/jobs", JOB)
        worker_ids.append(job["worker_id"])
    return worker_ids


async def remove_workers(client: httpx.AsyncClient, worker_ids: list[str]) -> None:
    """Best effort: delete the run's workers (which also retires its job)."""
    for worker_id in worker_ids:
        with contextlib.suppress(BenchError, httpx.HTTPError):
            await call(client, "DELETE", f"{API}/workers/{worker_id}")


async def heartbeat(client: httpx.AsyncClient, worker_ids: list[str]) -> None:
    """Keep the workers alive through long runs, as a real worker would."""
    while True:
        await asyncio.sleep(HEARTBEAT_SECONDS)
        for worker_id in worker_ids:
            with contextlib.suppress(BenchError, httpx.HTTPError):
                await call(client, "PATCH", f"{API}/workers/{worker_id}")
