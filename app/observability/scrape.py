"""``GET /metrics``: the Prometheus exposition of this process — or, in prometheus-client's
multiprocess mode, of every worker process — plus the queue depth per job, read from the
database by the scraping process alone (one bounded GROUP BY), so it is never summed
across processes."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Iterator
from typing import Protocol

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from taskhub.observability.metrics import multiprocess_mode
from taskhub.store.database import Database
from taskhub.store.queue_depths import QueueCounts, pending_by_job
from taskhub.store.running_limits import held_back_by_job

log = logging.getLogger(__name__)

QUEUE_DEPTH_MAX_JOBS = 500  # at most this many taskhub_queue_depth series (deepest first)
QUEUE_DEPTH_TIMEOUT_SECONDS = 5.0


class Collector(Protocol):
    def collect(self) -> Iterable[Metric]: ...


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


class HeldBack:
    """A one-scrape collector of the tasks held back by running limits, per job."""

    def __init__(self, held: dict[str, int]) -> None:
        self.held = held

    def collect(self) -> Iterator[Metric]:
        held = GaugeMetricFamily(
            "taskhub_tasks_held_back",
            "Pending tasks per job (full name) whose submitter or room is at the job's "
            "running limit.",
            labels=["job"],
        )
        for job, count in self.held.items():
            held.add_metric([job], count)
        yield held


async def _read_held_back(db: Database) -> dict[str, int]:
    async with db.read() as conn:
        return await held_back_by_job(conn, QUEUE_DEPTH_MAX_JOBS)


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
        depths = await asyncio.wait_for(
            pending_by_job(db, QUEUE_DEPTH_MAX_JOBS), QUEUE_DEPTH_TIMEOUT_SECONDS
        )
    except Exception:
        log.warning("metrics: queue depth unavailable (database)", exc_info=True)
    else:
        collectors.append(QueueDepth(depths))
    try:
        held = await asyncio.wait_for(_read_held_back(db), QUEUE_DEPTH_TIMEOUT_SECONDS)
    except Exception:
        log.warning("metrics: tasks held back unavailable (database)", exc_info=True)
    else:
        collectors.append(HeldBack(held))
    encoder, content_type = choose_encoder(request.headers.get("accept", ""))
    body = await run_in_threadpool(encoder, Scrape(*collectors))
    return Response(body, headers={"Content-Type": content_type})
