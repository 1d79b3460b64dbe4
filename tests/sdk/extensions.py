"""Extensions the SDK tests serve, in-process or in ``taskhub worker`` subprocesses.

In-process tests coordinate with runs through module-level registries keyed by a
per-test ``key`` field (gates to release a run, events a run sets, records it leaves).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import defaultdict
from typing import Any

from pydantic import BaseModel

from taskhub.sdk import Extension, RetryLater, TaskContext

GATES: defaultdict[str, threading.Event] = defaultdict(threading.Event)
STARTED: defaultdict[str, threading.Event] = defaultdict(threading.Event)
OBSERVED_CANCEL: defaultdict[str, threading.Event] = defaultdict(threading.Event)
BARRIERS: dict[str, threading.Barrier] = {}
ACTIVE: defaultdict[str, list[int]] = defaultdict(lambda: [0, 0])  # [now, max]
LOCK = threading.Lock()


class Echo(Extension):
    """Returns its input and what the run saw of its task."""

    category = "analysis"
    text: str = ""

    def run(self, ctx: TaskContext) -> dict[str, Any]:
        return {"echo": self.text, "task_id": ctx.task_id, "room_id": ctx.room_id, "sync": True}


class AsyncEcho(Extension):
    """``Echo`` as a coroutine."""

    category = "analysis"
    name = "EchoAsync"
    text: str = ""

    async def run(self, ctx: TaskContext) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"echo": self.text, "task_id": ctx.task_id, "sync": False}


class Boom(Extension):
    """Always fails."""

    category = "modifiers"
    message: str = "boom"

    def run(self, ctx: TaskContext) -> Any:
        raise ValueError(self.message)


class Flaky(Extension):
    """Asks for a retry until its ``attempt`` reaches ``succeed_on``."""

    category = "modifiers"
    succeed_on: int = 2

    def run(self, ctx: TaskContext) -> Any:
        if ctx.attempt < self.succeed_on:
            raise RetryLater(f"attempt {ctx.attempt} is too early")
        return {"attempt": ctx.attempt}


class Slow(Extension):
    """Sleeps ``seconds`` (stopping early when cancelled); for worker subprocesses."""

    category = "modifiers"
    seconds: float = 1.0

    def run(self, ctx: TaskContext) -> dict[str, Any]:
        ctx.progress(0.0, "sleeping")
        cancelled = ctx.wait_cancelled(self.seconds)
        return {"slept": self.seconds, "cancelled": cancelled}


class Gate(Extension):
    """Reports progress, then waits until the test opens its gate (or it is cancelled)."""

    category = "modifiers"
    key: str

    def run(self, ctx: TaskContext) -> str:
        ctx.progress(0.5, "waiting at the gate")
        STARTED[self.key].set()
        deadline = time.monotonic() + 30
        while not GATES[self.key].is_set() and time.monotonic() < deadline:
            if ctx.wait_cancelled(0.02):
                OBSERVED_CANCEL[self.key].set()
                return "stopped early"
        return "passed"


class Stubborn(Extension):
    """Looks at cancellation only between long chunks of work: waits at the gate of its
    attempt (``{key}-{attempt}``), then returns its attempt, or "stopped" if cancelled."""

    category = "modifiers"
    key: str

    def run(self, ctx: TaskContext) -> Any:
        at = f"{self.key}-{ctx.attempt}"
        STARTED[at].set()
        GATES[at].wait(30)
        return "stopped" if ctx.cancelled else {"attempt": ctx.attempt}


class AsyncSpin(Extension):
    """Spins until cancelled (observed with ``await ctx.wait_cancelled_async``)."""

    category = "modifiers"
    key: str

    async def run(self, ctx: TaskContext) -> str:
        STARTED[self.key].set()
        if await ctx.wait_cancelled_async(30):
            OBSERVED_CANCEL[self.key].set()
            return "stopped early"
        return "never cancelled"


class Overlap(Extension):
    """Meets ``parties - 1`` other runs at a barrier: completes only if they run at once."""

    category = "analysis"
    key: str

    def run(self, ctx: TaskContext) -> dict[str, float]:
        with LOCK:
            counts = ACTIVE[self.key]
            counts[0] += 1
            counts[1] = max(counts[1], counts[0])
        try:
            started = time.monotonic()
            BARRIERS[self.key].wait(timeout=10)
            time.sleep(0.05)
            return {"started": started, "ended": time.monotonic()}
        finally:
            with LOCK:
                ACTIVE[self.key][0] -= 1


class Shape(BaseModel):
    corners: int
    label: str


class Results(Extension):
    """Returns a pydantic model (sent as JSON), or something JSON cannot carry."""

    category = "analysis"
    opaque: bool = False

    def run(self, ctx: TaskContext) -> Any:
        return object() if self.opaque else Shape(corners=4, label="square")


class Chatty(Extension):
    """Reports progress with a message longer than the hub takes, waits at its gate, then
    reports again and waits at its second gate (``{key}-end``)."""

    category = "analysis"
    key: str
    message_length: int = 1_500

    def run(self, ctx: TaskContext) -> str:
        ctx.progress(0.2, "m" * self.message_length)
        STARTED[self.key].set()
        GATES[self.key].wait(30)
        ctx.progress(0.9, "short")
        GATES[f"{self.key}-end"].wait(30)
        return "said"


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for this one")


class Odd(Extension):
    """Ends in a way that is awkward to report: a result that is not JSON, or an
    exception whose text is not plain."""

    category = "analysis"
    kind: str

    def run(self, ctx: TaskContext) -> Any:
        results = {"nan": float("nan"), "bytes": b"\x00\xff", "surrogate": "\ud800"}
        results["nul"] = {"text": "a\x00b"}  # JSON, but the hub refuses U+0000
        if self.kind in results:
            return results[self.kind]
        if self.kind == "nul-error":
            raise ValueError("a\x00b")
        if self.kind == "bad-str":
            raise BadStr()
        ctx.progress(0.5, 123)  # type: ignore[arg-type]  # not a str: sent as text
        return "reported"


class AsyncCancels(Extension):
    """Its own code raises ``CancelledError`` (e.g. awaiting a task it cancelled)."""

    category = "analysis"

    async def run(self, ctx: TaskContext) -> Any:
        inner = asyncio.create_task(asyncio.sleep(10))
        inner.cancel()
        return await inner


class SharedFairly(Extension):
    """A job whose tasks are shared round-robin over submitters, two at most running each."""

    category = "analysis"
    claim_order = "fair-by-submitter"
    max_running_per_submitter = 2
    text: str = ""

    def run(self, ctx: TaskContext) -> str:
        return self.text
