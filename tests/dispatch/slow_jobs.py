"""Extra ``@internal`` jobs for the process-level tests, loaded by both the server and the
taskiq worker with ``TASKHUB_INTERNAL_JOB_MODULES=tests.dispatch.slow_jobs``.

Each leaves a trace in a file the test names, so a test can see that (and how often) a job
really ran in the other process.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field

from taskhub.dispatch.definitions import InternalContext, InternalJob

MODULE = __name__


class Sleep(InternalJob):
    """Sleep ``seconds``, then touch ``marker`` (when given): the run reached its end."""

    category: ClassVar[str] = "modifiers"
    seconds: float = Field(ge=0, le=60)
    marker: str | None = None

    async def run(self, ctx: InternalContext) -> dict[str, Any]:
        await asyncio.sleep(self.seconds)
        if self.marker:
            await asyncio.to_thread(Path(self.marker).touch)
        return {"slept": self.seconds}


class Tally(InternalJob):
    """Append one line (the task id) to ``path`` per run: the file counts the executions."""

    category: ClassVar[str] = "modifiers"
    path: str

    def run(self, ctx: InternalContext) -> dict[str, Any]:
        with Path(self.path).open("a") as tally:
            tally.write(f"{ctx.task_id}\n")
        return {"runs": len(Path(self.path).read_text().splitlines())}


class NotJson(InternalJob):
    """Return what JSON cannot hold (a set)."""

    category: ClassVar[str] = "modifiers"

    def run(self, ctx: InternalContext) -> dict[str, Any]:
        return {"tags": {"a", "b"}}


JOBS: list[type[InternalJob]] = [Sleep, Tally, NotJson]
