"""Providers the SDK tests serve (``taskhub.sdk.Provider``); ``taskhub worker`` loads
``tests.sdk.providers:Squares`` by name."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any, ClassVar

from pydantic import Field

from taskhub.sdk import Provider


class Squares(Provider):
    """JSON: the first ``n`` squares (sync; its handler, when given, counts the reads)."""

    category: ClassVar[str] = "numbers"
    n: int = Field(default=3, ge=0, le=1000)

    def read(self, handler: Any) -> Any:
        if handler is not None:
            handler.count(f"squares:{self.n}")
        return [i * i for i in range(self.n)]


class Frame(Provider):
    """Bytes (async): ``size`` bytes from ``index`` on."""

    category: ClassVar[str] = "frames"
    content_type: ClassVar[str] = "application/octet-stream"
    index: int = 0
    size: int = 8

    async def read(self, handler: Any) -> Any:
        return bytes((self.index + i) % 256 for i in range(self.size))


class Broken(Provider):
    """A read that fails."""

    category: ClassVar[str] = "numbers"

    def read(self, handler: Any) -> Any:
        raise ValueError("no such frame")


class Silent(Provider):
    """A read that takes longer than any test waits."""

    category: ClassVar[str] = "numbers"

    async def read(self, handler: Any) -> Any:
        await asyncio.sleep(3600)


class Reads:
    """A handler that counts the reads it serves (from the worker's threads)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.seen: Counter[str] = Counter()

    def count(self, what: str) -> None:
        with self.lock:
            self.seen[what] += 1
