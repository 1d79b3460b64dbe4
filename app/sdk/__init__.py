"""Taskhub's Python SDK: serve Extension classes as a worker, submit tasks as a client.

It speaks only the public protocol (REST + Socket.IO, see PROTOCOL.md)::

    from app.sdk import Client, Extension, TaskContext, Worker

    class Rotate(Extension):
        category = "modifiers"
        angle: float = 90.0

        def run(self, ctx: TaskContext) -> dict:
            return {"rotated_by": self.angle}

    Worker(url, token, [Rotate], room="lab").run_forever()          # a worker process
    Client(url, token).submit(Rotate(angle=45), room="lab").result()  # anywhere else
"""

from app.sdk.client import AsyncClient, AsyncTaskHandle, Client, TaskHandle
from app.sdk.context import TaskContext
from app.sdk.errors import (
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
from app.sdk.extension import Extension
from app.sdk.models import Task
from app.sdk.worker import Worker

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
