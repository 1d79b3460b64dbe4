"""The job the page tests serve: a schema with every kind of field the form generates
(string, integer, enum, boolean, a nested object via ``$ref``, a list as a JSON field, an
optional string: ``anyOf`` with null),
and a run that reports progress a few times before it returns."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

from taskhub.sdk import Extension, TaskContext

STEP_SECONDS = 0.3


class Mode(StrEnum):
    fast = "fast"
    careful = "careful"


class Point(BaseModel):
    x: float = 0.0
    y: float = Field(0.0, ge=-100, le=100)


class Brew(Extension):
    """Brew a batch, one step at a time."""

    category = "analysis"

    label: str = Field(min_length=1, max_length=40, description="What to call the batch.")
    steps: int = Field(4, ge=1, le=50)
    mode: Mode = Mode.fast
    verbose: bool = False
    origin: Point = Point()
    tags: list[str] = []
    note: str | None = Field(None, max_length=80)

    def run(self, ctx: TaskContext) -> dict[str, Any]:
        for step in range(self.steps):
            ctx.progress(step / self.steps, f"step {step + 1} of {self.steps}")
            if ctx.wait_cancelled(STEP_SECONDS):
                return {"label": self.label, "stopped_at": step}
        return {"label": self.label.upper(), "steps": self.steps, "mode": self.mode.value}


class Ping(Extension):
    """Answer at once."""

    category = "modifiers"

    def run(self, ctx: TaskContext) -> str:
        return "pong"


class Narrate(Extension):
    """Log ``lines`` (``ctx.log``), one a step, then wait until cancelled (at most 20 s)."""

    category = "analysis"

    lines: list[str]

    def run(self, ctx: TaskContext) -> int:
        for line in self.lines:
            ctx.log(line, level="warning")
            if ctx.wait_cancelled(STEP_SECONDS):
                break
        ctx.wait_cancelled(20)
        return len(self.lines)
