"""The jobs of ``python -m benchmarks logs``, served by a real ``taskhub worker`` process:

    taskhub worker benchmarks.apps.logs_worker:LogFlood benchmarks.apps.logs_worker:Noop \
        --room ROOM
"""

from __future__ import annotations

import time

from taskhub.sdk import Extension, TaskContext


class LogFlood(Extension):
    """Logs through ``ctx.log`` as fast as it can for ``seconds`` (a sync run, in its
    thread: the worker's loop ships meanwhile); returns how many lines it logged."""

    category = "modifiers"
    seconds: float = 5.0

    def run(self, ctx: TaskContext) -> int:
        count = 0
        end = time.monotonic() + self.seconds
        while time.monotonic() < end:
            for _ in range(100):
                ctx.log(f"line {count} of a flood of lines, some sixty characters long")
                count += 1
        return count


class Noop(Extension):
    """Does nothing but log ``lines`` lines (a coroutine: no thread per run)."""

    category = "modifiers"
    lines: int = 0

    async def run(self, ctx: TaskContext) -> None:
        for i in range(self.lines):
            ctx.log(f"step {i} done")
