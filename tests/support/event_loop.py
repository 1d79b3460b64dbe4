"""How long the event loop stood still while a test's work ran beside it."""

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass
class Stalls:
    """The gaps between a 5 ms ticker's wake-ups, and how long the watched work took."""

    gaps: list[float] = field(default_factory=list)
    took: float = 0.0

    @property
    def longest(self) -> float:
        return max(self.gaps, default=0.0)


@contextlib.asynccontextmanager
async def watched_loop() -> AsyncIterator[Stalls]:
    """Tick every 5 ms on the running loop while the block runs (the last gap counts up to
    the block's end, so a block that ends stalled is seen too)."""
    loop = asyncio.get_running_loop()
    stalls = Stalls()
    last = loop.time()

    async def tick() -> None:
        nonlocal last
        while True:
            await asyncio.sleep(0.005)
            now = loop.time()
            stalls.gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)  # the ticker is waiting before the block starts
    started = last = loop.time()
    try:
        yield stalls
    finally:
        ticker.cancel()
        stalls.gaps.append(loop.time() - last)
        stalls.took = loop.time() - started
