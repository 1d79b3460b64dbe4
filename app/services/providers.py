"""Providers (docs/protocol.md, "Providers"): registration, listing, removal, reads that
wait for a provider's answer, and the answers themselves."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from taskhub.clock import new_id, utcnow
from taskhub.json_codec import wire_json
from taskhub.observability import metrics
from taskhub.realtime.provider_results import ProviderResults, StoredResult, result_key
from taskhub.rules.errors import Forbidden, ServiceUnavailable, WorkerNotFound
from taskhub.rules.events import (
    EventBatch,
    ProviderRequest,
    ProviderResultReady,
    ProvidersInvalidate,
)
from taskhub.rules.naming import INTERNAL_ROOM, validate_room_id
from taskhub.rules.providers import (
    ProviderName,
    ProviderNotFound,
    ProviderRecord,
    canonical_params,
    check_may_see,
    check_registration,
    failed_read_problem,
    request_hash,
    validate_content_type,
    visible_name,
    visible_provider_rooms,
)
from taskhub.rules.records import Page, Principal, beyond
from taskhub.services.ownership import owned_worker
from taskhub.store import providers as store
from taskhub.store import workers as worker_store
from taskhub.store.connections import AsyncConnection, Connection
from taskhub.store.database import Database
from taskhub.validation.payloads import check_schema_size

# Sends a read's ``provider_request`` (a remote provider) or enqueues it (an ``@internal``
# one): the provider, the request hash, the canonical parameters.
Dispatch = Callable[[ProviderRecord, str, str], Awaitable[None]]


@dataclass(slots=True)
class ProviderRegistration:
    provider: ProviderRecord
    created: bool


def _record(row: Any) -> ProviderRecord:
    return ProviderRecord(
        id=row.id,
        room_id=row.room_id,
        category=row.category,
        name=row.name,
        schema=row.schema,
        content_type=row.content_type,
        user_id=row.user_id,
        worker_id=row.worker_id,
        created_at=row.created_at,
    )


async def register_provider(
    db: Database,
    principal: Principal,
    room_id: str,
    *,
    category: str,
    name: str,
    schema: dict[str, Any],
    content_type: str,
    worker_id: UUID | None,
    allowed_categories: list[str] | None,
    superuser_categories: list[str],
) -> tuple[ProviderRegistration, EventBatch]:
    """Register a provider, or update the one of that name (201 new, 200 updated): its
    schema, content type and worker become the registration's. A provider of another user
    is updated only by a superuser (403). Without ``worker_id`` a new worker of the caller's
    serves it (zndraw-joblib's adoption: the answer's ``worker_id``)."""
    check_registration(
        principal,
        room_id,
        category,
        name,
        allowed=allowed_categories,
        superuser_only=superuser_categories,
    )
    validate_content_type(content_type)
    check_schema_size(schema)
    now = utcnow()
    async with db.write() as conn:
        if worker_id is None:
            worker_id = new_id()
            await worker_store.insert_worker(conn, worker_id, principal.id, now)
        else:
            await _callers_worker(conn, principal, worker_id)
        row = await store.lock_named(conn, room_id, category, name)
        created = False
        if row is None:
            values = {
                "id": new_id(),
                "room_id": room_id,
                "category": category,
                "name": name,
                "schema": schema,
                "content_type": content_type,
                "user_id": principal.id,
                "worker_id": worker_id,
                "created_at": now,
            }
            created = await store.insert_provider(conn, values)
            row = await store.lock_named(conn, room_id, category, name)
            assert row is not None  # inserted, or another registration's
        if not created:
            if row.user_id != principal.id and not principal.is_superuser:
                raise Forbidden(
                    f"Provider {room_id}:{category}:{name} is registered by another user."
                )
            await store.update_provider(
                conn,
                row.id,
                schema=schema,
                content_type=content_type,
                worker_id=worker_id,
                user_id=principal.id,
            )
            row = await store.find(conn, row.id)
    events = EventBatch()
    events.add(ProvidersInvalidate(room_id))
    return ProviderRegistration(_record(row), created), events


async def _callers_worker(conn: AsyncConnection, principal: Principal, worker_id: UUID) -> None:
    """The worker exists (404) and is the caller's own (403): a provider is served by its
    owner's worker, superusers included (zndraw-joblib adopts only the caller's workers)."""
    row = await owned_worker(conn, principal, worker_id, lock="keep")
    if row.user_id != principal.id:
        raise Forbidden(f"Worker {worker_id} belongs to another user.")


async def list_providers(
    db: Database,
    principal: Principal,
    room_id: str,
    limit: int,
    offset: int,
    superuser_categories: Collection[str],
) -> Page[ProviderRecord]:
    """The providers visible from the room, newest first; those of superuser-only
    categories only for superusers."""
    validate_room_id(room_id)
    rooms = visible_provider_rooms(room_id)
    hidden = () if principal.is_superuser else tuple(superuser_categories)
    async with db.read() as conn:
        total = await store.count_providers(conn, rooms, hidden)
        rows = (
            []
            if beyond(total, limit, offset)
            else await store.provider_page(conn, rooms, hidden, limit, offset)
        )
    return Page(items=[_record(row) for row in rows], total=total, limit=limit, offset=offset)


async def get_provider(
    db: Database,
    principal: Principal,
    room_id: str,
    full_name: str,
    superuser_categories: Collection[str],
) -> ProviderRecord:
    """The provider called ``full_name`` if the room sees it (404) and the caller may (403)."""
    validate_room_id(room_id)
    async with db.read() as conn:
        record = await find_visible(conn, room_id, full_name)
    check_may_see(principal, record.category, list(superuser_categories))
    return record


async def find_visible(conn: Connection, room_id: str, full_name: str) -> ProviderRecord:
    parsed = visible_name(room_id, full_name)
    row = await store.find_named(conn, parsed.room_id, parsed.category, parsed.name)
    if row is None:
        raise ProviderNotFound(f"Provider {full_name!r} not found.")
    return _record(row)


async def find_provider(db: Database, provider_id: UUID) -> ProviderRecord:
    async with db.read() as conn:
        row = await store.find(conn, provider_id)
    if row is None:
        raise ProviderNotFound(f"Provider {provider_id} not found.")
    return _record(row)


async def delete_provider(db: Database, principal: Principal, provider_id: UUID) -> EventBatch:
    """Unregister a provider: its owner or a superuser; never an ``@internal`` one (403)."""
    async with db.write() as conn:
        row = await store.find(conn, provider_id)
        if row is None:
            raise ProviderNotFound(f"Provider {provider_id} not found.")
        if row.room_id == INTERNAL_ROOM:
            raise Forbidden("@internal providers are the hub's own: they cannot be deleted.")
        if row.user_id != principal.id and not principal.is_superuser:
            raise Forbidden("This provider belongs to another user.")
        await store.delete_provider(conn, provider_id)
    events = EventBatch()
    events.add(ProvidersInvalidate(row.room_id))
    return events


async def check_serves(
    db: Database, principal: Principal, full_name: str, worker_id: UUID
) -> ProviderRecord:
    """For ``join_provider_room``: the provider exists (404), ``worker_id`` is the worker
    serving it (403), and that worker is the caller's own (403; not even a superuser
    receives another user's reads)."""
    parsed = ProviderName.parse(full_name)
    async with db.read() as conn:
        row = await store.find_named(conn, parsed.room_id, parsed.category, parsed.name)
        worker = await worker_store.find_worker(conn, worker_id)
    if row is None:
        raise ProviderNotFound(f"Provider {full_name!r} not found.")
    if worker is None:
        raise WorkerNotFound(f"Worker {worker_id} not found.")
    if worker.user_id != principal.id:
        raise Forbidden("Only the owner of a provider's worker may join as that provider.")
    if row.worker_id != worker_id:
        raise Forbidden(f"Worker {worker_id} does not serve provider {full_name}.")
    return _record(row)


