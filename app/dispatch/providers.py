"""``@internal`` providers: the hub's own, answered by its taskiq executor (docs/protocol.md,
"Providers"). Defined like ``@internal`` jobs: a pydantic model whose fields are the read's
parameters (its JSON schema), a ``category``, and a ``read`` method; listed in a module's
``PROVIDERS`` (the built-in modules and ``TASKHUB_INTERNAL_JOB_MODULES``).

A read of one is enqueued on the broker like an ``@internal`` task; the executor (in the
hub's process with the embedded broker, in ``taskiq worker`` with Redis) runs ``read`` and
stores its answer where the hub's readers wait for it, as a remote provider's POST would."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import json
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar
from uuid import UUID

from pydantic import BaseModel
from taskiq import AsyncBroker, Context, TaskiqDepends

from taskhub.json_codec import wire_json
from taskhub.realtime.provider_results import ProviderResults
from taskhub.realtime.publisher import Publisher
from taskhub.rules.errors import InternalJobNotConfigured
from taskhub.rules.naming import INTERNAL_ROOM
from taskhub.rules.providers import ProviderExecutionFailed, ProviderNotFound, ProviderRecord
from taskhub.services import providers as service
from taskhub.store.database import Database

PROVIDER_TASK_NAME = "taskhub.read_internal_provider"
JSON_CONTENT_TYPE = "application/json"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProviderContext:
    """What a read of an ``@internal`` provider may use: read access to the hub."""

    db: Database


class InternalProvider(BaseModel):
    """Base class of ``@internal`` providers. Subclasses set ``category`` (and optionally
    ``name``, default: the class name, and ``content_type``) and implement ``read`` (sync
    or async), returning JSON-able data, or ``bytes`` for another content type."""

    category: ClassVar[str]
    name: ClassVar[str | None] = None
    content_type: ClassVar[str] = JSON_CONTENT_TYPE

    @classmethod
    def provider_name(cls) -> str:
        return cls.name or cls.__name__

    @classmethod
    def full_name(cls) -> str:
        return f"{INTERNAL_ROOM}:{cls.category}:{cls.provider_name()}"

    def read(self, ctx: ProviderContext) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    async def answer(self, ctx: ProviderContext) -> bytes:
        """``read``'s answer as stored (a sync ``read`` goes to a thread, off the loop)."""
        if inspect.iscoroutinefunction(self.read):
            result = await self.read(ctx)
        else:
            result = await asyncio.to_thread(self.read, ctx)
        if self.content_type == JSON_CONTENT_TYPE:
            return wire_json(result)
        if not isinstance(result, bytes | bytearray):
            raise TypeError(f"a {self.content_type} provider's read must return bytes")
        return bytes(result)


class InternalProviders:
    """The ``@internal`` providers this deployment can answer, by full name."""

    def __init__(self, providers: Iterable[type[InternalProvider]] = ()) -> None:
        self._providers = {provider.full_name(): provider for provider in providers}

    @classmethod
    def from_modules(cls, modules: Iterable[str]) -> InternalProviders:
        """The ``PROVIDERS`` lists of the modules that have one (the job registry reports
        a module that cannot be imported)."""
        found: list[type[InternalProvider]] = []
        for module in modules:
            found.extend(getattr(importlib.import_module(module), "PROVIDERS", ()))
        return cls(found)

    def get(self, full_name: str) -> type[InternalProvider] | None:
        return self._providers.get(full_name)

    def __iter__(self) -> Iterator[type[InternalProvider]]:
        return iter(self._providers.values())


class InternalProviderDispatcher:
    """Hub side: a read no result answers goes on the broker."""

    def __init__(self, registry: InternalProviders, broker: AsyncBroker) -> None:
        self.registry = registry
        self.broker = broker

    async def dispatch(self, provider: ProviderRecord, digest: str, params: str) -> None:
        """Enqueue the read (503 ``internal-job-not-configured`` when no executor here
        knows the provider: its row outlived its definition)."""
        if self.registry.get(provider.full_name) is None:
            raise InternalJobNotConfigured(
                f"Internal provider {provider.full_name} has no executor on this hub."
            )
        task: Any = self.broker.find_task(PROVIDER_TASK_NAME)
        await task.kiq(str(provider.id), provider.full_name, digest, params)


@dataclass
class ProviderRuntime:
    """Executor side: what answering an ``@internal`` read needs (in the hub's process, or
    in a taskiq worker)."""

    db: Database
    results: ProviderResults
    publisher: Publisher
    registry: InternalProviders
    result_ttl_seconds: float

    async def execute(self, provider_id: UUID, full_name: str, digest: str, params: str) -> None:
        """Answer one read: the definition's ``read`` with the read's parameters; any
        failure (parameters the model refuses included) is stored as the read's problem."""
        try:
            provider = await service.find_provider(self.db, provider_id)
        except ProviderNotFound:
            log.info("internal provider %s is gone; read %s dropped", full_name, digest)
            return
        definition = self.registry.get(full_name)
        failed = False
        try:
            if definition is None:
                raise LookupError(f"no executor for {full_name} in this process")
            instance = definition.model_validate(json.loads(params))
            body = await instance.answer(ProviderContext(self.db))
        except Exception as exc:
            log.warning("internal provider %s failed for %s: %s", full_name, digest, exc)
            failed = True
            problem = {
                "type": f"/v1/problems/{ProviderExecutionFailed.slug}",
                "title": ProviderExecutionFailed.title,
                "status": ProviderExecutionFailed.status,
                "detail": f"{type(exc).__name__}: {exc}",
            }
            body = wire_json(problem)
        events = await service.post_result(
            self.results, provider, digest, body, failed=failed, ttl=self.result_ttl_seconds
        )
        await self.publisher.publish(events)


async def read_internal_provider(
    provider_id: str,
    full_name: str,
    digest: str,
    params: str,
    context: Context = TaskiqDepends(),
) -> None:
    """The taskiq task of ``@internal`` provider reads."""
    runtime: ProviderRuntime = context.state.taskhub_providers
    await runtime.execute(UUID(provider_id), full_name, digest, params)


async def ensure_internal_providers(db: Database, registry: InternalProviders) -> bool:
    """Create or refresh the ``@internal`` provider rows at start-up; whether any changed."""
    return await service.ensure_internal_providers(
        db,
        [
            (
                provider.category,
                provider.provider_name(),
                provider.model_json_schema(),
                provider.content_type,
            )
            for provider in registry
        ],
    )
