"""The registry of ``@internal`` executors known to this server process."""

from __future__ import annotations


class InternalRegistry:
    """Full names of ``@internal`` jobs this server can hand to its taskiq broker.

    Empty until executors are registered; submitting to an ``@internal`` job without one
    is refused with 503 ``internal-job-not-configured`` and leaves no task behind.
    """

    def __init__(self) -> None:
        self._executors: dict[str, object] = {}

    def register(self, full_name: str, executor: object) -> None:
        self._executors[full_name] = executor

    def has_executor(self, full_name: str) -> bool:
        return full_name in self._executors