async def removed_with_workers(conn: Connection, worker_ids: list[UUID]) -> list[Any]:
    """``(worker_id, room_id)`` of the providers served by ``worker_ids``: read in the
    transaction that deletes those workers (their providers go with them)."""
    return await store.provider_rooms_of(conn, worker_ids) if worker_ids else []


def invalidations(rooms: Collection[str]) -> EventBatch:
    """``providers_invalidate`` for each of ``rooms``."""
    events = EventBatch()
    for room in sorted(set(rooms)):
        events.add(ProvidersInvalidate(room))
    return events


@dataclass(slots=True)
class Read:
    """A read's outcome: its provider, and its result (None: none came within the wait);
    ``waited``: the result was not in the cache when the read came (zndraw-joblib then
    answers ``Preference-Applied``)."""

    provider: ProviderRecord
    request_hash: str
    result: StoredResult | None
    waited: bool = True


async def read_provider(
    db: Database,
    results: ProviderResults,
    principal: Principal,
    room_id: str,
    full_name: str,
    params: dict[str, str],
    *,
    wait: float,
    inflight_seconds: float,
    superuser_categories: Collection[str],
    dispatch: Dispatch,
    stop: asyncio.Event | None = None,
) -> Read:
    """Read from a provider: its cached result at once; else one ``provider_request`` per
    distinct read while the in-flight lock (``inflight_seconds``) holds, and a wait of up to
    ``wait`` seconds for the result (``stop`` ends it early: the client went, shutdown).
    The readers of one read in this process share one watch and one copy of the result."""
    provider = await get_provider(db, principal, room_id, full_name, superuser_categories)
    digest = request_hash(params)
    key = result_key(provider.id, digest)
    with results.watch(key) as watch:
        found = watch.result or await _unavailable_as_503(results.get(key))
        if found is not None:
            return Read(provider, digest, found, waited=False)
        if await _unavailable_as_503(results.claim(key, inflight_seconds)):
            try:
                await dispatch(provider, digest, canonical_params(params))
            except BaseException:
                await results.release(key)
                raise
            metrics.provider_request()
        if wait > 0 and watch.result is None:
            await _wait(watch.woken, wait, stop)
        return Read(provider, digest, watch.result)


