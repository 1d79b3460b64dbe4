"""``GET /metrics``: the Prometheus exposition of this process — or, in prometheus-client's
multiprocess mode, of every worker process — plus the queue depth per job, read from the
database by the scraping process alone (one bounded GROUP BY), so it is never summed
across processes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from typing import NamedTuple, Protocol

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from sqlalchemy import func, or_, select
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from taskhub.observability.metrics import multiprocess_mode
from taskhub.store.database import Database
from taskhub.store.tables import job_table, queue_bucket_table

log = logging.getLogger(__name__)

QUEUE_DEPTH_MAX_JOBS = 500  # at most this many taskhub_queue_depth series (deepest first)
QUEUE_DEPTH_TIMEOUT_SECONDS = 5.0


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


class QueueCounts(NamedTuple):
    pending: int
    waiting: int  # of those pending, the ones waiting for their ``run_at``


async def pending_by_job(db: Database, limit: int = QUEUE_DEPTH_MAX_JOBS) -> dict[str, QueueCounts]:
    """Pending (and waiting) tasks per job full name: every live job (0 when idle) and any
    deleted job that still has pending tasks; the ``limit`` deepest queues. Read off the
    counts the database keeps (``task_queue_bucket``), not by counting tasks."""
    buckets = queue_bucket_table
    counts = (
        select(
            buckets.c.job_id,
            func.sum(buckets.c.pending).label("pending"),
            func.sum(buckets.c.waiting).label("waiting"),
        )
        .group_by(buckets.c.job_id)
        .subquery("counts")
    )
    depth = func.coalesce(counts.c.pending, 0).label("depth")
    waiting = func.coalesce(counts.c.waiting, 0).label("waiting")
    statement = (
        select(job_table.c.room_id, job_table.c.category, job_table.c.name, depth, waiting)
        .select_from(job_table.outerjoin(counts, counts.c.job_id == job_table.c.id))
        .where(or_(~job_table.c.deleted, counts.c.pending > 0))
        .order_by(depth.desc(), job_table.c.room_id, job_table.c.category, job_table.c.name)
        .limit(limit)
    )
    async with db.read() as conn:
        rows = (await conn.execute(statement)).all()
    return {
        f"{row.room_id}:{row.category}:{row.name}": QueueCounts(int(row.depth), int(row.waiting))
        for row in rows
    }


class QueueDepth:
    """A one-scrape collector of depths already read from the database."""

    def __init__(self, depths: dict[str, QueueCounts]) -> None:
        self.depths = depths

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily(
            "taskhub_queue_depth", "Pending tasks per job (full name).", labels=["job"]
        )
        waiting = GaugeMetricFamily(
            "taskhub_queue_waiting",
            "Pending tasks per job (full name) waiting for their run_at.",
            labels=["job"],
        )
        for job, counts in self.depths.items():
            depth.add_metric([job], counts.pending)
            waiting.add_metric([job], counts.waiting)
        yield depth
        yield waiting


class Scrape:
    """Several collectors exposed as one registry, for one scrape."""

    def __init__(self, *collectors: Collector) -> None:
        self.collectors = collectors

    def collect(self) -> Iterator[Metric]:
        for collector in self.collectors:
            yield from collector.collect()


def process_collector() -> Collector:
    """This process's registry, or every process's values in multiprocess mode (where the
    per-process collectors of the default registry would describe the scraper only)."""
    if multiprocess_mode():
        return MultiProcessCollector(CollectorRegistry())
    return REGISTRY


async def metrics_endpoint(request: Request) -> Response:
    """Unauthenticated, like ``/healthz``. A database that does not answer costs the
    queue-depth series (logged), never the scrape."""
    db: Database = request.app.state.hub.db
    collectors: list[Collector] = [process_collector()]
    try:
        depths = await asyncio.wait_for(pending_by_job(db), QUEUE_DEPTH_TIMEOUT_SECONDS)
    except Exception:
        log.warning("metrics: queue depth unavailable (database)", exc_info=True)
    else:
        collectors.append(QueueDepth(depths))
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    body = await run_in_threadpool(encoder, Scrape(*collectors))
    return Response(body, headers={"Content-Type": content_type})
