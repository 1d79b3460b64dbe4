"""Fair sharing: what a ``fair-by-submitter`` job gives and costs next to a FIFO one.

For each target (SQLite, PostgreSQL), three measures, each on a freshly started hub:

- ``starvation`` ("B's click"): user A submits ``backlog`` (10,000) tasks, then 4 workers
  start on them (claim-and-start, and a terminal PATCH that claims the next task: the
  worker shortcuts, one request a task); once each worker has taken a few, user B submits
  one task. B's wait is the hub's ``started_at - created_at`` of it (also measured by the
  client: from B's submit sent to a worker holding the task). Fair jobs: B submits
  ``clicks`` times, one after another, each after the last one started. No-op tasks, and
  tasks that take 100 ms each; a FIFO job with 100 ms tasks is not waited for (10,000 x
  100 ms / 4 = 250 s): its line gives B's ``queue_position`` and the wait it implies.
- ``throughput``: tasks/s of a FIFO job and of a fair job, alternately (fifo, fair, fifo,
  fair, ...; ``rounds`` runs of each), in the shape of the ``throughput`` scenario (its
  four-request workers, W = 4, and 4 submitters, here 4 different users); then the medians
  and their ratio, fair / FIFO.
- ``depth``: one FIFO and one fair job of ``submitters`` x ``per_submitter`` (1,000 x 50)
  pending tasks each, seeded into the database (the store's bulk seeding) with the turns and
  shares the hub
  would have given them; ``samples`` one-task claims of each, alternately (the claimed
  tasks are left claimed); p50/p95 of both, and the ratio of the p50s.

One JSON line per figure on stdout (``scenario`` "fair", ``measure`` as above or
``throughput_ratio``); markdown tables on stderr.

    .venv/bin/python -m benchmarks fair
    .venv/bin/python -m benchmarks fair --quick --targets sqlite
    .venv/bin/python -m benchmarks fair --only throughput --rounds 5
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

import httpx
from sqlalchemy import func, or_, select

from benchmarks.harness.cli import choices, run_command, scenario_parser
from benchmarks.harness.client import (
    API,
    JOB,
    RUN_FAILURES,
    BenchError,
    call,
    heartbeat,
    new_client,
    register_workers,
    remove_workers,
)
from benchmarks.harness.cpu import cpu_seconds, cpu_used
from benchmarks.harness.report import (
    Results,
    emit,
    latency_summary,
    load_average,
    log,
    markdown_table,
    ms,
    percentile,
)
from benchmarks.harness.seeding import SEED_STEP, hub_database, seed_tasks, seed_users
from benchmarks.harness.targets import FACTORIES, Target, TargetOptions
from benchmarks.scenarios.throughput import (
    RunState,
    cpu_per_task,
    split,
    submitter,
    summarise,
    worker,
)
from taskhub.clock import new_id, utcnow
from taskhub.rules.fair_share import ClaimOrder, next_turn, share_key
from taskhub.services.users import create_user
from taskhub.store.seeding import SeedTask, refresh_statistics
from taskhub.store.tables import task_table

TARGETS = ("sqlite", "postgres")
MEASURES = ("starvation", "throughput", "depth")
FIFO = ClaimOrder.FIFO.value
FAIR = ClaimOrder.FAIR_BY_SUBMITTER.value
ORDERS = (FIFO, FAIR)
WORKERS = 4
A_CONNECTIONS = 4  # A's bulk submit: this many requests at once
SUBMITTERS = 4  # throughput: one user each
TASK_SECONDS = (0.0, 0.1)  # starvation: no-op tasks, then 100 ms ones
WARMUP_TASKS = 5  # starvation: tasks each worker takes before B submits
WARMUP_CLAIMS = 5  # depth: untimed claims of each job first
BACKOFF_SECONDS = 0.005  # after an empty claim, as the throughput scenario's default
RUN_TIMEOUT_SECONDS = 300.0
GOAL_SLACK_MS = 20.0  # starvation: fair B starts within 2 service times + this
THROUGHPUT_GOAL = 0.9  # fair tasks/s at least this share of FIFO's
DEPTH_GOAL = 1.5  # fair claim p50 at most this many times FIFO's

T = TypeVar("T")
task = task_table


@dataclass(frozen=True)
class Sizes:
    """How big each measure is."""

    backlog: int = 10_000  # starvation: A's tasks
    clicks: int = 5  # starvation: B's submits to a fair job, one after another
    tasks: int = 2_000  # throughput: tasks per run
    rounds: int = 3  # throughput: runs of each order
    submitters: int = 1_000  # depth: submitters ...
    per_submitter: int = 50  # ... of this many tasks each, per job
    samples: int = 200  # depth: timed claims of each job


FULL = Sizes()
QUICK = Sizes(
    backlog=300, clicks=3, tasks=200, rounds=1, submitters=100, per_submitter=20, samples=20
)


@dataclass(frozen=True)
class Registered:
    """A job of a fresh room, its workers, and the client that registered them (and keeps
    them alive)."""

    room: str
    job: dict[str, Any]
    worker_ids: list[str]
    client: httpx.AsyncClient

    @property
    def submit_path(self) -> str:
        return f"{API}/rooms/{self.room}/tasks/{self.job['full_name']}"


@asynccontextmanager
async def registered(target: Target, order: str, workers: int) -> AsyncIterator[Registered]:
    """A job with ``order`` in a fresh room and ``workers`` workers of the admin's,
    heartbeating until they are removed on the way out."""
    room = f"fair-{uuid.uuid4().hex[:8]}"
    async with new_client(target) as client:
        job, _elapsed = await call(
            client, "PUT", f"{API}/rooms/{room}/jobs", {**JOB, "claim_order": order}
        )
        worker_ids = [job["worker_id"]]
        try:
            if job.get("claim_order") != order:
                raise BenchError(f"asked for claim_order {order!r}, got {job.get('claim_order')!r}")
            # Registered again without claim_order: the job keeps its own.
            worker_ids += await register_workers(client, room, workers - 1)
            beat = asyncio.create_task(heartbeat(client, worker_ids))
            try:
                yield Registered(room, job, worker_ids, client)
            finally:
                beat.cancel()
        finally:
            await remove_workers(client, worker_ids)


async def new_users(target: Target, count: int) -> list[tuple[UUID, Target]]:
    """``count`` ordinary users, each with a token: their ids, and the hub as each sees it."""
    async with hub_database(target) as db:
        made = [await create_user(db, f"fair-{uuid.uuid4().hex[:12]}") for _ in range(count)]
    return [(user_id, replace(target, token=token)) for user_id, token in made]


async def bounded(work: Awaitable[T], seconds: float) -> tuple[T | None, str | None]:
    """``work`` within ``seconds``: its result and None, or None and what went wrong."""
    result: T | None = None
    error: str | None = None
    try:
        async with asyncio.timeout(seconds):
            result = await work
    except* TimeoutError:
        error = f"timeout after {seconds:g}s"
    except* (BenchError, httpx.HTTPError) as group:
        error = "; ".join(f"{type(e).__name__}: {e}" for e in leaves(group)[:3])
    return result, error


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


# -- starvation ------------------------------------------------------------------------


@dataclass
class Seen:
    """What the worker loops received: per worker, when each task's answer arrived
    (``time.perf_counter``); ``warm`` is set once every worker has had ``warm_after``."""

    workers: int
    warm_after: int
    times: list[list[float]] = field(init=False)
    at: dict[str, float] = field(default_factory=dict)
    watched: dict[str, asyncio.Event] = field(default_factory=dict)
    warm: asyncio.Event = field(default_factory=asyncio.Event)
    _ready: int = 0

    def __post_init__(self) -> None:
        self.times = [[] for _ in range(self.workers)]

    def got(self, index: int, task_id: str) -> None:
        now = time.perf_counter()
        self.times[index].append(now)
        self.at[task_id] = now
        if task_id in self.watched:
            self.watched[task_id].set()
        if len(self.times[index]) == self.warm_after:
            self._ready += 1
            if self._ready == self.workers:
                self.warm.set()

    async def arrival(self, task_id: str) -> float:
        """When a worker got ``task_id`` (waiting for it if none has yet)."""
        if task_id not in self.at:
            await self.watched.setdefault(task_id, asyncio.Event()).wait()
        return self.at[task_id]

    def service_seconds(self) -> float | None:
        """The median time a worker took per task (between two tasks' arrivals)."""
        gaps = [b - a for times in self.times for a, b in itertools.pairwise(times)]
        return statistics.median(gaps) if gaps else None


async def shortcut_worker(
    target: Target, worker_id: str, index: int, seen: Seen, hold: float
) -> None:
    """Until cancelled: claim-and-start a task, hold it ``hold`` seconds, complete it and
    claim the next in the same PATCH (docs/protocol.md, "Worker shortcuts")."""
    claim = {"worker_id": worker_id, "start": True}
    ending = {"status": "completed", "claim_next": {**claim, "max_tasks": 1}}
    async with new_client(target) as client:
        current: dict[str, Any] | None = None
        while True:
            if current is None:
                reply, _elapsed = await call(client, "POST", f"{API}/tasks/claim", claim)
                if reply["task"] is None:
                    await asyncio.sleep(BACKOFF_SECONDS)
                    continue
                if not reply.get("started"):
                    raise BenchError("the hub ignores claim start (TASKHUB_WORKER_SHORTCUTS?)")
                current = reply["task"]
            seen.got(index, current["id"])
            if hold:
                await asyncio.sleep(hold)
            body = {**ending, "claim_token": current["claim_token"]}
            reply, _elapsed = await call(client, "PATCH", f"{API}/tasks/{current['id']}", body)
            if "next" not in reply:
                raise BenchError("the hub ignores claim_next (TASKHUB_WORKER_SHORTCUTS?)")
            current = reply["next"][0] if reply["next"] else None


async def served_while(
    target: Target, run: Registered, seen: Seen, hold: float, body: Awaitable[T]
) -> T:
    """``body``'s result, with the job's workers serving meanwhile (stopped after it)."""
    async with asyncio.TaskGroup() as group:
        loops = [
            group.create_task(shortcut_worker(target, worker_id, index, seen, hold))
            for index, worker_id in enumerate(run.worker_ids)
        ]
        try:
            return await body
        finally:
            for loop in loops:
                loop.cancel()


@dataclass(frozen=True)
class Click:
    """One of B's submits: its task, the position its answer gave, when it was sent and
    when a worker got the task (None if not waited for)."""

    task_id: str
    queue_position: int
    sent: float
    arrived: float | None


async def clicks_of_b(
    b: Target, path: str, seen: Seen, count: int, pause: float, wait: bool
) -> list[Click]:
    """B's ``count`` submits, each after a random pause of up to ``pause`` seconds (so they
    fall at different moments of the workers' tasks) and (``wait``) after the last one
    started."""
    draws = random.Random(7)
    clicks = []
    async with new_client(b) as client:
        for _ in range(count):
            await asyncio.sleep(draws.uniform(0, pause))
            sent = time.perf_counter()
            answer, _elapsed = await call(client, "POST", path, {"payload": {}})
            arrived = await seen.arrival(answer["id"]) if wait else None
            clicks.append(Click(answer["id"], answer["queue_position"], sent, arrived))
    return clicks


async def hub_view(target: Target, job_id: UUID, a_id: UUID, clicks: list[Click]) -> list[Any]:
    """Per click, from the hub's own timestamps: B's task's ``created_at`` and
    ``started_at``, A's tasks not yet started at its submit, and A's tasks started between
    its submit and its start."""
    of_a = (task.c.job_id == job_id, task.c.submitted_by == a_id)
    count = select(func.count()).select_from(task)
    views = []
    async with hub_database(target) as db, db.read() as conn:
        for click in clicks:
            mine = select(task.c.created_at, task.c.started_at).where(
                task.c.id == UUID(click.task_id)
            )
            b = (await conn.execute(mine)).one()
            later = or_(task.c.started_at.is_(None), task.c.started_at > b.created_at)
            pending = await conn.scalar(count.where(*of_a, later))
            ahead = None
            if b.started_at is not None:
                before_b = task.c.started_at < b.started_at
                ahead = await conn.scalar(
                    count.where(*of_a, task.c.started_at > b.created_at, before_b)
                )
            views.append((b.created_at, b.started_at, pending, ahead))
    return views


async def starve(target: Target, order: str, hold: float, sizes: Sizes) -> dict[str, Any]:
    """A's backlog, the workers, then B's submit(s): one ``starvation`` line."""
    (a_id, a), (_b_id, b) = await new_users(target, 2)
    measured = order == FAIR or not hold  # FIFO at 100 ms: 250 s; implied instead
    count = sizes.clicks if order == FAIR else 1
    seen = Seen(WORKERS, WARMUP_TASKS)
    timing: dict[str, float] = {}

    async with registered(target, order, WORKERS) as run:
        path = run.submit_path

        async def backlog_then_b() -> list[Click]:
            started = time.perf_counter()
            backlog = RunState(total=sizes.backlog)
            async with asyncio.TaskGroup() as group:
                for share in split(sizes.backlog, A_CONNECTIONS):
                    group.create_task(submitter(a, backlog, path, share))
            timing["a_submit_s"] = time.perf_counter() - started

            async def b_clicks() -> list[Click]:
                await seen.warm.wait()
                return await clicks_of_b(b, path, seen, count, max(hold, 0.02), measured)

            return await served_while(target, run, seen, hold, b_clicks())

        clicks, error = await bounded(backlog_then_b(), RUN_TIMEOUT_SECONDS)
        views = await hub_view(target, UUID(run.job["id"]), a_id, clicks or [])
    return starvation_line(
        target.name, order, hold, sizes, clicks or [], views, seen, timing, error
    )


def starvation_line(
    target: str,
    order: str,
    hold: float,
    sizes: Sizes,
    clicks: list[Click],
    views: list[Any],
    seen: Seen,
    timing: dict[str, float],
    error: str | None,
) -> dict[str, Any]:
    """The ``starvation`` JSON line of one run."""
    service = seen.service_seconds()
    hub_waits = [(started - created).total_seconds() for created, started, *_ in views if started]
    client_waits = [c.arrived - c.sent for c in clicks if c.arrived is not None]
    position = max((c.queue_position for c in clicks), default=None)
    wait_max = max(hub_waits, default=None)
    goal = None if service is None else 2 * service * 1000 + GOAL_SLACK_MS
    implied = None
    if service is not None and position is not None:
        implied = (position - 1) * service / WORKERS
    note = None
    if clicks and not clicks[0].arrived:
        note = (
            f"FIFO with {hold * 1000:g} ms tasks not waited for "
            f"({sizes.backlog} x {hold * 1000:g} ms / {WORKERS}); see implied_wait_ms"
        )
    return {
        "scenario": "fair",
        "measure": "starvation",
        "target": target,
        "claim_order": order,
        "task_ms": hold * 1000,
        "workers": WORKERS,
        "backlog": sizes.backlog,
        "a_submit_s": round(timing["a_submit_s"], 2) if "a_submit_s" in timing else None,
        "samples": len(clicks),
        "service_ms": ms(service),
        "a_pending_at_submit": min((v[2] for v in views), default=None),
        "b_queue_position": position,
        "a_started_ahead": max((v[3] for v in views if v[3] is not None), default=None),
        "wait_p50_ms": ms(percentile(hub_waits, 50)),
        "wait_max_ms": ms(wait_max),
        "wait_p50_in_service_times": in_service_times(percentile(hub_waits, 50), service),
        "wait_max_in_service_times": in_service_times(wait_max, service),
        "client_wait_p50_ms": ms(percentile(client_waits, 50)),
        "client_wait_max_ms": ms(max(client_waits, default=None)),
        "implied_wait_ms": ms(implied),
        "goal_ms": None if goal is None else round(goal, 2),
        "meets_goal": (None if goal is None or wait_max is None else wait_max * 1000 <= goal),
        "note": note,
        "load_avg_1m": load_average(),
        "error": error,
    }


def in_service_times(seconds: float | None, service: float | None) -> float | None:
    return None if seconds is None or not service else round(seconds / service, 2)


async def bench_starvation(target: Target, sizes: Sizes) -> Results:
    results = []
    for hold in TASK_SECONDS:
        for order in (FAIR, FIFO):
            log(f"[fair starvation {target.name}] {order}, {hold * 1000:g} ms tasks ...")
            results.append(emit(await starve(target, order, hold, sizes)))
    return results


# -- throughput ------------------------------------------------------------------------


async def race(target: Target, users: list[Target], state: RunState, run: Registered) -> None:
    """Each user submits its part of the run's tasks while the workers claim, start and
    complete them (``throughput.worker``), until every task is completed."""
    async with asyncio.TaskGroup() as group:
        for user, share in zip(users, split(state.total, len(users)), strict=True):
            group.create_task(submitter(user, state, run.submit_path, share))
        for worker_id in run.worker_ids:
            group.create_task(worker(target, state, worker_id, BACKOFF_SECONDS))


async def throughput_run(
    target: Target, users: list[Target], order: str, tasks: int, round_number: int
) -> dict[str, Any]:
    state = RunState(total=tasks)
    async with registered(target, order, WORKERS) as run:
        cpu_at_start, started = cpu_seconds(target.pid, target.database_pid), time.perf_counter()
        _none, error = await bounded(race(target, users, state, run), RUN_TIMEOUT_SECONDS)
        cpu = cpu_used(cpu_at_start, cpu_seconds(target.pid, target.database_pid))
    seconds = max(state.completed_at.values(), default=started) - started
    line = summarise(target.name, WORKERS, state, seconds, error, cpu)
    extra = {"measure": "throughput", "claim_order": order, "submitters": len(users)}
    return {**line, "scenario": "fair", **extra, "round": round_number}


def throughput_ratio(target: str, runs: Results) -> dict[str, Any]:
    """Medians of each order's successful runs, and fair / FIFO."""
    medians: dict[str, float | None] = {}
    for order in ORDERS:
        rates = [r["tasks_per_s"] for r in runs if r["claim_order"] == order and not r["error"]]
        medians[order] = statistics.median(rates) if rates else None
    fifo, fair = medians[FIFO], medians[FAIR]
    ratio = round(fair / fifo, 3) if fifo and fair is not None else None
    return {
        "scenario": "fair",
        "measure": "throughput_ratio",
        "target": target,
        "samples": min(sum(1 for r in runs if r["claim_order"] == o) for o in ORDERS),
        "fifo_tasks_per_s": fifo,
        "fair_tasks_per_s": fair,
        "fair_over_fifo": ratio,
        "meets_goal": None if ratio is None else ratio >= THROUGHPUT_GOAL,
        "load_avg_1m": load_average(),
        "error": None if ratio is not None else "no successful run of each order",
    }


async def bench_throughput(target: Target, sizes: Sizes) -> Results:
    users = [user for _id, user in await new_users(target, SUBMITTERS)]
    runs: Results = []
    for round_number in range(1, sizes.rounds + 1):
        for order in ORDERS:
            line = await throughput_run(target, users, order, sizes.tasks, round_number)
            log(
                f"[fair throughput {target.name} round {round_number}] {order}: "
                f"{line['tasks_per_s']} tasks/s"
                + (f", ERROR {line['error']}" if line["error"] else "")
            )
            runs.append(emit(line))
    return [*runs, emit(throughput_ratio(target.name, runs))]


# -- claims at depth -------------------------------------------------------------------


def bursts(submitters: list[UUID], per_submitter: int) -> list[UUID]:
    """Who submits, in order: each submitter its tasks back to back, one after another."""
    return [user for user in submitters for _ in range(per_submitter)]


def queue_tasks(
    job_id: UUID, room: str, submits: list[UUID], order: ClaimOrder, end: datetime
) -> Iterator[SeedTask]:
    """A pending task per submit, ``SEED_STEP`` apart and all before ``end``, with the turn
    and share the hub gives them: in a FIFO job its ``created_at`` and no share; in a fair
    job ``next_turn`` over the queue so far (nothing is claimed meanwhile: the head is the
    lowest turn given yet, a share's last its highest)."""
    start = end - SEED_STEP * (len(submits) + 1000)
    head: datetime | None = None
    last: dict[str, datetime] = {}
    for index, user in enumerate(submits):
        created = start + SEED_STEP * index
        share = share_key(order, user, room)
        turn = created
        if share is not None:
            turn = next_turn(created, head, last.get(share))
            last[share] = turn
        head = turn if head is None else min(head, turn)
        yield SeedTask(
            id=new_id(),
            job_id=job_id,
            room_id=room,
            created_at=created,
            submitted_by=user,
            turn_at=turn,
            share_key=share,
        )


async def seed_queues(target: Target, jobs: dict[str, Registered], sizes: Sizes) -> float:
    """The submitters (users without tokens) and each job's queue; then, on PostgreSQL,
    ``VACUUM ANALYZE``. Returns the seconds it took."""
    started = time.perf_counter()
    now = utcnow()
    ids = [new_id() for _ in range(sizes.submitters)]
    submits = bursts(ids, sizes.per_submitter)
    async with hub_database(target) as db:
        await seed_users(db, [(user, f"fair-{user.hex}") for user in ids], now)
        for order, run in jobs.items():
            job_id = UUID(run.job["id"])
            await seed_tasks(db, queue_tasks(job_id, run.room, submits, ClaimOrder(order), now))
        await refresh_statistics(db, vacuum=True)
    return time.perf_counter() - started


async def claims_alternately(
    target: Target, jobs: dict[str, Registered], samples: int
) -> dict[str, tuple[list[float], set[str]]]:
    """``WARMUP_CLAIMS`` untimed, then ``samples`` timed one-task claims of each job, the
    jobs taking turns (which goes first alternates); per job, the timings and the
    submitters of the tasks claimed."""
    measured: dict[str, tuple[list[float], set[str]]] = {order: ([], set()) for order in jobs}
    pairs = list(jobs.items())
    async with new_client(target) as client:
        for index in range(WARMUP_CLAIMS + samples):
            for order, run in pairs if index % 2 == 0 else pairs[::-1]:
                claim = {"worker_id": run.worker_ids[0]}
                reply, elapsed = await call(client, "POST", f"{API}/tasks/claim", claim)
                if reply["task"] is None:
                    raise BenchError(f"a claim of the {order} job found its queue empty")
                if index >= WARMUP_CLAIMS:
                    measured[order][0].append(elapsed)
                    measured[order][1].add(reply["task"]["submitted_by"])
    return measured


def depth_line(
    target: str,
    order: str,
    sizes: Sizes,
    timings: list[float],
    submitters: int | None,
    seed_s: float | None,
    error: str | None = None,
) -> dict[str, Any]:
    return {
        "scenario": "fair",
        "measure": "depth",
        "target": target,
        "claim_order": order,
        "depth": sizes.submitters * sizes.per_submitter,
        "submitters": sizes.submitters,
        **latency_summary(timings),
        "p95_ms": ms(percentile(timings, 95)),
        "distinct_submitters": submitters,
        "seed_s": None if seed_s is None else round(seed_s, 2),
        "load_avg_1m": load_average(),
        "error": error,
    }


async def bench_depth(target: Target, sizes: Sizes) -> Results:
    async with registered(target, FIFO, 1) as fifo, registered(target, FAIR, 1) as fair:
        jobs = {FIFO: fifo, FAIR: fair}
        depth = sizes.submitters * sizes.per_submitter
        log(f"[fair depth {target.name}] seeding 2 x {depth} tasks ...")
        seed_s = await seed_queues(target, jobs, sizes)
        measured = await claims_alternately(target, jobs, sizes.samples)
    lines = {
        order: depth_line(target.name, order, sizes, timings, len(who), seed_s)
        for order, (timings, who) in measured.items()
    }
    fifo_p50, fair_p50 = lines[FIFO]["p50_ms"], lines[FAIR]["p50_ms"]
    ratio = round(fair_p50 / fifo_p50, 3) if fifo_p50 and fair_p50 is not None else None
    lines[FAIR]["p50_over_fifo"] = ratio
    lines[FAIR]["meets_goal"] = None if ratio is None else ratio <= DEPTH_GOAL
    return [emit(lines[order]) for order in ORDERS]


# -- the run ---------------------------------------------------------------------------


BENCHES = {"starvation": bench_starvation, "throughput": bench_throughput, "depth": bench_depth}


def failed_lines(target: str, measure: str, sizes: Sizes, error: str) -> Results:
    """The lines of a measure that could not run."""
    if measure == "depth":
        return [depth_line(target, order, sizes, [], None, None, error) for order in ORDERS]
    return [
        {"scenario": "fair", "measure": measure, "target": target, "samples": 0, "error": error}
    ]


async def bench_fair(
    options: TargetOptions, targets: list[str], sizes: Sizes, measures: list[str] | None = None
) -> Results:
    """Every measure on every target, each on a freshly started hub; a failure becomes
    error lines and the others still run."""
    results: Results = []
    for name in targets:
        for measure in measures or MEASURES:
            try:
                async with FACTORIES[name](options) as target:
                    results += await BENCHES[measure](target, sizes)
            except RUN_FAILURES as exc:
                error = f"{type(exc).__name__}: {exc}"
                log(f"[fair {measure} {name}] failed: {error}")
                results += [emit(line) for line in failed_lines(name, measure, sizes, error)]
    return results


def _cells(result: dict[str, Any], keys: list[str]) -> list[Any]:
    return [result.get(key) for key in keys]


def table(results: Results) -> str:
    """One markdown table per measure (those that have lines)."""
    parts = []
    starvation = [r for r in results if r["measure"] == "starvation" and "claim_order" in r]
    if starvation:
        keys = ["target", "claim_order", "task_ms", "service_ms", "a_pending_at_submit"]
        keys += ["b_queue_position", "samples", "wait_p50_ms", "wait_max_ms"]
        keys += ["wait_max_in_service_times", "client_wait_max_ms", "a_started_ahead"]
        keys += ["implied_wait_ms", "goal_ms", "error"]
        headers = ["target", "order", "task ms", "service ms", "A pending at B's submit"]
        headers += ["B's position", "B's submits", "B wait p50 ms", "B wait max ms"]
        headers += ["max ÷ service", "client wait max ms", "A started ahead of B"]
        headers += ["implied wait ms", "goal ms", "error"]
        rows = [_cells(r, keys) for r in starvation]
        parts.append("Starvation (B's click):\n\n" + markdown_table(headers, rows, left=2))
    runs = [r for r in results if r["measure"] == "throughput" and "tasks_per_s" in r]
    if runs:
        headers = ["target", "order", "round", "tasks/s", "p50 ms", "p99 ms"]
        headers.append("CPU ms/task client / server / db")
        rows = [
            [
                *_cells(r, ["target", "claim_order", "round", "tasks_per_s", "p50_ms", "p99_ms"]),
                cpu_per_task(r) + (" (failed)" if r["error"] else ""),
            ]
            for r in runs
        ]
        parts.append("Throughput (W = 4):\n\n" + markdown_table(headers, rows, left=2))
    ratios = [r for r in results if r["measure"] == "throughput_ratio"]
    if ratios:
        keys = ["target", "samples", "fifo_tasks_per_s", "fair_tasks_per_s", "fair_over_fifo"]
        headers = ["target", "rounds", "FIFO median tasks/s", "fair median tasks/s", "fair ÷ FIFO"]
        rows = [_cells(r, keys) for r in ratios]
        parts.append("Throughput, medians:\n\n" + markdown_table(headers, rows))
    depth = [r for r in results if r["measure"] == "depth"]
    if depth:
        keys = ["target", "claim_order", "depth", "samples", "p50_ms", "p95_ms", "p99_ms"]
        keys += ["max_ms", "distinct_submitters", "p50_over_fifo", "error"]
        headers = ["target", "order", "depth", "claims", "p50 ms", "p95 ms", "p99 ms", "max ms"]
        headers += ["submitters claimed", "p50 ÷ FIFO", "error"]
        rows = [_cells(r, keys) for r in depth]
        parts.append("Claim at depth:\n\n" + markdown_table(headers, rows, left=2))
    failed = [r for r in results if r["measure"] != "depth" and "claim_order" not in r]
    failed = [r for r in failed if r["measure"] != "throughput_ratio"]
    if failed:
        parts.append("\n".join(f"- {r['target']} {r['measure']}: {r['error']}" for r in failed))
    return "\n\n".join(parts)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = scenario_parser("fair", __doc__)
    parser.add_argument(
        "--targets", type=choices(TARGETS, "targets"), default=list(TARGETS), help="sqlite,postgres"
    )
    parser.add_argument(
        "--only",
        type=choices(MEASURES, "measures"),
        default=list(MEASURES),
        help="comma-separated measures: " + ", ".join(MEASURES),
    )
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument("--rounds", type=int, help="throughput runs of each order (3; quick 1)")
    args = parser.parse_args(argv)
    if args.rounds is not None and args.rounds < 1:
        parser.error("--rounds must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = QUICK if args.quick else FULL
    if args.rounds is not None:
        sizes = replace(sizes, rounds=args.rounds)

    async def work(options: TargetOptions, results: Results) -> None:
        results += await bench_fair(options, args.targets, sizes, args.only)

    return run_command(args, "fair", work, table)


if __name__ == "__main__":
    sys.exit(main())
