"""``Extension``: a job a worker can run, declared as a pydantic model.

The model's fields are the job's parameters (its JSON schema becomes the job's schema and
the browser's form); ``run(ctx)`` does the work::

    class Rotate(Extension):
        category = "modifiers"          # one of the hub's allowed categories
        angle: float = 90.0

        def run(self, ctx: TaskContext) -> dict:
            ctx.progress(0.5, "rotating")
            return {"rotated_by": self.angle}

``run`` may be ``async def``; it must then not block (plain ``def`` runs in its own
thread). The job's name is the class name unless the class sets ``name = "..."``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

if TYPE_CHECKING:
    from taskhub.sdk.context import TaskContext

GLOBAL_ROOM = "@global"


# The job policy an Extension class may set (sent with its registration; None: the hub's
# default, or what the job already has): how its tasks are shared among submitters or rooms
# and how many may run at once per submitter / room (docs/protocol.md, "Fair sharing").
POLICY_ATTRIBUTES = ("claim_order", "max_running_per_submitter", "max_running_per_room")


class Extension(BaseModel):
    """Base class of every job; subclass it, set ``category`` and implement ``run``.
    Optionally set ``claim_order`` (``"fair-by-submitter"``, ``"fair-by-room"``),
    ``max_running_per_submitter`` and ``max_running_per_room``."""

    category: ClassVar[str]
    name: ClassVar[str]
    claim_order: ClassVar[str | None] = None
    max_running_per_submitter: ClassVar[int | None] = None
    max_running_per_room: ClassVar[int | None] = None

    def run(self, ctx: TaskContext) -> Any:
        """Do the work; return a JSON-serialisable result (or a pydantic model)."""
        raise NotImplementedError(f"{type(self).__name__}.run is not implemented")


@dataclass(frozen=True)
class JobSpec:
    """An Extension class bound to the room it is registered in."""

    extension: type[Extension]
    room: str
    category: str
    name: str
    schema: dict[str, Any]

    @classmethod
    def of(cls, extension: type[Extension], room: str = GLOBAL_ROOM) -> JobSpec:
        category, name = job_identity(extension)
        return cls(extension, room, category, name, extension.model_json_schema())

    @property
    def policy(self) -> dict[str, Any]:
        """The job policy the Extension class sets (``POLICY_ATTRIBUTES`` not None)."""
        fields = self.extension.model_fields  # a payload field of that name is no policy
        values = {
            name: None if name in fields else getattr(self.extension, name, None)
            for name in POLICY_ATTRIBUTES
        }
        return {name: value for name, value in values.items() if value is not None}

    @property
    def full_name(self) -> str:
        return f"{self.room}:{self.category}:{self.name}"

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.extension.run)


def job_identity(extension: type[Extension]) -> tuple[str, str]:
    """``(category, name)`` of an Extension class; ``TypeError`` when it is not usable."""
    if not (isinstance(extension, type) and issubclass(extension, Extension)):
        raise TypeError(f"{extension!r} is not an Extension subclass")
    category = getattr(extension, "category", None)
    if not isinstance(category, str) or not category or "category" in extension.model_fields:
        raise TypeError(
            f"{extension.__name__} must set the class attribute category = '<category>'"
        )
    if extension.run is Extension.run:
        raise TypeError(f"{extension.__name__} must implement run(self, ctx)")
    name = None if "name" in extension.model_fields else getattr(extension, "name", None)
    if name is not None and (not isinstance(name, str) or not name):
        raise TypeError(f"{extension.__name__}.name must be a non-empty string")
    return category, name or extension.__name__
