"""Whether the event loop kept serving while a test's work ran on a thread beside it.

A loaded machine can hold any thread up for a while, so the tests do not compare gaps with
the work's duration: they count the loop's turns inside the span of the work itself. Work
run on the loop leaves no turn inside its span; work run beside it leaves many."""

import asyncio
import contextlib
import functools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass
class Turns:
    """When a 5 ms ticker on the loop woke up."""

    times: list[float] = field(default_factory=list)

    def within(self, start: float, end: float) -> int:
        return sum(start < moment < end for moment in self.times)


@dataclass
class Spans:
    """When each call of a wrapped function ran (``time.monotonic``, the loop's clock)."""

    spans: list[tuple[float, float]] = field(default_factory=list)

    @property
    def longest(self) -> tuple[float, float]:
        return max(self.spans, key=lambda span: span[1] - span[0])


def record_spans(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> Spans:
    """Replace ``module.name`` by a wrapper that records each call's span."""
    seen = Spans()
    original: Callable[..., Any] = getattr(module, name)

    @functools.wraps(original)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        try:
            return original(*args, **kwargs)
        finally:
            seen.spans.append((started, time.monotonic()))

    monkeypatch.setattr(module, name, wrapper)
    return seen


@contextlib.asynccontextmanager
async def watched_loop() -> AsyncIterator[Turns]:
    """Tick every 5 ms on the running loop while the block runs."""
    loop = asyncio.get_running_loop()
    assert loop.time() <= time.monotonic()  # the loop's clock is time.monotonic
    turns = Turns()

    async def tick() -> None:
        while True:
            await asyncio.sleep(0.005)
            turns.times.append(time.monotonic())

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)  # the ticker is waiting before the block starts
    try:
        yield turns
    finally:
        ticker.cancel()


def assert_served_during(turns: Turns, spans: Spans) -> None:
    """The loop took turns while the longest of the work's calls ran."""
    start, end = spans.longest
    served = turns.within(start, end)
    assert served >= 2, f"the loop took {served} turns in the {end - start:.2f} s of the work"
