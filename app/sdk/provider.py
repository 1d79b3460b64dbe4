"""``Provider``: data a worker answers on demand (docs/protocol.md, "Providers").

A provider is a pydantic model whose fields are a read's parameters (its JSON schema, for
readers) with a ``category`` and a ``read`` method, as zndraw-joblib's ``Provider``::

    class Frames(Provider):
        category = "frames"
        content_type = "application/octet-stream"
        index: int = 0

        def read(self, handler: Any) -> bytes:
            return handler.frame(self.index)

    worker.provide(Frames, name="traj", handler=trajectory, room="lab")

A reader asks the hub (``Client.read("lab:frames:traj", room="lab", index=3)``); the hub
asks the worker, caches the answer, and answers every reader waiting for it. ``read`` may be
sync (run in a thread) or async; it returns JSON-able data, or ``bytes`` for another
content type. A read that raises is answered as a failed read: its readers get a
``provider-execution-failed`` problem naming the error.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel

from taskhub.sdk.extension import GLOBAL_ROOM

JSON_CONTENT_TYPE = "application/json"
EXECUTION_FAILED = "/v1/problems/provider-execution-failed"


class Provider(BaseModel):
    """Base class of providers: set ``category`` (and ``content_type`` unless JSON) and
    implement ``read``."""

    category: ClassVar[str]
    content_type: ClassVar[str] = JSON_CONTENT_TYPE

    def read(self, handler: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


@dataclass(frozen=True)
class ProviderSpec:
    """A provider as a worker serves it: its class, its name and room, and the handler
    each read gets."""

    cls: type[Provider]
    name: str
    room: str = GLOBAL_ROOM
    handler: Any = None

    @property
    def full_name(self) -> str:
        return f"{self.room}:{self.cls.category}:{self.name}"

    def registration(self, worker_id: str) -> dict[str, Any]:
        """The body of ``PUT /rooms/{room}/providers``."""
        return {
            "category": self.cls.category,
            "name": self.name,
            "schema": self.cls.model_json_schema(),
            "content_type": self.cls.content_type,
            "worker_id": worker_id,
        }

    async def answer(self, params: str) -> tuple[bytes, bool]:
        """The answer to a read of ``params`` (the ``provider_request``'s canonical JSON):
        its body, and whether it is a failed read (the body then is a problem)."""
        try:
            instance = self.cls.model_validate(json.loads(params) if params else {})
            if inspect.iscoroutinefunction(instance.read):
                result = await instance.read(self.handler)
            else:
                result = await asyncio.to_thread(instance.read, self.handler)
            if self.cls.content_type == JSON_CONTENT_TYPE:
                return json.dumps(result).encode(), False
            if not isinstance(result, bytes | bytearray | memoryview):
                raise TypeError(f"a {self.cls.content_type} provider's read must return bytes")
            return bytes(result), False
        except Exception as exc:
            problem = {
                "type": EXECUTION_FAILED,
                "title": "Provider execution failed",
                "status": 400,
                "detail": f"{type(exc).__name__}: {exc}",
            }
            return json.dumps(problem).encode(), True