async def _wait(woken: asyncio.Event, seconds: float, stop: asyncio.Event | None) -> None:
    waits = {asyncio.ensure_future(woken.wait())}
    if stop is not None:
        waits.add(asyncio.ensure_future(stop.wait()))
    try:
        await asyncio.wait(waits, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiting in waits:
            waiting.cancel()


async def _unavailable_as_503(call: Awaitable[Any]) -> Any:
    """A call to the results' store; Redis unreachable is a 503 (nothing was read)."""
    try:
        return await call
    except (OSError, ConnectionError, TimeoutError) as exc:
        raise ServiceUnavailable(
            f"Provider results are unavailable ({type(exc).__name__}).", retry_after=1
        ) from None
    except Exception as exc:
        if type(exc).__module__.startswith("redis"):
            raise ServiceUnavailable(
                f"Provider results are unavailable ({type(exc).__name__}).", retry_after=1
            ) from None
        raise


def request_event(provider: ProviderRecord, digest: str, params: str) -> EventBatch:
    """The ``provider_request`` of a read (to the provider's sockets)."""
    events = EventBatch()
    events.add(ProviderRequest(digest, provider.full_name, params, str(provider.id)))
    return events


async def result_poster(db: Database, principal: Principal, provider_id: UUID) -> ProviderRecord:
    """The provider whose results ``principal`` posts: it exists (404), and is theirs or
    they are a superuser (403)."""
    provider = await find_provider(db, provider_id)
    if provider.user_id != principal.id and not principal.is_superuser:
        raise Forbidden("Only the provider's owner may post its results.")
    return provider


async def post_result(
    results: ProviderResults,
    provider: ProviderRecord,
    digest: str,
    body: bytes,
    *,
    failed: bool,
    ttl: float,
) -> EventBatch:
    """Store a provider's answer to the read ``digest`` for ``ttl`` seconds, wake its
    readers on every replica, and say so to the provider's room (``provider_result_ready``).
    A failed read (``failed``) is stored as the problem its readers get, at its status
    (``failed_read_problem``)."""
    if failed:
        problem = failed_read_problem(body)
        stored = StoredResult(wire_json(problem), problem["status"])
    else:
        stored = StoredResult(body)
    await _unavailable_as_503(results.put(result_key(provider.id, digest), stored, ttl))
    metrics.provider_result(len(stored.data))
    events = EventBatch()
    events.add(ProviderResultReady(provider.full_name, digest, provider.room_id))
    return events


async def ensure_internal_providers(
    db: Database, definitions: list[tuple[str, str, dict[str, Any], str]]
) -> bool:
    """Create or refresh the ``@internal`` provider rows (``(category, name, schema,
    content_type)`` each) at the hub's start; whether any changed."""
    changed = False
    async with db.write() as conn:
        for category, name, schema, content_type in definitions:
            changed |= await store.ensure_internal(
                conn, category, name, schema, content_type, new_id(), utcnow()
            )
    return changed
