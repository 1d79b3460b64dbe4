"""The jobs the chaos benchmark (``benchmarks/scenarios/chaos.py``) runs, and the ledger they write.

``ChaosWork`` is an SDK Extension, served by real ``taskhub worker
benchmarks.apps.chaos_jobs:ChaosWork`` processes; ``ChaosInternal`` an ``@internal`` job
(``TASKHUB_INTERNAL_JOB_MODULES=benchmarks.apps.chaos_jobs``), run by the taskiq worker. With
``CHAOS_LEDGER_DIR`` set, each process appends one JSON line per event to
``ledger-<pid>.jsonl`` there, flushed at once (what a process killed a moment later wrote
stays written):

- ``{"kind": "run", "task", "attempt", "token", "pid", "t"}``: an execution began (the
  worker's ``PATCH`` to ``running`` was accepted and ``run`` was entered);
- ``{"kind": "end", "task", "attempt", "token", "status", "outcome", "pid", "t"}``: the
  worker's terminal ``PATCH`` (``completed``/``failed``) got an answer: ``outcome`` is
  ``accepted`` (2xx), ``refused-409``, ``refused-404`` or the error's kind;
- ``{"kind": "internal", "task", "attempt", "pid", "t"}``: an ``@internal`` execution began.

The terminal ``PATCH`` is observed by wrapping ``WorkerApi``'s methods that send it in the
worker process (nothing of the SDK changes): its answer is the one the worker acted on. A ``2xx``
whose answer was lost on the wire, retried into a ``409``, shows as refused.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import IO, Any, ClassVar, TypeVar

from pydantic import Field

from taskhub.dispatch.definitions import InternalContext, InternalJob
from taskhub.sdk.api import WorkerApi
from taskhub.sdk.context import TaskContext
from taskhub.sdk.errors import ProblemError
from taskhub.sdk.extension import Extension
from taskhub.sdk.models import ClaimedTask

LEDGER_ENV = "CHAOS_LEDGER_DIR"
TERMINAL = ("completed", "failed")
T = TypeVar("T")

_lock = threading.Lock()
_file: list[IO[str]] = []
_tokens: dict[str, str | None] = {}  # task id -> claim token of its latest claim here


def record(entry: dict[str, Any]) -> None:
    """Append one ledger line (no-op without ``CHAOS_LEDGER_DIR``), flushed at once."""
    directory = os.environ.get(LEDGER_ENV)
    if not directory:
        return
    line = json.dumps({**entry, "pid": os.getpid(), "t": time.time()}) + "\n"
    with _lock:
        if not _file:
            _file.append(Path(directory, f"ledger-{os.getpid()}.jsonl").open("a"))  # noqa: SIM115 (kept open: one line per event)
        _file[0].write(line)
        _file[0].flush()


def _outcome(exc: BaseException) -> str:
    if isinstance(exc, ProblemError) and exc.status in (404, 409):
        return f"refused-{exc.status}"
    status = getattr(exc, "status", None)
    return f"{type(exc).__name__}-{status}" if status else type(exc).__name__


def _ledgered_update(original: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    """Wrap a ``WorkerApi`` method taking ``(task, body, …)``: a terminal ``body`` is
    recorded with its answer."""

    @functools.wraps(original)
    async def update(
        self: WorkerApi, task: ClaimedTask, body: dict[str, Any], *args: Any, **kwargs: Any
    ) -> T:
        _tokens[task.id] = task.claim_token
        status = body.get("status")
        if status not in TERMINAL:
            return await original(self, task, body, *args, **kwargs)
        entry = {"kind": "end", "task": task.id, "attempt": task.attempt}
        entry |= {"token": task.claim_token, "status": status}
        try:
            answer = await original(self, task, body, *args, **kwargs)
        except BaseException as exc:
            record({**entry, "outcome": _outcome(exc)})
            raise
        record({**entry, "outcome": "accepted"})
        _remember_tokens(answer)  # an end that also claimed the next tasks returns them
        return answer

    update.chaos_ledger = True  # type: ignore[attr-defined]
    return update


def _remember_tokens(answer: object) -> None:
    if isinstance(answer, list):
        for task in answer:
            if isinstance(task, ClaimedTask):
                _tokens[task.id] = task.claim_token


def _claim_with_tokens(original: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    @functools.wraps(original)
    async def claim(self: WorkerApi, *args: Any, **kwargs: Any) -> Any:
        claimed = await original(self, *args, **kwargs)
        _remember_tokens(claimed)
        return claimed

    return claim


def install_ledger() -> None:
    """Wrap the worker's terminal ``PATCH`` calls (``WorkerApi.update_task``, and
    ``end_task`` where the SDK has it) so that each lands in the ledger with its answer, and
    its claims so that claim tokens are known to ``ChaosWork.run``."""
    if getattr(WorkerApi.update_task, "chaos_ledger", False):
        return
    for name in ("update_task", "end_task"):
        method = getattr(WorkerApi, name, None)
        if method is not None:
            setattr(WorkerApi, name, _ledgered_update(method))
    WorkerApi.claim = _claim_with_tokens(WorkerApi.claim)  # type: ignore[method-assign,assignment]


class ChaosWork(Extension):
    """Sleep ``seconds`` (async: the worker's loop keeps heartbeating), return ``n``."""

    category: ClassVar[str] = "modifiers"
    seconds: float = Field(default=0.05, ge=0, le=60)
    n: int = 0

    async def run(self, ctx: TaskContext) -> dict[str, Any]:
        token = _tokens.get(ctx.task_id)
        record({"kind": "run", "task": ctx.task_id, "attempt": ctx.attempt, "token": token})
        await asyncio.sleep(self.seconds)
        return {"n": self.n}


class ChaosInternal(InternalJob):
    """An ``@internal`` job: record the execution, sleep ``seconds``."""

    category: ClassVar[str] = "modifiers"
    seconds: float = Field(default=0.2, ge=0, le=60)

    async def run(self, ctx: InternalContext) -> dict[str, Any]:
        record({"kind": "internal", "task": str(ctx.task_id), "attempt": ctx.attempt})
        await asyncio.sleep(self.seconds)
        return {"slept": self.seconds}


JOBS: list[type[InternalJob]] = [ChaosInternal]

if os.environ.get(LEDGER_ENV):
    install_ledger()
