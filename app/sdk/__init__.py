"""Taskhub's Python SDK: serve Extension classes as a worker, submit tasks as a client.

It speaks only the public protocol (REST + Socket.IO, see docs/protocol.md)::

    from taskhub.sdk import Client, Extension, TaskContext, Worker

    class Spin(Extension):
        category = "modifiers"
        angle: float = 90.0

        def run(self, ctx: TaskContext) -> dict:
            return {"spun_by": self.angle}

    Worker(url, token, [Spin], room="lab").run_forever()          # a worker process
    Client(url, token).submit(Spin(angle=45), room="lab").result()  # anywhere else

Data on demand (docs/protocol.md, "Providers"): ``worker.provide(Frames, name="traj",
handler=trajectory)`` serves a ``Provider``'s reads; ``Client(url, token).read(
"lab:frames:traj", {"index": 3}, room="lab")`` reads, waiting for the answer.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from taskhub.sdk.context import TaskContext
from taskhub.sdk.errors import (
    AuthError,
    Conflict,
    HubUnavailable,
    InvalidTransition,
    NotFound,
    ProblemError,
    RetryLater,
    StaleClaim,
    TaskCancelled,
    TaskFailed,
    TaskhubError,
    WorkerNotFound,
)
from taskhub.sdk.extension import Extension
from taskhub.sdk.models import Task
from taskhub.sdk.provider import Provider

if TYPE_CHECKING:
    from taskhub.sdk.client import AsyncClient, AsyncTaskHandle, Client, TaskHandle
    from taskhub.sdk.worker import Worker

# Imported on first use: they pull in httpx, python-socketio's client and aiohttp, which
# the hub's own processes (``taskhub serve``, ``migrate``, ``users`` …) never need.
_LAZY = {
    "AsyncClient": "taskhub.sdk.client",
    "AsyncTaskHandle": "taskhub.sdk.client",
    "Client": "taskhub.sdk.client",
    "TaskHandle": "taskhub.sdk.client",
    "Worker": "taskhub.sdk.worker",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "AsyncClient",
    "AsyncTaskHandle",
    "AuthError",
    "Client",
    "Conflict",
    "Extension",
    "HubUnavailable",
    "InvalidTransition",
    "NotFound",
    "ProblemError",
    "Provider",
    "RetryLater",
    "StaleClaim",
    "Task",
    "TaskCancelled",
    "TaskContext",
    "TaskFailed",
    "TaskHandle",
    "TaskhubError",
    "Worker",
    "WorkerNotFound",
]
