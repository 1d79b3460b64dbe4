"""The ``@internal`` jobs this deployment can execute, by full name."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator

from taskhub.dispatch.definitions import InternalJob

BUILT_IN_MODULES = ("taskhub.internal_jobs.jobs",)


class JobModulesUnusable(ValueError):
    """A module of ``TASKHUB_INTERNAL_JOB_MODULES`` cannot be imported, or has no ``JOBS``."""


class InternalRegistry:
    """Submitting to an ``@internal`` job missing here is refused with 503
    ``internal-job-not-configured`` and leaves no task behind."""

    def __init__(self, jobs: Iterable[type[InternalJob]] = ()) -> None:
        self._jobs: dict[str, type[InternalJob]] = {}
        for job in jobs:
            self.register(job)

    @classmethod
    def from_modules(cls, modules: Iterable[str]) -> InternalRegistry:
        """Collect the ``JOBS`` list of each module (``JobModulesUnusable`` naming the first
        module that cannot be imported or has no such list)."""
        jobs: list[type[InternalJob]] = []
        for module in modules:
            try:
                jobs.extend(importlib.import_module(module).JOBS)
            except Exception as exc:
                raise JobModulesUnusable(f"{module}: {type(exc).__name__}: {exc}") from exc
        return cls(jobs)

    def register(self, job: type[InternalJob]) -> None:
        self._jobs[job.full_name()] = job

    def has_executor(self, full_name: str) -> bool:
        return full_name in self._jobs

    def is_costly(self, full_name: str) -> bool:
        """Whether the job's tasks count as costly validations (``InternalJob.costly``)."""
        job = self._jobs.get(full_name)
        return job is not None and job.costly

    def get(self, full_name: str) -> type[InternalJob] | None:
        return self._jobs.get(full_name)

    def __iter__(self) -> Iterator[type[InternalJob]]:
        return iter(self._jobs.values())
