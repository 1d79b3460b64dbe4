"""Pushing tasks to idle workers over the Socket.IO connection they hold (docs/protocol.md,
"Task push").

A worker grants the hub slots (``worker_ready``) that a claim of its own found nothing
for. While it holds some, a ``task_available`` of a job its socket serves (published here,
or on another replica and passed on by the wake bus) makes this replica claim on the
worker's behalf (``services.task_push.claim_pushed``: the same fenced claim-and-start as
``POST /tasks/claim`` with ``start``), so the task is ``running`` when it is handed over,
without a round trip of the worker's.
The tasks are delivered to the worker's socket (``task_pushed``). A push that does not
arrive (the socket went meanwhile) is recovered like a claim whose reply was lost: the
worker does not know the task, its heartbeats do not extend its lease, and the sweeper
retries it when the lease runs out.

One task's wake-up goes to one grant (in turn among the grants of its job here), so a
burst of tasks spreads over idle workers instead of every worker claiming for each task;
the other replicas hear of the task only if no grant here serves its job. Each replica
pushes to its own sockets only; a claim takes the oldest task, whichever event woke it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from uuid import UUID

from taskhub.realtime.publisher import Publisher
from taskhub.rules.events import Event, TaskAvailable
from taskhub.rules.records import Principal, TaskRecord
from taskhub.services.task_push import claim_pushed
from taskhub.store.database import Database

log = logging.getLogger(__name__)

# The most slots one worker may grant (a claim's own bound on ``max_tasks``).
MAX_GRANTED_SLOTS = 100

Deliver = Callable[["Grant", list[TaskRecord]], Awaitable[bool]]
# The private rooms whose tasks a push for a worker of this owner leaves alone.
ClosedRooms = Callable[[Principal], Awaitable[frozenset[str]]]
Announce = Callable[[Iterable[str]], None]


@dataclass(eq=False)
class Grant:
    """The slots one worker granted through one socket, and the push under way."""

    sid: str
    worker_id: UUID
    principal: Principal
    jobs: frozenset[str]  # the job names whose wake-ups concern it
    slots: int = 0  # not yet taken by a push
    in_flight: int = 0  # taken by the push under way, until its tasks are delivered
    live: bool = True  # false once paused or its socket went: slots in flight lapse
    wanted: bool = False  # woken again while a push runs: push once more after it
    pushing: asyncio.Task[None] | None = field(default=None, repr=False)


class TaskPusher:
    def __init__(
        self,
        db: Database,
        publisher: Publisher,
        *,
        lease_seconds: float,
        deliver: Deliver,
        closed: ClosedRooms,
        announce: Announce | None = None,
    ) -> None:
        self._db = db
        self._closed = closed
        self._publisher = publisher
        self._lease_seconds = lease_seconds
        self._deliver = deliver
        self._announce = announce  # tells the other replicas of available jobs
        self._grants: dict[UUID, Grant] = {}
        self._turn = 0

    def grant(
        self, sid: str, worker_id: UUID, principal: Principal, jobs: Iterable[str], slots: int
    ) -> int:
        """Add ``slots`` to what ``worker_id`` granted through socket ``sid`` (a grant
        through another socket replaces the old one); the slots it holds now (at most
        ``MAX_GRANTED_SLOTS``). Zero slots only nudges: the hub looks for tasks again.

        A grant that held no slots before looks for waiting tasks at once: a task that
        became available meanwhile found no grant to wake. One that held some already
        does not: every task since then woke a grant of its job (or of another replica's,
        which takes it), so a worker handing back one slot at a time costs no claim."""
        held = self._grants.get(worker_id)
        jobs = frozenset(jobs)
        if held is None or held.sid != sid:
            if held is not None:
                held.live = False
            held = Grant(sid, worker_id, principal, jobs)
            self._grants[worker_id] = held
        look = slots == 0 or not held.slots + held.in_flight or held.jobs != jobs
        held.jobs, held.principal = jobs, principal
        # At most MAX_GRANTED_SLOTS held in all, counting those of a push under way.
        held.slots = min(held.slots + slots, MAX_GRANTED_SLOTS - held.in_flight)
        if look:
            self._push(held)
        return self.held(worker_id)

    async def pause(self, worker_id: UUID, sid: str) -> int:
        """Take back what ``worker_id`` granted through ``sid``: no push starts from now
        on, and one under way ends first (its tasks are sent before this returns, so
        before the answer); the slots no push took."""
        held = self._grants.get(worker_id)
        if held is None or held.sid != sid:
            return 0
        self._drop(held)
        if held.pushing is not None:
            await asyncio.gather(held.pushing, return_exceptions=True)
        returned, held.slots = held.slots, 0
        return returned

    def forget_socket(self, sid: str) -> None:
        """The socket went: its grants lapse."""
        for held in list(self._grants.values()):
            if held.sid == sid:
                self._drop(held)

    def forget_worker(self, worker_id: UUID) -> None:
        held = self._grants.get(worker_id)
        if held is not None:
            self._drop(held)

    def _drop(self, held: Grant) -> None:
        held.live = False
        if self._grants.get(held.worker_id) is held:
            del self._grants[held.worker_id]

    def held(self, worker_id: UUID) -> int:
        """The slots ``worker_id`` granted that no delivered push took yet: those still
        held and those of a push under way (whose unused part comes back)."""
        held = self._grants.get(worker_id)
        return 0 if held is None else held.slots + held.in_flight

    async def settled(self) -> None:
        """Wait for the pushes under way (and those they lead to) to end."""
        while pushing := [g.pushing for g in self._grants.values() if g.pushing is not None]:
            await asyncio.gather(*pushing, return_exceptions=True)

    async def __call__(self, batch: list[Event]) -> None:
        """A publisher sink: wake grants here for every available task; tell the other
        replicas of the tasks no grant here takes (a push here would take the task, and
        theirs would claim in vain)."""
        jobs = [event.job_name for event in batch if isinstance(event, TaskAvailable)]
        if not jobs:
            return
        elsewhere = [job_name for job_name in jobs if not self._wake_one(job_name)]
        if elsewhere and self._announce is not None:
            self._announce(elsewhere)

    def wake(self, job_names: Iterable[str]) -> None:
        """One push per available task, each to the next grant (in turn) of its job."""
        for job_name in job_names:
            self._wake_one(job_name)

    def _wake_one(self, job_name: str) -> bool:
        """Wake the next grant (in turn) of ``job_name``; whether there was one."""
        serving = [g for g in self._grants.values() if g.slots + g.in_flight and job_name in g.jobs]
        if not serving:
            return False
        self._turn += 1
        self._push(serving[self._turn % len(serving)])
        return True

    def _push(self, held: Grant) -> None:
        """Push to ``held`` now, or once more after the push under way (whose claim may
        have read the queue before the task that woke it was committed)."""
        if held.pushing is not None:
            held.wanted = True
            return
        if held.slots <= 0 or not held.live:
            return
        held.pushing = asyncio.create_task(self._pushes(held), name="taskhub-push")

    async def _pushes(self, held: Grant) -> None:
        """Push until no wake-up came in meanwhile (a push that took fewer tasks than its
        slots found the queue empty: only a task made available since calls for another)."""
        try:
            while held.live and held.slots > 0:
                held.wanted = False
                await self._push_once(held)
                if not held.wanted:
                    return
        finally:
            held.pushing = None

    async def _push_once(self, held: Grant) -> int:
        """Claim (and start) up to the grant's slots for its worker and deliver them; how
        many it claimed."""
        asked, held.slots = held.slots, 0
        held.in_flight = asked
        records: list[TaskRecord] = []
        try:
            records, events = await claim_pushed(
                self._db,
                held.principal,
                held.worker_id,
                asked,
                closed=await self._closed(held.principal),
                lease_seconds=self._lease_seconds,
            )
        except Exception as exc:  # the worker's own poll nudges again later
            log.warning("push to worker %s failed: %s", held.worker_id, exc)
            self._drop(held)
            return 0
        finally:
            held.in_flight = len(records)
            held.slots += asked - len(records)
        if not records:
            return 0
        try:
            delivered = await self._deliver(held, records)
        finally:
            held.in_flight = 0
        await self._publisher.publish(events)
        if not delivered:
            log.info(
                "push of %d task(s) to worker %s found its socket gone; their lease recovers them",
                len(records),
                held.worker_id,
            )
        return len(records)
