"""An ``async`` job that reports progress every second and stops when cancelled.

    taskhub worker examples.countdown:Countdown --token $T --room lab

Cancel a running countdown from the browser (or ``PATCH /v1/joblib/tasks/{id}`` with
``{"status": "cancelled"}``): ``wait_cancelled_async`` returns True at once and the run
ends; the worker drops its outcome, the task stays CANCELLED.
"""

from __future__ import annotations

from pydantic import Field

from taskhub.sdk import Extension, TaskContext


class Countdown(Extension):
    """Count down from ``seconds`` to zero."""

    category = "analysis"

    seconds: int = Field(10, ge=1, le=3600)

    async def run(self, ctx: TaskContext) -> dict[str, int]:
        for left in range(self.seconds, 0, -1):
            ctx.progress(1 - left / self.seconds, f"{left}s left")
            if await ctx.wait_cancelled_async(1.0):  # an interruptible sleep
                return {"stopped_at": left}
        return {"stopped_at": 0}
