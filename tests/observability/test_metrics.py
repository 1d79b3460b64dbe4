"""``GET /metrics`` of an in-process hub (SQLite and PostgreSQL): every metric moves with the
work that should move it. The metrics are process-wide, so each test compares two scrapes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import httpx
import pytest
from prometheus_client import REGISTRY
from prometheus_client.exposition import choose_encoder

from taskhub.observability import metrics
from taskhub.rules.events import EventBatch, TaskStatusChanged
from taskhub.rules.states import TaskStatus
from taskhub.settings import Settings
from taskhub.validation import payload_checks
from tests.support.api import JOB
from tests.support.costly_payloads import COSTLY, POINTS_SCHEMA, until_checks_waiting
from tests.support.metrics import Samples
from tests.support.waiting import eventually

TRANSITIONS = "taskhub_task_transitions_total"


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, long_poll_max_wait_seconds=5, sweeper_enabled=False)


async def scrape(http: httpx.AsyncClient) -> Samples:
    response = await http.get("/metrics")
    assert response.status_code == 200, response.text
    return Samples(response.text)


def to_status_counts(samples: Samples) -> dict[str, float]:
    """Transitions summed over ``from_status``, by ``to_status``."""
    totals: dict[str, float] = {}
    for (name, labels), value in samples.values.items():
        if name == TRANSITIONS:
            target = dict(labels)["to_status"]
            totals[target] = totals.get(target, 0.0) + value
    return totals


async def test_metrics_is_unauthenticated_prometheus_text(http: httpx.AsyncClient) -> None:
    response = await http.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"] == choose_encoder(None)[1]  # the library's
    assert response.headers["content-type"].startswith("text/plain; version=")
    samples = Samples(response.text)
    for name in (
        "taskhub_task_transitions",
        "taskhub_claim_seconds",
        "taskhub_long_poll_seconds",
        "taskhub_long_poll_waiters",
        "taskhub_connected_sockets",
        "taskhub_sweeper_runs",
        "taskhub_sweeper_cleaned",
        "taskhub_queue_depth",
        "taskhub_queue_waiting",
    ):
        assert name in samples.names, name


async def test_every_labelled_series_starts_at_zero(http: httpx.AsyncClient) -> None:
    """Drops and abandoned long-polls are rare: rate() and alerts need their series first."""
    response = await http.get("/metrics")
    samples = Samples(response.text)
    for outbox in ("socket-events", "wake-ups"):
        assert samples.value("taskhub_realtime_dropped_total", {"outbox": outbox}) is not None
    for outcome in ("woken", "timeout", "shutdown", "abandoned"):
        labels = {"outcome": outcome}
        assert samples.value("taskhub_long_poll_seconds_count", labels) is not None, outcome
    for outcome in ("claimed", "empty"):
        assert samples.value("taskhub_claim_seconds_count", {"outcome": outcome}) is not None
    (help_line,) = [
        line
        for line in response.text.splitlines()
        if line.startswith("# HELP taskhub_long_poll_seconds ")
    ]
    assert all(outcome in help_line for outcome in ("woken", "timeout", "shutdown", "abandoned"))


async def test_a_lifecycle_counts_each_transition_by_target_status(alice, http) -> None:
    job = await alice.register()
    before = to_status_counts(await scrape(http))
    task = await alice.submit(JOB)
    assert (await alice.claim(job["worker_id"]))["id"] == task["id"]
    assert (await alice.transition(task["id"], "running")).status_code == 200
    assert (await alice.transition(task["id"], "completed")).status_code == 200
    after = to_status_counts(await scrape(http))
    moved = {status: after.get(status, 0) - before.get(status, 0) for status in after}
    assert moved == {
        "pending": 1,
        "claimed": 1,
        "running": 1,
        "completed": 1,
        "failed": 0,
        "cancelled": 0,
    }


def test_transition_labels_use_the_previous_status_and_skip_progress() -> None:
    def counted(source: str, target: str) -> float:
        labels = {"from_status": source, "to_status": target}
        return REGISTRY.get_sample_value(TRANSITIONS, labels) or 0.0

    @dataclass
    class Task:  # the fields TaskStatusChanged reads
        id: str
        room_id: str
        status: TaskStatus

    def event(status: TaskStatus, previous: TaskStatus | None) -> TaskStatusChanged:
        return TaskStatusChanged(Task("t", "r", status), previous)  # type: ignore[arg-type]

    before = {
        pair: counted(*pair)
        for pair in (("none", "pending"), ("claimed", "running"), ("running", "running"))
    }
    metrics.record_transitions(
        [
            event(TaskStatus.PENDING, None),
            event(TaskStatus.RUNNING, TaskStatus.CLAIMED),
            event(TaskStatus.RUNNING, TaskStatus.RUNNING),  # a progress report
        ]
    )
    assert counted("none", "pending") == before[("none", "pending")] + 1
    assert counted("claimed", "running") == before[("claimed", "running")] + 1
    assert counted("running", "running") == before[("running", "running")]


async def test_claims_are_timed_by_outcome(alice, http) -> None:
    job = await alice.register()
    before = await scrape(http)
    assert await alice.claim(job["worker_id"]) is None
    await alice.submit(JOB)
    assert await alice.claim(job["worker_id"]) is not None
    after = await scrape(http)
    for outcome in ("claimed", "empty"):
        labels = {"outcome": outcome}
        assert after.count("taskhub_claim_seconds_count", labels) == (
            before.count("taskhub_claim_seconds_count", labels) + 1
        )
        assert after.count("taskhub_claim_seconds_sum", labels) > before.count(
            "taskhub_claim_seconds_sum", labels
        )


async def test_long_polls_are_counted_while_waiting_and_timed_by_outcome(alice, http) -> None:
    await alice.register()
    woken, timed_out = await alice.submit(JOB), await alice.submit(JOB)
    before = await scrape(http)

    polls = [
        asyncio.create_task(alice.get(f"/tasks/{task['id']}", headers={"Prefer": "wait=2"}))
        for task in (woken, timed_out)
    ]
    expected = before.count("taskhub_long_poll_waiters") + 2

    async def both_waiting() -> bool:
        return (await scrape(http)).count("taskhub_long_poll_waiters") == expected

    # Both polls reach their wait within moments (1.5 s at most).
    await eventually(both_waiting, 1.5, "both long-polls waiting")

    await alice.transition(woken["id"], "cancelled")
    responses = await asyncio.gather(*polls)
    assert [r.json()["status"] for r in responses] == ["cancelled", "pending"]

    after = await scrape(http)
    assert after.value("taskhub_long_poll_waiters") == before.value("taskhub_long_poll_waiters")
    for outcome in ("woken", "timeout"):
        labels = {"outcome": outcome}
        assert after.count("taskhub_long_poll_seconds_count", labels) == (
            before.count("taskhub_long_poll_seconds_count", labels) + 1
        )
    timeout_waited = after.count("taskhub_long_poll_seconds_sum", {"outcome": "timeout"}) - (
        before.count("taskhub_long_poll_seconds_sum", {"outcome": "timeout"})
    )
    assert 0.9 <= timeout_waited < 3


async def test_queue_depth_is_read_per_job_at_scrape_time(alice, http) -> None:
    job = await alice.register()
    await alice.register(name="Idle")
    for _ in range(3):
        await alice.submit(JOB)
    depths = (await scrape(http)).labelled("taskhub_queue_depth", "job")
    assert depths[JOB] == 3
    assert depths["room1:modifiers:Idle"] == 0

    await alice.claim(job["worker_id"])
    depths = (await scrape(http)).labelled("taskhub_queue_depth", "job")
    assert depths[JOB] == 2


async def test_the_tasks_waiting_for_their_time_are_a_gauge_of_their_own(alice, http) -> None:
    await alice.register()
    await alice.submit(JOB)
    for _ in range(2):
        await alice.submit(JOB, delay_seconds=3600)
    samples = await scrape(http)
    assert samples.labelled("taskhub_queue_depth", "job")[JOB] == 3
    assert samples.labelled("taskhub_queue_waiting", "job")[JOB] == 2


async def test_sweeper_runs_and_what_they_cleaned_are_counted(app, http) -> None:
    before = await scrape(http)
    # Every kind is there from the start (at zero until a sweep counts it).
    for kind in ("workers_removed", "internal_dispatched", "tasks_purged"):
        assert before.value("taskhub_sweeper_cleaned_total", {"kind": kind}) is not None, kind
    report = await app.hub.sweeper.run_once()
    assert report.ran
    after = await scrape(http)
    assert (
        after.count("taskhub_sweeper_runs_total") == before.count("taskhub_sweeper_runs_total") + 1
    )
    for kind in ("workers_removed", "leases_expired", "tasks_failed"):
        assert after.value("taskhub_sweeper_cleaned_total", {"kind": kind}) is not None, kind


def test_sweep_reports_are_read_generically() -> None:
    """Every integer field of the report is a kind, including fields added later."""

    @dataclass
    class FutureReport:
        ran: bool = True
        workers_removed: int = 2
        tasks_purged: int = 5
        events: EventBatch = field(default_factory=EventBatch)

    def cleaned(kind: str) -> float | None:
        return REGISTRY.get_sample_value("taskhub_sweeper_cleaned_total", {"kind": kind})

    def runs() -> float:
        return REGISTRY.get_sample_value("taskhub_sweeper_runs_total") or 0.0

    runs_before = runs()
    removed, purged = cleaned("workers_removed") or 0.0, cleaned("tasks_purged") or 0.0
    metrics.record_sweep(FutureReport())
    assert runs() == runs_before + 1
    assert cleaned("workers_removed") == removed + 2
    assert cleaned("tasks_purged") == purged + 5
    assert cleaned("ran") is None
    assert cleaned("events") is None


def transition_counts(samples: Samples) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["from_status"], dict(labels)["to_status"]): value
        for (name, labels), value in samples.values.items()
        if name == TRANSITIONS
    }


async def test_transitions_are_labelled_with_the_status_they_left(alice, http) -> None:
    job = await alice.register()
    before = transition_counts(await scrape(http))
    done, retried, dropped = [await alice.submit(JOB, max_attempts=2) for _ in range(3)]
    await alice.transition(dropped["id"], "cancelled")
    for task in (done, retried):
        claimed = await alice.claim(job["worker_id"])
        assert claimed["id"] == task["id"]
        await alice.transition(task["id"], "running")
    await alice.transition(done["id"], "completed")
    await alice.transition(retried["id"], "failed", retry=True)
    after = transition_counts(await scrape(http))
    moved = {pair: after[pair] - before.get(pair, 0) for pair in after}
    assert {pair: n for pair, n in moved.items() if n} == {
        ("none", "pending"): 3,
        ("pending", "cancelled"): 1,
        ("pending", "claimed"): 2,
        ("claimed", "running"): 2,
        ("running", "completed"): 1,
        ("running", "pending"): 1,  # a retry
    }


async def test_costly_payloads_are_counted_by_outcome_and_gauged_while_they_wait(
    alice, http
) -> None:
    await alice.register(name="Points", schema=POINTS_SCHEMA)
    points = "room1:modifiers:Points"
    before = await scrape(http)
    costly = [
        asyncio.create_task(alice.post(f"/rooms/room1/tasks/{points}", json={"payload": COSTLY}))
        for _ in range(2)
    ]
    await until_checks_waiting(payload_checks.PROCESS_CHECKS, 2)
    during = await scrape(http)
    busy = await alice.post(f"/rooms/room1/tasks/{points}", json={"payload": COSTLY})
    assert busy.status_code == 503
    assert [(await task).status_code for task in costly] == [202, 202]
    await alice.submit(points, payload={"points": [[1, 2, 3]]})  # cheap: not counted
    after = await scrape(http)
    waiting = "taskhub_costly_payloads_waiting"
    assert during.count(waiting) == before.count(waiting) + 2
    assert after.count(waiting) == before.count(waiting)
    outcomes = {"validated": 2, "busy": 1}
    for outcome, more in outcomes.items():
        name, labels = "taskhub_costly_payloads_total", {"outcome": outcome}
        assert after.count(name, labels) == before.count(name, labels) + more


async def test_claimed_tasks_waits_are_observed_by_claim_order_and_submitter(
    alice, bob, http
) -> None:
    """In a fair job, a task whose submitter had tasks queued already is ``backlogged``;
    one that joined at the head ``occasional``; a FIFO job's are not classed."""
    fifo = await alice.register()
    fair = await alice.register(name="Fair", claim_order="fair-by-submitter")
    before = await scrape(http)
    await alice.submit(JOB)
    await bob.submit("room1:modifiers:Fair")
    await bob.submit("room1:modifiers:Fair")
    assert await alice.claim(fifo["worker_id"]) is not None
    claimed = await alice.post(
        "/tasks/claim", json={"worker_id": fair["worker_id"], "max_tasks": 2}
    )
    assert len(claimed.json()["tasks"]) == 2
    after = await scrape(http)
    name = "taskhub_task_wait_seconds_count"
    for order, submitter in (("fifo", "unclassed"), ("fair", "occasional"), ("fair", "backlogged")):
        labels = {"claim_order": order, "submitter": submitter}
        assert after.count(name, labels) == before.count(name, labels) + 1, labels


async def test_tasks_held_back_by_a_running_limit_are_a_gauge_per_job(alice, bob, http) -> None:
    job = await alice.register(max_running_per_submitter=1)
    for _ in range(3):
        await alice.submit(JOB)
    await bob.submit(JOB)
    assert (await scrape(http)).labelled("taskhub_tasks_held_back", "job") == {}
    await alice.post("/tasks/claim", json={"worker_id": job["worker_id"], "max_tasks": 5})
    # alice has her 1 running: her other 2 wait; bob's was claimed too.
    held = (await scrape(http)).labelled("taskhub_tasks_held_back", "job")
    assert held == {JOB: 2}
