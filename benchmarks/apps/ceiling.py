"""The machine's ceiling: a trivial Starlette app speaking just the part of the Taskhub REST
contract the throughput benchmark uses, with tasks in a dict and no database.

Serve it with ``uvicorn benchmarks.apps.ceiling:app``; set ``BENCH_CEILING_TOKEN`` to the
bearer token it should accept (unset: any bearer token).
"""

from __future__ import annotations

import os
import uuid
from collections import deque
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

PREFIX = "/v1/joblib"
TRANSITIONS = {
    "pending": {"cancelled"},
    "claimed": {"running", "failed", "cancelled"},
    "running": {"completed", "failed", "cancelled"},
}
TERMINAL = {"completed", "failed", "cancelled"}


@dataclass
class Store:
    """Everything the app knows, in memory."""

    workers: dict[str, set[str]] = field(default_factory=dict)  # worker id -> job names
    queues: dict[str, deque[str]] = field(default_factory=dict)  # job name -> pending ids
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)


STORE = Store()
TOKEN = os.environ.get("BENCH_CEILING_TOKEN")


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _problem(status: int, name: str) -> Response:
    body = {"type": f"/v1/problems/{name}", "title": name, "status": status, "detail": name}
    return JSONResponse(body, status, media_type="application/problem+json")


def _authorised(request: Request) -> bool:
    header = request.headers.get("authorization", "")
    return header.startswith("Bearer ") and (TOKEN is None or header[7:] == TOKEN)


def _worker(worker_id: str) -> dict[str, Any]:
    return {"id": worker_id, "last_heartbeat": _now()}


async def healthz(_request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def create_worker(request: Request) -> Response:
    if not _authorised(request):
        return _problem(401, "unauthorized")
    worker_id = str(uuid.uuid4())
    STORE.workers[worker_id] = set()
    return JSONResponse(_worker(worker_id), 201)


async def worker_by_id(request: Request) -> Response:
    """Heartbeat (PATCH) or delete (DELETE) a worker."""
    if not _authorised(request):
        return _problem(401, "unauthorized")
    worker_id = request.path_params["worker_id"]
    if worker_id not in STORE.workers:
        return _problem(404, "worker-not-found")
    if request.method == "DELETE":
        del STORE.workers[worker_id]
        return Response(status_code=204)
    return JSONResponse(_worker(worker_id))


async def register_job(request: Request) -> Response:
    if not _authorised(request):
        return _problem(401, "unauthorized")
    body = await request.json()
    room = request.path_params["room_id"]
    full_name = f"{room}:{body['category']}:{body['name']}"
    worker_id = body.get("worker_id") or str(uuid.uuid4())
    STORE.workers.setdefault(worker_id, set()).add(full_name)
    STORE.queues.setdefault(full_name, deque())
    workers = [w for w, jobs in STORE.workers.items() if full_name in jobs]
    job = {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, full_name)),
        "room_id": room,
        "category": body["category"],
        "name": body["name"],
        "full_name": full_name,
        "schema": body.get("schema", {}),
        "workers": workers,
        "worker_id": worker_id,
    }
    return JSONResponse(job, 201)


async def submit_task(request: Request) -> Response:
    if not _authorised(request):
        return _problem(401, "unauthorized")
    body = await request.json()
    full_name = request.path_params["full_name"]
    queue = STORE.queues.get(full_name)
    if queue is None:
        return _problem(404, "job-not-found")
    task_id = str(uuid.uuid4())
    task = {
        "id": task_id,
        "job_name": full_name,
        "room_id": request.path_params["room_id"],
        "status": "pending",
        "created_at": _now(),
        "started_at": None,
        "completed_at": None,
        "worker_id": None,
        "error": None,
        "payload": body.get("payload", {}),
        "queue_position": len(queue) + 1,
    }
    STORE.tasks[task_id] = task
    queue.append(task_id)
    headers = {"Location": f"{PREFIX}/tasks/{task_id}", "Retry-After": "1"}
    return JSONResponse(task, 202, headers=headers)


async def claim_task(request: Request) -> Response:
    if not _authorised(request):
        return _problem(401, "unauthorized")
    worker_id = (await request.json())["worker_id"]
    jobs = STORE.workers.get(worker_id)
    if jobs is None:
        return _problem(404, "worker-not-found")
    for full_name in jobs:
        queue = STORE.queues[full_name]
        if queue:
            task = STORE.tasks[queue.popleft()]
            task.update(status="claimed", worker_id=worker_id, queue_position=None)
            return JSONResponse({"task": task})
    return JSONResponse({"task": None})


async def update_task(request: Request) -> Response:
    if not _authorised(request):
        return _problem(401, "unauthorized")
    task = STORE.tasks.get(request.path_params["task_id"])
    if task is None:
        return _problem(404, "task-not-found")
    body = await request.json()
    status = body.get("status")
    if status not in TRANSITIONS.get(task["status"], set()):
        return _problem(409, "invalid-task-transition")
    task["status"] = status
    if status == "running":
        task["started_at"] = _now()
    if status in TERMINAL:
        task["completed_at"] = _now()
        task["error"] = body.get("error")
    return JSONResponse(task)


app = Starlette(
    routes=[
        Route("/healthz", healthz, methods=["GET"]),
        Route(PREFIX + "/workers", create_worker, methods=["POST"]),
        Route(PREFIX + "/workers/{worker_id}", worker_by_id, methods=["PATCH", "DELETE"]),
        Route(PREFIX + "/rooms/{room_id}/jobs", register_job, methods=["PUT"]),
        Route(PREFIX + "/rooms/{room_id}/tasks/{full_name:path}", submit_task, methods=["POST"]),
        Route(PREFIX + "/tasks/claim", claim_task, methods=["POST"]),
        Route(PREFIX + "/tasks/{task_id}", update_task, methods=["PATCH"]),
    ]
)
