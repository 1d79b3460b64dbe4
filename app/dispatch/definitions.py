"""How an ``@internal`` job is defined: like a remote Extension, a pydantic model whose
fields are the job's JSON schema, with a ``category`` and a ``run`` method."""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass
from typing import Any, ClassVar
from uuid import UUID

from pydantic import BaseModel

from taskhub.rules.naming import INTERNAL_ROOM
from taskhub.store.database import Database


@dataclass(frozen=True)
class InternalContext:
    """What a running internal job may use: its task, its room, and read access to the hub;
    ``submitted_by``: who submitted the task (None: unknown, the user gone), whose per-user
    bounds its costly work counts against."""

    task_id: UUID
    room_id: str
    attempt: int
    db: Database
    submitted_by: UUID | None = None


class InternalJob(BaseModel):
    """Base class of ``@internal`` jobs. Subclasses set ``category`` (and optionally
    ``name``, default: the class name) and implement ``run`` (sync or async)."""

    category: ClassVar[str]
    name: ClassVar[str | None] = None
    # A job whose run validates a payload on the payload thread (``ValidatePayload``):
    # each of its unfinished tasks counts against its submitter's bound of costly
    # validations (``TASKHUB_USER_MAX_COSTLY_VALIDATIONS``), from submit to end.
    costly: ClassVar[bool] = False

    @classmethod
    def job_name(cls) -> str:
        return cls.name or cls.__name__

    @classmethod
    def full_name(cls) -> str:
        return f"{INTERNAL_ROOM}:{cls.category}:{cls.job_name()}"

    @classmethod
    def json_schema(cls) -> dict[str, Any]:
        return cls.model_json_schema()

    def run(self, ctx: InternalContext) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    async def execute(self, ctx: InternalContext) -> Any:
        """Run the job; a synchronous ``run`` goes to a thread, off the event loop."""
        if inspect.iscoroutinefunction(self.run):
            return await self.run(ctx)
        return await asyncio.to_thread(self.run, ctx)
