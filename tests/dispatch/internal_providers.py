"""``@internal`` providers for the tests, loaded by the hub (and a taskiq worker) with
``TASKHUB_INTERNAL_JOB_MODULES=tests.dispatch.internal_providers``."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from taskhub.dispatch.definitions import InternalJob
from taskhub.dispatch.providers import InternalProvider, ProviderContext

MODULE = __name__


class Squares(InternalProvider):
    """JSON: the first ``n`` squares (a synchronous read, run off the event loop)."""

    category: ClassVar[str] = "numbers"
    n: int = Field(default=3, ge=0, le=1000)

    def read(self, ctx: ProviderContext) -> Any:
        return [i * i for i in range(self.n)]


class Blob(InternalProvider):
    """Bytes: ``size`` bytes of ``fill`` (an asynchronous read)."""

    category: ClassVar[str] = "blobs"
    content_type: ClassVar[str] = "application/octet-stream"
    size: int = Field(default=4, ge=0, le=1 << 20)
    fill: int = Field(default=1, ge=0, le=255)

    async def read(self, ctx: ProviderContext) -> Any:
        return bytes([self.fill]) * self.size


JOBS: list[type[InternalJob]] = []
PROVIDERS: list[type[InternalProvider]] = [Squares, Blob]
