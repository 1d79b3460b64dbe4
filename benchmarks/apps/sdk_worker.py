"""The no-op job of ``python -m benchmarks sdk``, served by real ``taskhub worker``
processes:

taskhub worker benchmarks.apps.sdk_worker:Noop --room ROOM --concurrency C
"""

from __future__ import annotations

from taskhub.sdk import Extension, TaskContext


class Noop(Extension):
    """Does nothing (a coroutine: no thread per run), so what is measured is the hub, the
    protocol and the SDK around the run."""

    category = "modifiers"

    async def run(self, ctx: TaskContext) -> None:
        return None
