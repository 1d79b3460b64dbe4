"""A payload whose validation is costly but legitimate (lists of 3-D points), for the tests
of where payloads are validated (``app/validation/payload_checks.py``)."""

import asyncio
from collections.abc import Callable

POINT = {"type": "array", "items": {"type": "number"}, "minItems": 3, "maxItems": 3}
POINTS_SCHEMA = {"type": "object", "properties": {"points": {"type": "array", "items": POINT}}}
# About 0.3 s of CPU here (140 kB of JSON): far past the event loop's few milliseconds, and
# far within the 2 s deadline on a slow machine.
COSTLY = {"points": [[1.5, 2.5, 3.5]] * 10_000}


async def until(condition: Callable[[], bool], seconds: float = 30.0) -> None:
    """Wait for ``condition`` to come true (AssertionError after ``seconds``)."""
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "never came true"
        await asyncio.sleep(0.005)
