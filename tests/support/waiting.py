"""Bounded polls: wait until something observable comes true, and fail saying what was
awaited and how long (a fixed sleep would only hope it had happened by then).

``eventually`` is for async code (it sleeps without blocking the loop, and ``check`` may be
a coroutine function); ``eventually_sync`` is for threads and sync tests. Both return the
first truthy value ``check`` gave, so a poll can hand back what it found."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Coroutine
from typing import Any

# What was awaited: a phrase, or a function that describes it when the wait fails (to show
# the last state seen).
What = str | Callable[[], str]


def _timed_out(what: What, within: float, waited: float) -> AssertionError:
    described = what() if callable(what) else what
    return AssertionError(f"{described}: not within {within}s (waited {waited:.2f}s)")


async def eventually(
    check: Callable[[], Any | Coroutine[Any, Any, Any]],
    within: float,
    what: What,
    interval: float = 0.02,
) -> Any:
    """Poll ``check`` (sync or async) until it returns something truthy, and return that;
    AssertionError naming ``what`` once ``within`` seconds have passed without. A coroutine
    ``check`` returns is awaited; anything else (a task or a future too) is the value."""
    started = time.monotonic()
    while True:
        value = check()
        if inspect.iscoroutine(value):
            value = await value
        if value:
            return value
        waited = time.monotonic() - started
        if waited > within:
            raise _timed_out(what, within, waited)
        await asyncio.sleep(interval)


def eventually_sync(
    check: Callable[[], Any], within: float, what: What, interval: float = 0.02
) -> Any:
    """``eventually`` for sync code: polls ``check`` between blocking sleeps."""
    started = time.monotonic()
    while True:
        value = check()
        if value:
            return value
        waited = time.monotonic() - started
        if waited > within:
            raise _timed_out(what, within, waited)
        time.sleep(interval)
