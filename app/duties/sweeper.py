"""The sweeper: a periodic clean-up that runs once per cluster, however many replicas run.

One replica at a time sweeps: the one holding the sweeper lease (a PostgreSQL session
advisory lock kept on a connection of its own; behind a transaction-mode pooler a
``cluster_lease`` row renewed each cycle, taken over once it has run out; SQLite deploys
are one process). The others try to take it every interval, so one of them sweeps once its
holder stops or dies. A one-off ``run_once`` takes the same lease for its cycle. The sweeps
themselves are guarded writes, so even overlapping cycles would do each piece of work
once. Errors in a cycle are logged and the next cycle runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from taskhub.clock import utcnow
from taskhub.duty import Duty
from taskhub.observability import metrics
from taskhub.realtime.publisher import Publisher
from taskhub.rules.events import EventBatch
from taskhub.services import sweeps
from taskhub.settings import Settings
from taskhub.store.cluster_lease import ClusterLease
from taskhub.store.database import Database

log = logging.getLogger(__name__)
SWEEPER_LOCK = "taskhub.duties.sweeper"
# A pending ``@internal`` task due this long ago was missed by its submit (or by the
# due-task announcer) and is dispatched by the sweeper; a younger one may still be in hand.
UNDISPATCHED_GRACE = timedelta(seconds=10)
# A row lease (transaction-mode pooler) lasts this many intervals, plus the margin, past
# each cycle's renewal: a slow cycle keeps it; a dead holder's is taken over after that.
LEASE_ROW_INTERVALS = 3
LEASE_ROW_MARGIN_SECONDS = 2.0


@dataclass
class SweepReport:
    ran: bool
    workers_removed: int = 0
    leases_expired: int = 0
    orphaned_attempts_ended: int = 0
    orphaned_jobs_deleted: int = 0
    tasks_failed: int = 0
    internal_dispatched: int = 0
    tasks_purged: int = 0
    internal_messages_trimmed: int = 0
    events: EventBatch = field(default_factory=EventBatch)


metrics.declare_sweep_kinds(SweepReport)


class Sweeper(Duty):
    """Every ``sweeper_interval_seconds``, a sweep while this replica holds the sweeper
    lease; the other replicas try to take it each interval (they get it once its holder
    stops or dies)."""

    name = "sweeper"

    def __init__(
        self,
        settings: Settings,
        db: Database,
        publisher: Publisher,
        dispatch: Callable[[datetime], Awaitable[tuple[int, EventBatch]]] | None = None,
        trim: Callable[[], Awaitable[int]] | None = None,
    ) -> None:
        """``dispatch(before)`` hands the ``@internal`` tasks due since before ``before``
        that are still pending to the broker (without it, none are); ``trim()`` drops the
        broker's messages every executor has acknowledged (Redis), last in each cycle."""
        self.settings = settings
        self.db = db
        self.publisher = publisher
        self._dispatch = dispatch
        self._trim = trim
        self._lease = self._new_lease()

    def _new_lease(self) -> ClusterLease:
        interval = self.settings.sweeper_interval_seconds
        row_seconds = LEASE_ROW_INTERVALS * interval + LEASE_ROW_MARGIN_SECONDS
        return ClusterLease(self.db, SWEEPER_LOCK, row_seconds=row_seconds)

    async def run_once(self) -> SweepReport:
        """One cycle on its own (``ran=False`` when another replica holds the lease)."""
        lease = self._new_lease()
        try:
            if not await lease.hold():
                return SweepReport(ran=False)
            return await self._sweep()
        finally:
            await lease.release()

    async def _sweep(self) -> SweepReport:
        """One cycle, by the holder of the sweeper lease; returns what it did."""
        now = utcnow()
        worker_cutoff = now - timedelta(seconds=self.settings.worker_timeout_seconds)
        internal_cutoff = now - timedelta(seconds=self.settings.internal_task_timeout_seconds)
        report = SweepReport(ran=True)
        policy = self.settings.retry_policy

        async def publish(events: EventBatch) -> None:
            """Each step's events go out once it has committed: a later step that fails
            does not take them with it."""
            report.events.extend(events)
            await self.publisher.publish(events)

        async for count, removed in sweeps.sweep_stale_workers(self.db, worker_cutoff, policy):
            report.workers_removed += count
            await publish(removed)
        report.leases_expired, expired = await sweeps.end_expired_leases(self.db, now, policy)
        await publish(expired)
        report.orphaned_attempts_ended, orphaned = await sweeps.end_orphaned_attempts(
            self.db, now, policy
        )
        await publish(orphaned)
        report.orphaned_jobs_deleted, left_jobs = await sweeps.soft_delete_orphaned_jobs(self.db)
        await publish(left_jobs)
        stuck = await sweeps.fail_stuck_internal_tasks(self.db, internal_cutoff)
        report.tasks_failed = len(stuck)
        await publish(stuck)
        if self._dispatch is not None:
            report.internal_dispatched, dispatched = await self._dispatch(now - UNDISPATCHED_GRACE)
            await publish(dispatched)
        if self.settings.task_retention_seconds > 0:
            retention = timedelta(seconds=self.settings.task_retention_seconds)
            report.tasks_purged = await sweeps.purge_old_tasks(
                self.db, now - retention, self.settings.retention_batch_size
            )
        if self._trim is not None:
            report.internal_messages_trimmed = await self._trim()
        metrics.record_sweep(report)
        if len(report.events) or report.tasks_purged:
            log.info(
                "sweeper: %d workers removed, %d leases expired, %d tasks of removed workers "
                "ended, %d jobs left without workers deleted, %d internal tasks timed out, "
                "%d missed internal tasks dispatched, %d old tasks purged",
                report.workers_removed,
                report.leases_expired,
                report.orphaned_attempts_ended,
                report.orphaned_jobs_deleted,
                report.tasks_failed,
                report.internal_dispatched,
                report.tasks_purged,
            )
        return report

    async def wait(self) -> None:
        await asyncio.sleep(self.settings.sweeper_interval_seconds)

    async def cycle(self) -> None:
        if await self._lease.hold():
            await self._sweep()

    async def finish(self) -> None:
        await self._lease.release()

    def failed(self, error: Exception) -> None:
        log.error("sweeper cycle failed; the next one runs as scheduled", exc_info=error)
